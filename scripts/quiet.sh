#!/usr/bin/env bash
# Run a command with known noise hidden from its output; the command's exit status is kept.
#   - pip: "Location ... is ignored" notices some machines' pip configs print for local mirrors
#   - ipykernel: the notice that a kernel launched by papermill/nbval talks over local TCP
#   - papermill --log-output: its per-cell markers, file names and figure reprs (the cells'
#     printed output, e.g. the training grid's line per run, is kept)
set -o pipefail
"$@" 2>&1 | { grep -E -v \
  -e "is ignored: it is neither a file nor a directory" \
  -e "Kernel is running over TCP without encryption" \
  -e "^(Executing|Ending) Cell [0-9]+-*$" \
  -e "^(Input Notebook|Output Notebook|Working directory|Executing notebook with kernel):" \
  -e "^<Figure size [0-9x]+ with [0-9]+ Axes>$" || true; }
