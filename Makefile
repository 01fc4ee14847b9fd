# The workbook's two commands (see README):
#   make workbook   set everything up, fetch the offline real data, run every notebook headless
#   make test       every notebook's executed copy compared with the committed one, unit tests
#                   (among them the site's: built, then opened in headless Chromium)
# Neither modifies a tracked file: their figures go to build/figures/, executed notebooks to
# build/executed/<profile>/, run records to results/ (`make lab` too: its notebooks' figures go to
# build/figures/; `make site` writes the static site to build/site/). `make refresh-notebooks` is
# the one step that rewrites the committed notebooks and figures/.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= smoke
export FEDLIB_DATA ?= $(CURDIR)/data
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# `make workbook` executes each notebook into build/executed/<profile>/ with papermill, as one
# Make target per notebook: WORKBOOK_JOBS notebooks at a time, each on its share of the cores,
# and only those whose notebook, parameters, fedlib or records changed since their last run.
EXECUTED := build/executed/$(PROFILE)
# The longest notebooks first, so that the two lanes finish together; then the others in order.
LONGEST_FIRST := $(filter $(patsubst notebooks/%.ipynb,%,$(NOTEBOOKS)),12_beyond_label_skew 05_training 11_cross_paper 09_fedprism 10_pfedlia 07_psi_pfl 00_report 04_cluster_selection 08_cafa)
EXECUTED_NOTEBOOKS := $(patsubst %,$(EXECUTED)/%.ipynb,$(LONGEST_FIRST)) \
  $(filter-out $(patsubst %,$(EXECUTED)/%.ipynb,$(LONGEST_FIRST)),$(patsubst notebooks/%,$(EXECUTED)/%,$(NOTEBOOKS)))
FEDLIB_SOURCES := $(shell find fedlib workbook -name '*.py' -o -name '*.yaml') pyproject.toml
RECORDS := $(shell find benchmarks/records -name '*.json')
NPROC := $(shell nproc 2>/dev/null || echo 2)
WORKBOOK_JOBS ?= 2
WORKBOOK_THREADS ?= $(shell echo $$(( $(NPROC) / $(WORKBOOK_JOBS) > 1 ? $(NPROC) / $(WORKBOOK_JOBS) : 1 )))
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
# Tests on TEST_WORKERS processes (pytest-xdist), each on one thread (OMP_NUM_THREADS: torch,
# MKL and OpenBLAS read it), so that they do not compete for the cores. One work unit per file: a
# notebook's cells share one kernel, a file's fixtures are computed once, and notebooks 05 and
# 06 run on one worker in that order (tests/conftest.py). What is compared does not depend on
# the thread count: `make test-other-cpu` runs nbval on one thread against notebooks executed
# on several.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
ONE_THREAD := OMP_NUM_THREADS=1
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888

.PHONY: setup data workbook executed-notebooks test unit nbval test-other-cpu lab site browser bench bench-record cuda-checks refresh-notebooks clean

# --no-compile: Python compiles a module's bytecode when it is first imported, instead of pip
# compiling every file of the ~6 GB stack at install time (most are never imported here).
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q --no-compile -r requirements.txt
	$(PIP) install -q --no-deps -e .
	$(BIN)/python -c "import fedlib, torch, torchvision, lightgbm, papermill, nbval, ipywidgets, ray, flwr, mkdocs, mkdocs_jupyter; print('setup: ok, torch', torch.__version__, 'ray', ray.__version__, 'flwr', flwr.__version__)"
	touch $@

data: $(FEDLIB_DATA)/.ready

$(FEDLIB_DATA)/.ready: scripts/get_data.sh | $(VENV)/.installed
	PYTHON=$(BIN)/python bash scripts/get_data.sh
	$(BIN)/python -m fedlib.datasets prepare fmnist adult letter fine_foods
	touch $@

# Execute every notebook with papermill and params/$(PROFILE)/<notebook>.yaml; executed copies
# go to build/executed/$(PROFILE)/, figures to build/figures/ (the committed ones are left as they
# are). Each notebook's lines are prefixed with its number, since two run at a time.
workbook: setup data
	$(MAKE) --no-print-directory -j$(WORKBOOK_JOBS) executed-notebooks
	@echo "workbook: executed notebooks in $(EXECUTED)/, figures in build/figures/"

executed-notebooks: $(EXECUTED_NOTEBOOKS)

# Notebook 06 reads the grid notebook 05 trains; the report, notebooks 09 and 10 and notebooks 11 and 12 (paper profile)
# read the committed records.
$(EXECUTED)/06_tables_and_ecdfs.ipynb: $(EXECUTED)/05_training.ipynb
$(EXECUTED)/00_report.ipynb: $(RECORDS)
$(EXECUTED)/09_fedprism.ipynb: $(RECORDS)
$(EXECUTED)/10_pfedlia.ipynb: $(RECORDS)
$(EXECUTED)/11_cross_paper.ipynb: $(RECORDS)
$(EXECUTED)/12_beyond_label_skew.ipynb: $(RECORDS)

# A notebook's executed copy appears only when papermill succeeded (a failed run's copy is left in
# $(EXECUTED)/failed/ to read), so a later `make workbook` re-runs exactly the failed ones.
$(EXECUTED)/%.ipynb: notebooks/%.ipynb params/$(PROFILE)/%.yaml $(FEDLIB_SOURCES) | $(VENV)/.installed $(FEDLIB_DATA)/.ready
	@mkdir -p $(@D)/failed
	@echo "workbook: $* (params/$(PROFILE)/$*.yaml, $(WORKBOOK_THREADS) thread(s))"
	@$(BIN)/python -m fedlib.notebook_params params/$(PROFILE)/$*.yaml  # an unknown key is an error
	@set -o pipefail; t0=$$(date +%s); \
	  if FEDLIB_FIGURES=$(BUILD_FIGURES) FEDLIB_PROGRESS=lines OMP_NUM_THREADS=$(WORKBOOK_THREADS) \
	       $(PAPERMILL) $< $(@D)/failed/$*.ipynb -f params/$(PROFILE)/$*.yaml 2>&1 | sed -u 's/^/[$(firstword $(subst _, ,$*))] /'; then \
	    mv $(@D)/failed/$*.ipynb $@; echo "workbook: $* done in $$(( $$(date +%s) - t0 )) s"; \
	  else echo "workbook: $* FAILED after $$(( $$(date +%s) - t0 )) s (its executed copy: $(@D)/failed/$*.ipynb)"; exit 1; fi

# The unit tests, and each smoke notebook's executed copy compared with the committed notebook by
# nbval's rules (scripts/compare_notebooks.py; the notebooks not executed yet, or changed since,
# are executed first, as `make workbook` does). scripts/cross_cpu_drift.py then prints how far the
# numbers nbval does not compare (training's) moved from the committed ones: a measurement that
# never fails the build (docs/reproducibility.md, "Results that move across CPUs").
test: export FEDLIB_FIGURES := $(BUILD_FIGURES)
test: setup data browser
	$(MAKE) --no-print-directory -j$(WORKBOOK_JOBS) PROFILE=smoke executed-notebooks
	$(BIN)/python scripts/compare_notebooks.py build/executed/smoke
	$(BIN)/python scripts/cross_cpu_drift.py build/executed/smoke
	env $(ONE_THREAD) $(BIN)/python -m pytest tests $(XDIST) -q --durations=25

unit: setup data browser
	env $(ONE_THREAD) $(BIN)/python -m pytest tests $(XDIST) -q

nbval: export FEDLIB_FIGURES := $(BUILD_FIGURES)
nbval: setup data
	$(BIN)/python -m pytest $(NOTEBOOKS) $(NBVAL) -q

# The cross-CPU check: retrain the smoke grid from scratch with every kernel library forced to
# another instruction set and thread count, then run the unit tests marked cross_cpu (training,
# evaluation, the engine's kernels, the kernel test and the tolerance test on the training
# numbers, tests/test_cross_cpu.py, and the 14 methods' pinned per-client results,
# tests/test_method_regression.py) and nbval over every notebook. Passes only if nothing the
# tests or nbval check depends on the CPU (CI runs it). The other unit tests (validation, paths,
# parsing, records, docs) compute nothing with the kernels; `make test` fails a test that
# trains or evaluates without the marker. Each worker runs on one thread (other_cpu.env).
test-other-cpu: export FEDLIB_FIGURES := $(CURDIR)/build/other-cpu/figures
test-other-cpu: export FEDLIB_RESULTS := $(CURDIR)/build/other-cpu/results
test-other-cpu: setup data
	rm -rf build/other-cpu
	env $(OTHER_CPU_ENV) $(BIN)/python -m pytest -m cross_cpu $(NOTEBOOKS) tests $(NBVAL) $(XDIST) -q

# JupyterLab on notebooks/ with the project's kernel. As root (containers, cloud notebooks) it
# adds --allow-root. From another machine: `make lab LAB_IP=0.0.0.0` and open the printed URL
# (token included) with this machine's address, or tunnel: ssh -L 8888:localhost:8888 <host>.
# The kernels inherit FEDLIB_FIGURES: the notebooks' figures and tables go to build/figures/, as
# `make workbook`'s do, not into the committed figures/ (run records go to results/, ignored).
# Its settings (scripts/jupyter/, this target only): opening a committed notebook does not mark it
# modified, the server's pre_save_hook saves a notebook in its committed form, autosave is off (a
# notebook is written only when saved, never mid-run) and no news prompt is shown
# (docs/running.md, tests/test_lab_browser.py).
lab: export FEDLIB_FIGURES := $(BUILD_FIGURES)
lab: setup data
	@echo "lab: JupyterLab at http://$(LAB_IP):$(LAB_PORT)/lab (the token is in the URL printed below; Ctrl-C stops it)"
	JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter $(BIN)/jupyter lab --notebook-dir=notebooks --no-browser --ip=$(LAB_IP) --port=$(LAB_PORT) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# The workbook as a static site (MkDocs with mkdocs-jupyter, pinned in requirements.txt; builds
# offline): the report (notebook 00) as its front page, every notebook with its committed outputs
# (nothing is executed), docs/, the README and the changelog, into build/site/ (open
# build/site/index.html). scripts/site.py stages the pages and the navigation in build/site-src/.
# tests/test_site.py builds it the same way and opens it in headless Chromium.
site: setup
	$(BIN)/python scripts/site.py

# Debian's chromium (from Debian's archive, as root or with sudo), which tests/test_site.py drives
# headless; `make test` and `make unit` run this first. Nothing to do when CHROMIUM names a browser
# or `chromium` is on the PATH.
browser:
	@if [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null; then exit 0; fi; \
	  command -v apt-get >/dev/null || { echo "browser: no apt-get here: install Chromium and set CHROMIUM=<its binary>" >&2; exit 1; }; \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); mkdir -p build; echo "browser: apt-get install chromium (log: build/browser.log)"; \
	  { $$sudo apt-get update -q && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } \
	    > build/browser.log 2>&1 || { tail -20 build/browser.log >&2; echo "browser: installing chromium failed (needs Debian's archive; log: build/browser.log)" >&2; exit 1; }; \
	  chromium --version

bench: setup data
	$(BIN)/python benchmarks/engine_vs_sequential.py
	$(BIN)/python benchmarks/engine_vs_flower.py

# Every speed benchmark at its defaults, each run recorded in benchmarks/records/speed/<benchmark>/
# (the paper run and the influence matrix take minutes each), then docs/performance.md re-rendered
# from the records (benchmarks/report.py). Commit the new records with the page.
SPEED_RECORDS := benchmarks/records/speed
bench-record: setup data
	$(BIN)/python benchmarks/engine_vs_sequential.py --record $(SPEED_RECORDS)/engine_vs_sequential
	$(BIN)/python benchmarks/engine_vs_sequential.py --path-table --record $(SPEED_RECORDS)/engine_paths
	$(BIN)/python benchmarks/engine_vs_flower.py --record $(SPEED_RECORDS)/engine_vs_flower
	$(BIN)/python benchmarks/scaling.py --record $(SPEED_RECORDS)/scaling
	$(BIN)/python benchmarks/paper_run.py --record $(SPEED_RECORDS)/paper_run
	$(BIN)/python benchmarks/influence_matrix.py --record $(SPEED_RECORDS)/influence_matrix
	$(BIN)/python benchmarks/report.py

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
