"""The paper-grid command under its old path: ``python benchmarks/paper_grid.py ...`` is
``python -m fedlib.grid ...`` (:mod:`fedlib.grid_cli`, whose names this module also gives:
``paper_grid.select`` is ``fedlib.grid_cli.select``; ``--help`` lists the tables)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fedlib, installed or not
from fedlib import grid_cli  # noqa: E402
from fedlib.grid_cli import main  # noqa: E402,F401


def __getattr__(name):  # PEP 562: the command's other names (patch them on fedlib.grid_cli, not here)
    return getattr(grid_cli, name)


if __name__ == "__main__":
    main()
