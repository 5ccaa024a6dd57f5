# amp-lab: the two commands are `make lab` (open the course) and `make test` (every check).
# Both build .venv on first use; nothing but Python 3 and make is needed beforehand.

PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
# torch 2.13.0 from PyPI: CUDA build on Linux x86-64 learners' machines, CPU build on CI's mirror.
# Override for another build, e.g. `make lab TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
STAMP      := $(VENV)/.amp-lab-installed

# JupyterLab stays on the loopback interface with token authentication on.  Extra flags
# (your own port, --no-browser, ...) go through LAB_ARGS; LAB_PORT picks the port.
LAB_IP     ?= 127.0.0.1
LAB_PORT   ?= 8888
LAB_ARGS   ?=
# Jupyter refuses to start as root unless told; CI and containers run as root.
ROOT_FLAG  := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test lint unit nbval notebooks browser gpu-check doctor clean help

help:
	@echo "make lab        open the course in JupyterLab (http://$(LAB_IP):$(LAB_PORT), token login)"
	@echo "make test       every check: ruff, package tests, nbval on every notebook, browser tests"
	@echo "make notebooks  re-execute every notebook in place on CPU"
	@echo "make doctor     check this machine and environment for the course"
	@echo "make gpu-check  on a CUDA machine: race, sweep and autocast probe -> docs/results/"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@touch $@

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(ROOT_FLAG) $(LAB_ARGS)

doctor: $(STAMP)
	$(BIN)/python -m amp_lab doctor

lint: $(STAMP)
	$(BIN)/ruff check amp_lab tests benchmarks scripts notebooks

unit: $(STAMP)
	AMP_LAB_DEVICE=cpu $(BIN)/python -m pytest tests --ignore=tests/browser

nbval: $(STAMP)
	AMP_LAB_DEVICE=cpu $(BIN)/python -m pytest --nbval notebooks

# tests/browser: real JupyterLab in headless Chromium (tests/browser/README.md). Skips with an install
# hint when /usr/bin/chromium is missing; under CI=true that is an error.
browser: $(STAMP)
	$(BIN)/python -m pytest tests/browser

test: lint unit nbval browser

notebooks: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py

gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis artifacts
