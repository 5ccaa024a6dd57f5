# amp-lab: the two commands are `make lab` (open the course) and `make test` (every check).
# Both build .venv on first use; nothing but Python 3 and make is needed beforehand.

PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
# torch 2.13.0 from PyPI: CUDA build on Linux x86-64 learners' machines, CPU build on CI's mirror.
# Override for another build, e.g. `make lab TORCH_SPEC=torch`.  PyPI's CUDA builds (CUDA 13.0) have no
# kernels for Volta (V100) and older GPUs: TORCH_INDEX installs torch from another index, e.g. PyTorch's
# CUDA 12.6 builds (`make lab TORCH_INDEX=https://download.pytorch.org/whl/cu126`; `make doctor` checks).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP      := $(VENV)/.amp-lab-installed

# JupyterLab stays on the loopback interface with token authentication on.  Extra flags
# (your own port, --no-browser, ...) go through LAB_ARGS; LAB_PORT picks the port.
LAB_IP     ?= 127.0.0.1
LAB_PORT   ?= 8888
LAB_ARGS   ?=
# Jupyter refuses to start as root unless told; CI and containers run as root.
ROOT_FLAG  := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test lint unit nbval nbval-other nbval-kernels nbval-one-thread nbval-matrix notebooks browser gpu-check distributed-check doctor clean help

help:
	@echo "make lab        open the course in JupyterLab (http://$(LAB_IP):$(LAB_PORT), token login)"
	@echo "make test       every check: ruff, nbval on every notebook on two machines (make nbval-matrix:"
	@echo "                this one and nbval-other), package tests beside the browser tests"
	@echo "make notebooks  re-execute every notebook in place on CPU"
	@echo "make doctor     check this machine and environment for the course"
	@echo "make gpu-check  on a CUDA machine: precision table, races, sweeps, autocast probe -> docs/results/"
	@echo "                (GPU_CHECK_ARGS=--quick: a one-shot run, under 3 minutes on an H100)"
	@echo "make distributed-check NPROC=N  notebook 10 at real sizes under torchrun on 127.0.0.1: one rank per"
	@echo "                GPU with NCCL -> docs/results/; CPU ranks with gloo need DISTRIBUTED_CHECK_ARGS=\"--out DIR\""

# pip compiles each installed file to bytecode on one core; --no-compile, then compileall on every core
# does the same work in about half the time on 2 cores (the bytecode must be there: with
# PYTHONDONTWRITEBYTECODE=1, as on CI, every Python process would otherwise compile torch anew).
# compileall's exit status is ignored, as pip ignores those errors: torch ships files for newer Pythons.
# The first `make lab` downloads gigabytes: each step is announced with its size, and pip shows what it
# collects and its progress bars (in a terminal).  Under CI=true (or PIP_QUIET=--quiet) pip stays quiet,
# so CI logs stay short; the step lines still say where the time went.
CI_TRUE    := $(filter 1 true yes,$(shell printf '%s' '$(CI)' | tr 'A-Z' 'a-z'))
PIP_QUIET  ?= $(if $(CI_TRUE),--quiet)
PIP_INSTALL := $(BIN)/python -m pip install $(PIP_QUIET) --disable-pip-version-check --no-compile
# What the torch step downloads, measured (README, "What the first install downloads"): PyPI gives Linux
# x86-64 the CUDA build (torch 2.14.1 with its nvidia-* libraries and triton: 3.0 GB of wheels, 5.4 GB
# installed); the CPU build (macOS, Windows, ARM Linux, CPU mirrors such as CI's) is a 0.2 GB wheel.
TORCH_SIZE := $(if $(TORCH_INDEX),its size depends on $(TORCH_INDEX),$(if $(filter Linux-x86_64,$(shell uname -s)-$(shell uname -m)),about 3 GB to download and 5.4 GB on disk for the CUDA build PyPI serves Linux x86-64 (0.2 GB from a CPU-only mirror),about 0.2 GB (the CPU build)))

$(STAMP): pyproject.toml
	@echo '== amp-lab install, step 1/4: a Python environment in $(VENV)'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo '== amp-lab install, step 2/4: PyTorch ($(TORCH_SPEC)), $(TORCH_SIZE); minutes on a fast connection'
	$(PIP_INSTALL) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	@echo '== amp-lab install, step 3/4: the course package, JupyterLab and the test tools (about 0.9 GB on disk)'
	$(PIP_INSTALL) -e ".[dev]"
	@echo '== amp-lab install, step 4/4: compiling the installed Python files to bytecode, on every core'
	@$(BIN)/python -m compileall -q -j0 $(VENV)/lib > /dev/null 2>&1 || true
	@touch $@
	@echo '== amp-lab install: done, $(VENV) is ready'

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(ROOT_FLAG) $(LAB_ARGS)

doctor: $(STAMP)
	$(BIN)/python -m amp_lab doctor

# The package is ruff-formatted, so its 700-line rooms (tests/test_layers.py) are counted in one layout.
lint: $(STAMP)
	$(BIN)/ruff check amp_lab tests benchmarks scripts notebooks
	$(BIN)/ruff format --check amp_lab

# The package tests time nothing, so they run on one thread: in make test they share 2 cores with the
# browser tests' kernel, and torch's OpenMP threads spin-wait when more threads than cores want to run.
# They run niced: the browser stage is the longer, and waits on its kernel and Chromium, so the package
# tests take the CPU only when those leave it idle (make test: 354 s for the stage without, on 2 cores).
unit: $(STAMP)
	AMP_LAB_DEVICE=cpu OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 $(BIN)/python -m pytest tests --ignore=tests/browser --durations=15

# nbval compares every stored output that is deterministic (CONTRIBUTING.md, "Notebook outputs and nbval").
# NOTEBOOKS narrows any nbval target, e.g. `make nbval-kernels NOTEBOOKS=notebooks/03_underflow_and_overflow.ipynb`.
NOTEBOOKS  ?= notebooks
# A kernel may take long to start while make test runs everything side by side (60 s, nbval's default,
# was once not enough on a 2-core machine that others loaded too); a slow start is not a wrong output.
NBVAL_RUN  := AMP_LAB_DEVICE=cpu $(BIN)/python -m pytest --nbval -p no:cacheprovider --nbval-kernel-startup-timeout=180

# The machine matrix: the same notebooks as if run on another machine.  A cell whose stored digits depend
# on the order in which the CPU's kernels add numbers up fails there.  The other machine differs in both
# ways a CPU can (CONTRIBUTING.md, "the machine matrix"); nbval-kernels and nbval-one-thread change one at
# a time, to tell which one a failing cell depends on:
#   other kernels: ATen's plain C++ kernels instead of AVX2/AVX512 (also changes torch.randn's values),
#                  MKL's conditional-numerical-reproducibility GEMM (MKL_CBWR; MKL_ENABLE_INSTRUCTIONS
#                  alone changed nothing on an AMD CPU), oneDNN capped at SSE4.1
#   one thread:    torch, OpenMP and MKL on one thread (reductions split differently)
KERNELS_ENV    := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41
ONE_THREAD_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
OTHER_ENV      := $(KERNELS_ENV) $(ONE_THREAD_ENV)

nbval: $(STAMP)
	$(NBVAL_RUN) $(NOTEBOOKS)

nbval-other: $(STAMP)
	env $(OTHER_ENV) $(NBVAL_RUN) $(NOTEBOOKS)

nbval-kernels: $(STAMP)
	env $(KERNELS_ENV) $(NBVAL_RUN) $(NOTEBOOKS)

nbval-one-thread: $(STAMP)
	env $(ONE_THREAD_ENV) $(NBVAL_RUN) $(NOTEBOOKS)

# The whole matrix at once: this machine and the other one, in parallel, notebooks and solutions on both.
# An nbval run spends most of its time in one kernel thread, so on 2 cores the two take about as long as
# one; both run on one thread (the stored outputs were made on two, so this machine's run still checks the
# thread count), since a second OpenMP thread beside the other kernel only spin-waits for a core.  (Until 2026-12-01 the matrix ran three machines, other kernels and one thread apart; together they
# caught every cell either caught, and the third run cost make test about 60 s.)  Each log goes to
# artifacts/nbval-<machine>.log; a failing one is printed whole, the other's last line.
nbval-matrix: $(STAMP)
	@mkdir -p artifacts
	@echo "nbval on two machines in parallel (this one's kernels and other kernels, each on one thread): $(NOTEBOOKS) ..."
	@start=$$(date +%s); \
	env $(ONE_THREAD_ENV) $(NBVAL_RUN) -q --durations=10 $(NOTEBOOKS) > artifacts/nbval-native.log 2>&1 & native=$$!; \
	env $(OTHER_ENV) $(NBVAL_RUN) -q --durations=10 $(NOTEBOOKS) > artifacts/nbval-other.log 2>&1 & other=$$!; \
	failed=""; \
	for run in native:$$native other:$$other; do \
	  machine=$${run%%:*}; log=artifacts/nbval-$$machine.log; \
	  if wait $${run#*:}; then echo "--- nbval, $$machine: $$(tail -n 1 $$log)"; \
	  else echo "--- nbval, $$machine FAILED ($$log):"; cat $$log; failed="$$failed $$machine"; fi; \
	done; \
	echo "nbval-matrix: $$(( $$(date +%s) - start )) s$${failed:+; failed on:$$failed}"; \
	test -z "$$failed"

# tests/browser: real JupyterLab in headless Chromium (tests/browser/README.md). Skips with an install
# hint when /usr/bin/chromium is missing; under CI=true that is an error.
# Its kernels run on one thread: beside the package tests (make test runs them side by side) a second OpenMP
# thread waits at every barrier for a core.  Measured 2026-12-01 beside two busy processes: 50 bf16 steps of
# 04's model took 4.8 s (1.6 s alone), and the estimate a bounded call makes first, from timed small matmuls,
# read 75-180 s for a run estimated at 1 s alone, so 04's runs were refused (budget_s=30).
browser: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest tests/browser --durations=20

# Stages run in this order and stop at the first failure; each prints its wall time (the install is the
# first stage on a fresh clone).  Targets joined by + run side by side (make -j, one job each; -Otarget
# prints each one's output whole when it ends).  The nbval matrix keeps both cores busy on its own (two
# kernels).  The browser tests keep about one busy (one kernel runs a notebook while Chromium mostly waits),
# so the package tests, on one thread and timing nothing, fill the other core beside them; the notebooks'
# timing cells print volatile figures whose claims must hold on a busy machine anyway.  (Beside the nbval
# matrix and the package tests together, the browser stage once took 732 s: five processes' threads fought
# for two cores.)
TEST_STAGES := lint nbval-matrix unit+browser
test:
	@total=$$(date +%s); \
	for stage in $(STAMP) $(TEST_STAGES); do \
	  start=$$(date +%s); targets=$$(echo $$stage | tr + ' '); \
	  $(MAKE) --no-print-directory -j$$(echo $$targets | wc -w) -Otarget $$targets || exit $$?; \
	  echo "== make test: $$stage took $$(( $$(date +%s) - start )) s"; \
	done; \
	echo "== make test: passed in $$(( $$(date +%s) - total )) s"

notebooks: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py

gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py $(GPU_CHECK_ARGS)

# Notebook 10's measurements at real sizes: NPROC ranks on this machine (torchrun --standalone; the script
# points them at 127.0.0.1), NCCL when there is a GPU per rank, else gloo (which needs --out: CPU numbers
# are not GPU reference results).  DISTRIBUTED_CHECK_ARGS=--quick: small sizes, seconds.
NPROC      ?= 2
distributed-check: $(STAMP)
	$(BIN)/torchrun --standalone --nproc-per-node $(NPROC) scripts/distributed_check.py $(DISTRIBUTED_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis artifacts
