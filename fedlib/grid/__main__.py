"""``python -m fedlib.grid``: the paper-grid command, :func:`fedlib.grid_cli.main` (``--help``).

A module of its own, so that running the command imports the grids (:mod:`fedlib.grid`) once,
from the command, and the grids never import the command."""
from fedlib.grid_cli import main

main()
