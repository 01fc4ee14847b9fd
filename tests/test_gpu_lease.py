"""benchmarks/gpu_lease.sh refuses clearly (exit 2, a message, nothing written) without CUDA and
on bad arguments; its lease itself needs a GPU (docs/scaling-out.md)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_lease.sh"
BASH = shutil.which("bash")
GRID = [sys.executable, "benchmarks/paper_grid.py", "fedprism-table1", "--params", "params/smoke/09_fedprism.yaml"]
PLAN = [sys.executable, "-m", "workbook.plan"]
MODULE = [sys.executable, "-m", "fedlib.grid", "fedprism-table1", "--params", "params/smoke/09_fedprism.yaml"]


def lease(args, tmp_path, **env):
    run_env = {**os.environ, "OUT": str(tmp_path / "out"), **env}
    return subprocess.run([BASH, str(SCRIPT), *args], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=120)


def test_without_cuda_it_refuses_with_exit_2(tmp_path):
    """No GPU visible (CUDA_VISIBLE_DEVICES='' hides any from torch; where nvidia-smi is missing,
    that is said first): exit 2 before anything is prepared or written."""
    out = tmp_path / "records"
    done = lease(["120", "2", "--", *GRID, "--out", str(out)], tmp_path, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stderr
    assert "gpu_lease: no CUDA here: " in done.stderr
    assert "nvidia-smi is not on PATH" in done.stderr or "torch" in done.stderr and "sees no CUDA device" in done.stderr
    assert not out.exists() and not (tmp_path / "out").exists()


def test_without_nvidia_smi_on_path_it_refuses_with_exit_2(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with bash's tools but no nvidia-smi
    bin_dir.mkdir()
    for tool in ("date", "mkdir", "tee", "find", "tar", "mktemp", "touch"):
        for d in ("/usr/bin", "/bin"):
            if (Path(d) / tool).exists():
                (bin_dir / tool).symlink_to(Path(d) / tool)
                break
    done = lease(["120", "2", "--", *GRID, "--out", str(tmp_path / "records")], tmp_path, PATH=str(bin_dir))
    assert done.returncode == 2
    assert "gpu_lease: no CUDA here: nvidia-smi is not on PATH" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    ([], "expected SECONDS WORKERS -- COMMAND..., got 0 arguments"),
    (["600", "4", "--"], "expected SECONDS WORKERS -- COMMAND..., got 3 arguments"),
    (["ten", "4", "--", *GRID, "--out", "r"], "SECONDS must be a whole number ≥ 60, got 'ten'"),
    (["30", "4", "--", *GRID, "--out", "r"], "SECONDS must be a whole number ≥ 60, got '30'"),
    (["600", "0", "--", *GRID, "--out", "r"], "WORKERS must be a whole number in [1, 64], got '0'"),
    (["600", "4", *GRID, "--out", "r"], f"expected -- after WORKERS, got '{sys.executable}'"),
    (["600", "4", "--", sys.executable, "benchmarks/report.py"],
     "the command must run python -m workbook.plan --run, python -m fedlib.grid (or benchmarks/paper_grid.py) or "
     "benchmarks/table3_like_for_like.py"),
    (["600", "4", "--", sys.executable, "-m", "fedlib.datasets", "prepare"],
     "the command must run python -m workbook.plan --run, python -m fedlib.grid"),
    (["600", "4", "--", *PLAN], "the plan command computes nothing without --run"),
    (["600", "4", "--", *PLAN, "--run", "--together"], "leave --together out: this script sets it"),
    (["600", "4", "--", *PLAN, "--run", "--workers", "4"], "leave --workers out of the command"),
    (["600", "4", "--", *GRID, "--out", "r", "--budget", "100"], "leave --budget out of the command"),
    (["600", "4", "--", *GRID, "--out", "r", "--device=cpu"], "leave --device=cpu out of the command"),
    (["600", "4", "--", *GRID, "--out", "r", "--workers", "2"], "leave --workers out of the command"),
    (["600", "4", "--", *GRID, "--out", "r", "--list"], "--list computes nothing"),
    (["600", "4", "--", *GRID], "the grid command (python -m fedlib.grid) needs --out"),
    (["600", "4", "--", *MODULE], "the grid command (python -m fedlib.grid) needs --out"),
    (["600", "4", "--", *MODULE, "--out", "r", "--list"], "--list computes nothing"),
    (["600", "4", "--", "fedlib-grid", "fedprism-table1"], "the grid command (python -m fedlib.grid) needs --out"),
])
def test_bad_arguments_are_refused_with_exit_2(tmp_path, args, message):
    done = lease(args, tmp_path)
    assert done.returncode == 2
    assert f"gpu_lease: {message}" in done.stderr and "usage: bash benchmarks/gpu_lease.sh" in done.stderr
    assert not (tmp_path / "out").exists()
