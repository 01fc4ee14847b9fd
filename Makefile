# The workbook's two commands (see README):
#   make workbook   set everything up, fetch the offline real data, run every notebook headless
#   make test       unit tests + nbval over the committed notebooks
# Neither modifies a tracked file: their figures go to build/figures/, executed notebooks to
# build/executed/, run records to results/. `make refresh-notebooks` is the one step that
# rewrites the committed notebooks and figures/.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= smoke
export FEDLIB_DATA ?= $(CURDIR)/data
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
EXECUTED := build/executed
BUILD_FIGURES := $(CURDIR)/build/figures
# Known noise (pip's notices about absent local mirrors, the kernel's TCP notice) is hidden;
# the command's exit status is kept.
QUIET := bash scripts/quiet.sh
PIP := $(QUIET) $(BIN)/python -m pip
# One line per notebook, then the cells' output as it is printed (the training grid prints a
# line per run), so a long run shows it is alive.
PAPERMILL := $(QUIET) $(BIN)/papermill -k python3 --cwd notebooks --log-output --no-progress-bar --log-level INFO
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider
# Kernels forced to other instruction sets and thread counts than this machine's defaults
# (see tests/other_cpu.env): `make test-other-cpu` retrains the smoke grid under them.
OTHER_CPU_ENV := $(shell grep -v '^\#' tests/other_cpu.env)
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888

.PHONY: setup data workbook test unit nbval test-other-cpu lab bench cuda-checks refresh-notebooks clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	$(BIN)/python -c "import fedlib, torch, torchvision, lightgbm, papermill, nbval, ipywidgets, ray, flwr; print('setup: ok, torch', torch.__version__, 'ray', ray.__version__, 'flwr', flwr.__version__)"
	touch $@

data: $(FEDLIB_DATA)/.ready

$(FEDLIB_DATA)/.ready: scripts/get_data.sh | $(VENV)/.installed
	PYTHON=$(BIN)/python bash scripts/get_data.sh
	$(BIN)/python -m fedlib.datasets prepare fmnist adult letter fine_foods
	touch $@

# Execute every notebook with papermill and params/$(PROFILE)/<notebook>.yaml; executed copies
# go to build/executed/, figures to build/figures/ (the committed ones are left as they are).
workbook: export FEDLIB_FIGURES := $(BUILD_FIGURES)
workbook: export FEDLIB_PROGRESS := lines
workbook: setup data
	mkdir -p $(EXECUTED)
	set -e; n=$(words $(NOTEBOOKS)); i=0; for nb in $(NOTEBOOKS); do \
	  i=$$((i + 1)); name=$$(basename $$nb .ipynb); t0=$$(date +%s); \
	  echo "workbook [$$i/$$n]: $$name (params/$(PROFILE)/$$name.yaml)"; \
	  $(PAPERMILL) $$nb $(EXECUTED)/$$name.ipynb -f params/$(PROFILE)/$$name.yaml; \
	  echo "workbook [$$i/$$n]: $$name done in $$(( $$(date +%s) - t0 )) s"; \
	done
	@echo "workbook: executed notebooks in $(EXECUTED)/, figures in build/figures/"

test: export FEDLIB_FIGURES := $(BUILD_FIGURES)
test: setup data
	$(BIN)/python -m pytest tests $(NOTEBOOKS) $(NBVAL) -q

unit: setup data
	$(BIN)/python -m pytest tests -q

nbval: export FEDLIB_FIGURES := $(BUILD_FIGURES)
nbval: setup data
	$(BIN)/python -m pytest $(NOTEBOOKS) $(NBVAL) -q

# The cross-CPU check: retrain the smoke grid from scratch with every kernel library forced to
# another instruction set and thread count, then run every unit test (among them the kernel
# test, the tolerance test on the training numbers and the 14 methods' pinned per-client
# results, tests/test_method_regression.py) and nbval over every notebook. Passes only if
# nothing the tests or nbval check depends on the CPU (CI runs it).
test-other-cpu: export FEDLIB_FIGURES := $(CURDIR)/build/other-cpu/figures
test-other-cpu: export FEDLIB_RESULTS := $(CURDIR)/build/other-cpu/results
test-other-cpu: setup data
	rm -rf build/other-cpu
	env $(OTHER_CPU_ENV) $(BIN)/python -m pytest tests $(NOTEBOOKS) $(NBVAL) -q

# JupyterLab on notebooks/ with the project's kernel. As root (containers, cloud notebooks) it
# adds --allow-root. From another machine: `make lab LAB_IP=0.0.0.0` and open the printed URL
# (token included) with this machine's address, or tunnel: ssh -L 8888:localhost:8888 <host>.
lab: setup data
	@echo "lab: JupyterLab at http://$(LAB_IP):$(LAB_PORT)/lab (the token is in the URL printed below; Ctrl-C stops it)"
	$(BIN)/jupyter lab --notebook-dir=notebooks --no-browser --ip=$(LAB_IP) --port=$(LAB_PORT) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

bench: setup data
	$(BIN)/python benchmarks/engine_vs_sequential.py
	$(BIN)/python benchmarks/engine_vs_flower.py

# On a machine with CUDA: the device-parametrised tests on the GPU, the paths' gap with and
# without TF32, the engine benchmark and the paper-protocol run (logs in build/cuda_checks/).
cuda-checks: setup data
	PYTHON=$(BIN)/python bash benchmarks/cuda_checks.sh build/cuda_checks

# Developer step: re-execute the committed notebooks in place with their default (smoke)
# parameters, rewrite figures/, and strip volatile metadata, so nbval compares against fresh
# outputs. The only target that modifies tracked files.
refresh-notebooks: export FEDLIB_PROGRESS := lines
refresh-notebooks: setup data
	set -e; for nb in $(NOTEBOOKS); do \
	  echo "refresh: $$nb"; \
	  FEDLIB_FIGURES=$(CURDIR)/figures $(PAPERMILL) $$nb $$nb; \
	done
	$(BIN)/python scripts/clean_notebooks.py $(NOTEBOOKS)

clean:
	rm -rf build .pytest_cache
