"""Test-session settings.

Unit tests train tiny models, for which torch's intra-op threads cost more than they save
(measured here: the method suites run 5-10x faster with one thread on a 2-core machine).
Each test compares numbers computed within this one process, so the thread count does not
affect what is asserted. Papermill (``make workbook``) runs the notebooks on torch's default
thread count; ``make test`` runs each of its workers, nbval's kernels included, on one thread.

The ``cross_cpu`` marker names the tests whose numbers come from the CPU's kernels: training,
evaluation, the engine's numeric kernels, the pinned per-method results
(tests/test_method_regression.py) and tests/test_cross_cpu.py. ``make test-other-cpu`` runs
only those (and nbval over the notebooks) under the kernels of tests/other_cpu.env. A test that
calls one of the engine's entry points that run a model (:data:`WATCHED`) without the marker
fails, in its own process, with a message saying to add it: so a new training test cannot
silently drop out of the cross-CPU check. A call that refuses its input (ValueError or
TypeError, as fedlib's validation raises before any work) does not count: validation tests
need no marker. Calls made in other processes (subprocesses, Ray and Flower workers) are not
seen; tests that train only there are marked by hand.

Under pytest-xdist (``make test``: ``-n 2 --dist loadfile``) each test file is one unit, kept
on one worker (a file's module fixtures are computed once; a notebook's cells share one kernel),
and notebooks 05 and 06 are one unit, in that order: 06 reads the records of the grid 05 trains
and does not wait for them (:func:`fedlib.experiment.load_grid`). Other readers of 05's grid
(tests/test_cross_cpu.py) go through :func:`fedlib.experiment.run_grid`, which waits for the
runs another process has claimed, or computes them: the same records, in any order.
"""
from __future__ import annotations

import functools
import importlib
import sys

import pytest
import torch

torch.set_num_threads(1)

CROSS_CPU = "cross_cpu"

#: module -> its functions that run a model (training, evaluation, prediction, class embeddings):
#: what a test reaches when its numbers depend on the CPU's instruction set and thread count.
WATCHED = {
    "fedlib.engine.train": ("local_train",),
    "fedlib.engine.evaluate": ("evaluate", "evaluate_global", "loss_matrix", "predict_logits"),
    "fedlib.engine.predict": ("evaluate_with",),
    "fedlib.engine.prototypes": ("class_embeddings",),
}

#: Test files (nodeid prefixes) that run as one xdist work unit, in collection order: notebook 06
#: reads the grid notebook 05 trains (load_grid raises if a record is missing; it does not wait);
#: the tests that start a local Ray instance (Ray's own and Flower's simulation) one at a time.
SAME_WORKER = (("notebooks/05_", "notebooks/06_"), ("tests/test_flower.py", "tests/test_ray_grid.py"))


class _Guard:
    """Which test is running, which fixture is being set up, and which watched functions computed."""

    item: pytest.Item | None = None
    fixtures: list = []  # the fixture definitions being set up, innermost last
    reached: list[str] = []  # watched functions the current unmarked test called
    training_fixtures: dict = {}  # (baseid, argname) -> the watched function its setup called


def _marked(item: pytest.Item) -> bool:
    return item.get_closest_marker(CROSS_CPU) is not None


def _advice(item: pytest.Item, what: str) -> str:
    return (f"{item.nodeid} {what}, so its numbers depend on the CPU's kernels, but it is not marked "
            f"{CROSS_CPU}: add `@pytest.mark.{CROSS_CPU}` to the test (or `pytestmark = pytest.mark.{CROSS_CPU}` "
            "to its module) so that `make test-other-cpu` runs it under tests/other_cpu.env")


def _computed(name: str) -> None:
    """Called when a watched function has computed (returned, or diverged): remember it, and
    fail an unmarked test at once."""
    for fixturedef in _Guard.fixtures:
        _Guard.training_fixtures.setdefault((fixturedef.baseid, fixturedef.argname), name)
    item = _Guard.item
    if item is not None and not _marked(item):
        _Guard.reached.append(name)
        # pytest.fail raises a BaseException: `pytest.raises(...)` or `except Exception` in the
        # test or in fedlib does not swallow it (and the call check below catches the rest)
        pytest.fail(_advice(item, f"calls {name}"), pytrace=False)


def _watched(name: str, fn):
    from fedlib.engine.errors import DivergenceError

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
        except pytest.fail.Exception:  # the guard's own failure, from a watched call inside
            raise
        except DivergenceError:  # trained until a loss or weight was not finite
            _computed(name)
            raise
        except (ValueError, TypeError):  # bad input refused before any work: a validation test
            raise
        except BaseException:
            _computed(name)
            raise
        _computed(name)
        return result

    watched.__cross_cpu_watched__ = True
    return watched


def watch_entry_points() -> None:
    """Replace each watched function by a wrapper wherever fedlib has bound it.

    Patched in the defining module and in every fedlib or workbook module already imported that holds
    the same object (``from .train import local_train`` binds a name of its own); a module
    imported later binds the wrapper from the modules patched here.
    """
    originals = {}
    for module_name, names in WATCHED.items():
        module = importlib.import_module(module_name)
        for name in names:
            fn = getattr(module, name)
            if getattr(fn, "__cross_cpu_watched__", False):
                continue
            originals[id(fn)] = _watched(f"{module_name}.{name}", fn)
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.split(".")[0] in ("fedlib", "workbook"):
            continue
        for attr, value in list(vars(module).items()):
            wrapper = originals.get(id(value))
            if wrapper is not None and wrapper.__wrapped__ is value:
                setattr(module, attr, wrapper)


def pytest_configure(config):
    watch_entry_points()


def _unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the files run together (SAME_WORKER)."""
    path = nodeid.split("::", 1)[0]
    for together in SAME_WORKER:
        if any(path.startswith(prefix) for prefix in together):
            return " + ".join(together)
    return path


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Notebook cells (nbval) are marked cross_cpu: the notebooks train and evaluate.

    On an xdist worker, the order the work units are handed out in (``--no-loadscope-reorder``):
    notebook 05's training grid first (the longest), then the other notebooks, then the test
    files, so that the units handed out last are short and the workers finish together.
    """
    for item in items:
        if item.nodeid.split("::", 1)[0].endswith(".ipynb"):
            item.add_marker(CROSS_CPU)
    if not hasattr(config, "workerinput"):
        return
    first = _unit(SAME_WORKER[0][0])

    def rank(item: pytest.Item) -> int:
        if _unit(item.nodeid) == first:
            return 0
        return 1 if item.nodeid.split("::", 1)[0].endswith(".ipynb") else 2

    items.sort(key=rank)  # stable: a file's items keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with SAME_WORKER's files as one unit.

    (xdist's own ``loadgroup`` marks do not group on pytest 9, whose node ids no longer
    take the ``@group`` suffix xdist 3.8 writes into them: the scheduler groups here.)
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return FileScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _Guard.item, _Guard.reached = item, []
    try:
        return (yield)
    finally:
        _Guard.item, _Guard.reached = None, []


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _Guard.fixtures.append(fixturedef)
    try:
        return (yield)
    finally:
        _Guard.fixtures.pop()


def _training_fixture(item: pytest.Item) -> tuple[str, str] | None:
    """A fixture of ``item`` whose setup (in this process, for any test) called a watched function."""
    if not _Guard.training_fixtures:
        return None
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name, ()) if info is not None else ()
        for fixturedef in defs:
            reached = _Guard.training_fixtures.get((fixturedef.baseid, fixturedef.argname))
            if reached is not None:
                return name, reached
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not _marked(item):
        found = _training_fixture(item)
        if found is not None:  # set up earlier for a marked test, cached since
            pytest.fail(_advice(item, f"uses the fixture {found[0]!r}, which calls {found[1]}"), pytrace=False)
    result = yield
    if _Guard.reached:  # the test caught the failure raised at the call
        pytest.fail(_advice(item, f"calls {_Guard.reached[0]}"), pytrace=False)
    return result


# ----------------------------------------------------------------------------- the committed report
@pytest.fixture(scope="session")
def _committed_report_once():
    from workbook import report

    df = report.frame()
    return df, report.findings_markdown(df)


@pytest.fixture
def committed_report(_committed_report_once):
    """``(report.frame(), report.findings_markdown(frame))`` of the committed records, rendered once
    per test process (a render takes about 35 s of one core; several tests read the same page); the
    frame a copy each test may change."""
    df, page = _committed_report_once
    return df.copy(), page
