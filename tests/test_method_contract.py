"""The method contract (fedlib.methods.contract.MethodInfo) and the shared per-cluster average."""
import dataclasses
import importlib
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import fedlib.methods as M
from fedlib.methods.base import per_cluster_average
from fedlib.methods.contract import MethodInfo


def test_per_cluster_average_by_hand():
    models = {"w": torch.tensor([[0.0, 0.0], [10.0, 10.0], [20.0, 20.0]]),
              "b": torch.tensor([7.0, 8.0, 9.0])}
    members = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [100.0, 100.0]]),
               "b": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    out = per_cluster_average(models, members, cluster=[2, 0, 2, 1], weights=[1, 5, 3, 0])
    # cluster 0: member 1 alone; cluster 2: (1·[1, 2] + 3·[5, 6]) / 4 = [4, 5], b (1 + 9) / 4 = 2.5;
    # cluster 1: its only member weighs 0, so it keeps its model
    assert torch.equal(out["w"], torch.tensor([[3.0, 4.0], [10.0, 10.0], [4.0, 5.0]]))
    assert torch.equal(out["b"], torch.tensor([2.0, 8.0, 2.5]))
    assert torch.equal(models["w"][0], torch.zeros(2))  # new tensors: the input is untouched


def test_per_cluster_average_keeps_the_models_dtype_and_unpicked_clusters():
    models = {"w": torch.zeros(3, 2, dtype=torch.float32)}
    members = {"w": torch.tensor([[1.0, 3.0], [3.0, 5.0]], dtype=torch.float64)}
    out = per_cluster_average(models, members, np.array([1, 1]), np.array([1.0, 1.0]))
    assert out["w"].dtype == torch.float32
    assert torch.equal(out["w"], torch.tensor([[0.0, 0.0], [2.0, 4.0], [0.0, 0.0]]))


# ----------------------------------------------------------------------------- the registry
# the tables the registry replaced, as they were written by hand (a drift is caught here)
OLD_MODULES = {"cl": "cl", "local": "local", "fedavg": "fedavg", "fedprox": "fedprox", "fedavgm": "fedopt",
               "fedadagrad": "fedopt", "fedyogi": "fedopt", "fedadam": "fedopt", "poc": "poc", "haccs": "haccs",
               "fedcls": "fedcls", "cfl": "cfl", "fedsoft": "fedsoft", "clust_psi_pfl": "clust_psi_pfl",
               "psi_pfl": "psi_pfl", "cafa": "cafa", "fedprism": "fedprism", "ifca": "ifca", "fedclust": "fedclust",
               "fedamp": "fedamp", "pfedlia": "pfedlia", "oracle": "oracle", "fedfomo": "fedfomo",
               "fedproto": "fedproto", "fesem": "fesem"}
OLD_DISPLAY_NAMES = {"cl": "CL", "local": "Local", "fedavg": "FedAvg", "fedprox": "FedProx", "fedavgm": "FedAvgM",
                     "fedadagrad": "FedAdagrad", "fedyogi": "FedYogi", "fedadam": "FedAdam", "poc": "PoC",
                     "haccs": "HACCS", "fedcls": "FedCLS", "cfl": "CFL", "fedsoft": "FedSoft",
                     "clust_psi_pfl": "Clust-PSI-PFL", "psi_pfl": "PSI-PFL", "cafa": "CAFA", "fedprism": "FedPrism",
                     "ifca": "IFCA", "fedclust": "FedClust", "fedamp": "FedAMP", "pfedlia": "pFedLIA",
                     "oracle": "Oracle", "fedfomo": "FedFomo", "fedproto": "FedProto", "fesem": "FeSEM"}
OLD_GROUPING_METHODS = ("clust_psi_pfl", "cfl", "ifca", "fedclust", "fedprism", "fesem", "pfedlia", "oracle")
OLD_PARAM_AVERAGE = ("ifca", "fedclust", "cfl", "fedamp")
# the module attributes the hooks were found by (getattr) before the registry
OLD_STREAMS_AVERAGE = {"fedavg", "fedprox", "fedavgm", "fedadagrad", "fedyogi", "fedadam", "poc", "haccs", "fedcls",
                       "clust_psi_pfl", "psi_pfl", "oracle"}
OLD_HOOKS = {"needs_validation": {"psi_pfl", "cafa", "pfedlia", "fedfomo"},
             "check_protocol": {"cfl", "pfedlia", "oracle"}, "check_arch": {"fedprism"}}
OLD_PROTOCOLS = {"oracle": ("pathological_clusters",)}


def test_the_derived_tables_equal_the_ones_they_replace():
    assert M.METHODS == tuple(OLD_MODULES)
    assert M.DISPLAY_NAMES == OLD_DISPLAY_NAMES and list(M.DISPLAY_NAMES) == list(OLD_DISPLAY_NAMES)
    assert set(M.STREAMING_METHODS) == OLD_STREAMS_AVERAGE
    for hook, methods in OLD_HOOKS.items():
        assert {m for m in M.METHODS if getattr(M.method_info(m), hook) is not None} == methods, hook
    assert {m: M.method_info(m).protocols for m in M.METHODS if M.method_info(m).protocols} == OLD_PROTOCOLS
    for m in M.METHODS:  # each method still lives where it did
        module = importlib.import_module(f"fedlib.methods.{OLD_MODULES[m]}")
        assert M.get_method(m) is (module.METHODS[m] if OLD_MODULES[m] == "fedopt" else module)
    # the studies' own lists (the workbook's, not the method contract's), in the registry's order
    from workbook import cross_paper, report_cells
    assert cross_paper.GROUPING_METHODS == tuple(m for m in M.METHODS if m in OLD_GROUPING_METHODS)
    assert set(report_cells.PARAM_AVERAGE_METHODS) == set(OLD_PARAM_AVERAGE)


def test_every_entry_is_complete_and_consistent():
    names = set()
    for module_name in M.MODULES:
        module = importlib.import_module(f"fedlib.methods.{module_name}")
        infos = module.INFO if isinstance(module.INFO, tuple) else (module.INFO,)
        for info in infos:
            assert isinstance(info, MethodInfo) and M.method_info(info.name) is info
            impl = M.get_method(info.name)
            assert info.name == impl.NAME and info.hyper is impl.Hyper and info.run == impl.run
            assert dict(info.grid) == dict(getattr(impl, "GRID", {}))
            for hook in ("needs_validation", "check_protocol", "check_arch"):
                fn = getattr(info, hook)
                # a hook is the module's own function of that name (its tests and docs call it there)
                assert fn is None or fn is getattr(module, hook), (info.name, hook)
            if info.needs_validation is not None:
                assert isinstance(info.needs_validation(info.hyper()), bool)
            names.add(info.name)
    assert names == set(M.METHODS)
    shown = [M.display_name(m) for m in M.METHODS]
    assert len(set(shown)) == len(shown)
    assert M.display_name("fedavg") == "FedAvg" and M.display_name("cfl ε1=auto") == "cfl ε1=auto"
    assert M.display_name(None) is None


def test_a_new_method_module_is_found_in_the_package():
    assert set(M.FOUND) == set(M.MODULES)  # every method module of the package is ordered today
    assert M.method_modules(M.MODULES, M.FOUND) == M.MODULES
    # a new module, not (yet) listed: found, its rows after the listed ones
    assert M.method_modules(M.MODULES, (*M.FOUND, "toy", "aaa")) == (*M.MODULES, "aaa", "toy")
    with pytest.raises(ValueError, match=r"MODULES names \['fedmagic'\], not modules of fedlib.methods"):
        M.method_modules((*M.MODULES, "fedmagic"), M.FOUND)


def test_a_new_method_is_one_module():
    toy = types.ModuleType("toy_method")

    @dataclasses.dataclass(frozen=True)
    class Hyper:
        k: int = 2

    def needs_validation(hp):
        return True

    toy.INFO = MethodInfo("toy", "Toy", Hyper, lambda ctx, hp: None, grid={"k": (2, 3)},
                          streams_average=True, needs_validation=needs_validation)
    modules = [importlib.import_module(f"fedlib.methods.{m}") for m in M.MODULES] + [toy]
    registry = M.build_registry(modules)
    assert tuple(registry) == M.METHODS + ("toy",)
    info, impl = registry["toy"]
    assert impl is toy and info.display_name == "Toy" and info.needs_val(Hyper())
    # every table is derived the same way from the entries
    assert [i.display_name for i, _ in registry.values()] == list(M.DISPLAY_NAMES.values()) + ["Toy"]
    assert [m for m, (i, _) in registry.items() if i.streams_average] == [*M.STREAMING_METHODS, "toy"]


def test_the_registry_refuses_a_duplicate_or_a_malformed_entry():
    fedavg = importlib.import_module("fedlib.methods.fedavg")
    twin = types.ModuleType("twin")
    twin.INFO = dataclasses.replace(fedavg.INFO, display_name="Twin")
    with pytest.raises(ValueError, match="method 'fedavg' is declared twice"):
        M.build_registry([fedavg, twin])
    same = types.ModuleType("same")
    same.INFO = dataclasses.replace(fedavg.INFO, name="fedavg2")
    with pytest.raises(ValueError, match=r"display names must be unique, \['FedAvg'\]"):
        M.build_registry([fedavg, same])
    bad = types.ModuleType("bad")
    bad.INFO = {"name": "bad"}
    with pytest.raises(TypeError, match="bad.INFO must be a MethodInfo"):
        M.build_registry([bad])
    with pytest.raises(ValueError, match="MethodInfo.resumable of 'x' must be a bool"):
        MethodInfo("x", "X", fedavg.Hyper, fedavg.run, resumable="yes")
    with pytest.raises(ValueError, match="MethodInfo.check_arch of 'x' must be None or callable"):
        MethodInfo("x", "X", fedavg.Hyper, fedavg.run, check_arch="conv")
    with pytest.raises(ValueError, match="MethodInfo.protocols of 'x' must be None or a tuple"):
        MethodInfo("x", "X", fedavg.Hyper, fedavg.run, protocols="dirichlet")
    with pytest.raises(ValueError, match="unknown method 'fedmagic'"):
        M.method_info("fedmagic")


def test_importing_the_registry_leaves_sklearn_and_scipy_out():
    code = ("import sys, fedlib.methods; "
            "assert not {'sklearn', 'scipy'} & set(sys.modules), sorted({'sklearn', 'scipy'} & set(sys.modules))")
    subprocess.run([sys.executable, "-c", code], check=True)
