# Two commands on a fresh machine (see README.md):
#   make run    set up, check (preflight), then execute every notebook on the offline models and write results/
#               (NOTEBOOKS="00 01" runs those only)
#   make run EXECUTOR=slurm  the same as one Slurm job per model and notebook (docs/gpu.md, 'On a cluster'; CLUSTER=local
#               tries it here without Slurm)
#   make preflight  check models, profile, tasks, device, RAM and disk, and print the estimated run time
#   make test   set up, then run the unit tests and every notebook (smoke profile) under nbmake
#   make test-unit, test-models, test-notebooks, test-infra  one tier of make test each (docs/contributing.md)
#   make test-bridge  the same numbers under TransformerLens 4.3's bridge (installs it; docs/transformerlens4.md)
#   make fuzz   the property-based tests with many more examples than make test runs
#   make bench  performance figures on the default model (run it on an idle machine)
#   make gpu-check  on a CUDA machine: CUDA tests, operator counts, notebooks 01/08/09 at smoke (docs/gpu.md)
#   make exercises  write exercises/NN_*.ipynb from the notebooks' solution cells
#   make site   the executed notebooks of a finished `make run` (same PROFILE, MODELS) as a static site in
#               site/html (offline; README, 'Read it without running'), then its browser check (make site-check;
#               skipped with a note where no Chromium is installed, required under REQUIRE_BROWSER=1 as in CI)
#   make control    retrain every control population of notebook 09's power (5 seeds per recipe on 2 layers, 8 on
#               4; two processes) and say whether each one's tensors equal the shipped checkpoint's; CONTROL=control, control-wide
#               or control-negative retrains that one control from CONTROL_SEED instead (each well under 10 min on
#               2 cores)
#   make record the claims of a finished `make run` (same PROFILE, MODELS) as docs/record/<model>-<profile>.json
#               (NOTEBOOKS="10": those notebooks only, as <model>-<profile>-nb10.json beside the model's other record,
#               which gives up the notebooks recorded again)
#   make tables rewrite README.md's and docs/'s result tables from docs/record/ (no result is typed by hand)
#   make tables-check   only check them: blocks that differ, stale or broken records (exit 1)
#   make lock   refresh requirements.lock (the exact versions setup installs) from the working .venv
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build; on a CUDA machine: make setup TORCH=torch
TORCH ?= torch==2.13.0
# TransformerLens: 3 is the lock's 3.9 (HookedTransformer, the default); 4 installs transformer-lens 4.3.0 in its
# place (TransformerBridge, docs/transformerlens4.md). A stamp per value, as for TORCH: `make setup` brings 3.9 back.
TL ?= 3
ifeq ($(filter $(TL),3 4),)
$(error TL=$(TL): use TL=3 (TransformerLens 3.9, the default) or TL=4 (4.3's TransformerBridge))
endif
TL_PIN = $(if $(filter 4,$(TL)),transformer-lens==4.3.0,$(shell grep -i '^transformer-lens==' $(LOCK)))
TL_STAMP = $(VENV)/.tl-$(TL)
# the same settings as the notebooks and scripts (docs/your-own.md, 'Settings'): ICL_PROFILE and ICL_MODEL are the defaults
PROFILE ?= $(or $(ICL_PROFILE),default)
MODELS ?= $(or $(ICL_MODEL),google/gemma-3-270m HuggingFaceTB/SmolLM2-135M-Instruct)
PYTEST_ARGS ?=
# models run in parallel workers (0: one per model, at most one per CPU core); 1 on a single GPU
JOBS ?= 0
# e.g. --ignore-resources: RAM and disk shortfalls only warn
PREFLIGHT_ARGS ?=
# notebooks to run, by number (e.g. NOTEBOOKS="00 01"; default: all); preflight checks and estimates the same ones
NOTEBOOKS ?=
# seconds one notebook cell may run before make run records its notebook as failed (default: ICL_CELL_TIMEOUT,
# else the profile's: 1 h for smoke, 2 h for default, 24 h for PROFILE=paper; helpers/study/profiles.py)
CELL_TIMEOUT ?= $(ICL_CELL_TIMEOUT)
# 1: count each notebook's work (positions, FLOPs, time per step, share of the CPU's matmul peak) into
# results/<model>/<profile>/accounting.md (helpers.core.accounting; off by default)
ACCOUNT ?=
# slurm: one Slurm job per model and notebook, submitted through submitit (docs/gpu.md, 'On a cluster'); unset: the
# notebooks run on this machine. CLUSTER=local runs those jobs as separate processes here, without Slurm, to try it.
EXECUTOR ?=
CLUSTER ?=
# with EXECUTOR=slurm, each only when set: partition, GPUs per job (default 1 for PROFILE=paper, else 0),
# time limit per job in minutes (default two cell timeouts, at most 48 h), memory per job in GB (default:
# preflight's RAM estimate for the job's model)
SLURM_PARTITION ?=
SLURM_GPUS ?=
SLURM_TIME_MIN ?=
SLURM_MEM_GB ?=
empty :=
# run_all.py's optional flags, each only when its variable is set (no trailing blanks when none is)
RUN_FLAGS = $(strip $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS)) \
	$(if $(CELL_TIMEOUT),--timeout $(CELL_TIMEOUT)) $(if $(filter 1,$(ACCOUNT)),--account) \
	$(if $(EXECUTOR),--executor $(EXECUTOR)) $(if $(CLUSTER),--cluster $(CLUSTER)) \
	$(if $(SLURM_PARTITION),--slurm-partition $(SLURM_PARTITION)) $(if $(SLURM_GPUS),--slurm-gpus $(SLURM_GPUS)) \
	$(if $(SLURM_TIME_MIN),--slurm-time-min $(SLURM_TIME_MIN)) $(if $(SLURM_MEM_GB),--slurm-mem-gb $(SLURM_MEM_GB)))
RUN_ARGS = $(if $(RUN_FLAGS),$(empty) $(RUN_FLAGS))
# the jobs' RAM and disk are not this machine's (a login node's): preflight only warns about them
PREFLIGHT_CLUSTER = $(if $(filter slurm,$(EXECUTOR)),$(empty) --ignore-resources)
LOCK := requirements.lock
# seed of `make control CONTROL=...` (the shipped named checkpoints under data/control/ were trained with 0) and
# which control it trains; empty: every population (helpers/core/controls/population.py)
CONTROL_SEED ?= 0
CONTROL ?=

.PHONY: setup lock preflight test test-unit test-models test-notebooks test-infra test-bridge bridge-reference test-fast fuzz run bench gpu-check figures lab data clean exercises control site site-check record tables tables-check

# torch is installed first and on its own. Its stamp's name carries a checksum of TORCH, so
# `make setup TORCH=...` with another value reinstalls torch (and only torch): the build that was
# there is replaced even if pip would call it satisfied (e.g. the CPU build for TORCH=torch). torch's own
# dependencies are held to the lock's versions (-c). Then the lock is installed as it is, and the project
# without resolving anything (--no-deps): pip freeze --all gives the lock plus torch and pip.
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s' '$(TORCH)' | cksum | cut -d' ' -f1)

setup: $(VENV)/.setup-done $(TORCH_STAMP) $(TL_STAMP)

$(TORCH_STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --force-reinstall --no-deps "$(TORCH)"
	$(PY) -m pip install --quiet -c $(LOCK) "$(TORCH)"
	rm -f $(VENV)/.torch-*
	printf '%s\n' '$(TORCH)' > $@

$(VENV)/.setup-done: pyproject.toml $(LOCK) | $(TORCH_STAMP)
	# the lock is complete (scripts/lock.py): --no-deps installs exactly it, nothing it leaves out on purpose
	$(PY) -m pip install --quiet --no-compile --no-deps -r $(LOCK)
	# setuptools tells every editable install of a flat layout to beware of same-named folders (a UserWarning of
	# the build backend); helpers/ is the package itself, so it is silenced here
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install --quiet --no-deps -e ".[dev,lab]"
	$(PY) -m pip check
	# the bytecode pip would write one file at a time (--no-compile above), on every core at once; as pip does, a
	# file that does not compile under this Python (a newer Python's test file inside torch) is skipped
	$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	rm -f $(VENV)/.tl-*  # the lock's TransformerLens is installed now: its stamp is .tl-3, any other is made again
	touch $@
	touch $(VENV)/.tl-3

# the TransformerLens of TL, without touching anything else (4.3 needs nothing the lock lacks)
$(TL_STAMP): $(VENV)/.setup-done
	$(PY) -m pip install --quiet --no-deps "$(TL_PIN)"
	$(PY) -m pip check
	rm -f $(VENV)/.tl-*
	touch $@

# After a change of pyproject.toml, or `pip install -U <package>` in .venv: resolve the project in .venv, then
# pin every package of its dependency tree at the installed version (torch excluded: TORCH sets it).
lock: $(TORCH_STAMP)
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install --quiet -e ".[dev,lab]"
	$(PY) scripts/lock.py > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)

# the tests' settings: smoke sizes, and results written and cached in fresh folders under .cache/
# Tests run in TEST_JOBS pytest-xdist worker processes (0: all in one process), each with TEST_THREADS torch
# threads, so the workers share the cores instead of fighting over them. Two workers on CI's two cores: most tests
# wait on a kernel, a subprocess or Python, not on the matrix products, and a second worker fills that time.
TEST_JOBS ?= 2
TEST_THREADS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) / ($(TEST_JOBS) > 0 ? $(TEST_JOBS) : 1) )); echo $$(( n > 0 ? n : 1 )))
TEST_ENV = ICL_PROFILE=smoke ICL_RESULTS_DIR=$(CURDIR)/.cache/test-results ICL_RESULTS_CACHE=$(CURDIR)/.cache/test-results-cache \
	OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS)
# loadfile: each test file (each notebook) goes whole to one worker, so its module fixtures are built once; the files
# come longest first (tests/conftest.py), and --no-loadscope-reorder keeps that order (xdist would sort by test count)
XDIST = -n $(TEST_JOBS) $(if $(filter 0,$(TEST_JOBS)),,--dist loadfile --no-loadscope-reorder)
# test-bridge's parity tests are one file of many long tests: there single tests are dealt (worksteal)
XDIST_TESTS = -n $(TEST_JOBS) $(if $(filter 0,$(TEST_JOBS)),,--dist worksteal)

test: setup
	rm -rf .cache/test-results .cache/test-results-cache
	$(TEST_ENV) $(PY) -m pytest tests notebooks --nbmake --nbmake-timeout=1800 $(XDIST) -q --durations=15 $(PYTEST_ARGS)

# one tier of make test each (tests/conftest.py, 'tiers'; docs/contributing.md): tiny-model unit tests, tests on
# a real offline model, notebook runs, and the repository's infrastructure
test-unit test-models test-infra: test-%: setup
	rm -rf .cache/test-results .cache/test-results-cache
	$(TEST_ENV) $(PY) -m pytest tests -m $* $(XDIST) -q $(PYTEST_ARGS)

# TransformerLens 4's bridge against 3.9 (docs/transformerlens4.md): installs 4.3 (make setup TL=4), compares the
# committed 3.9 reference (tests/data/bridge/reference.pt; `make bridge-reference` under 3.9 writes it) into
# docs/bridge-parity.json (`make tables` renders it), runs notebooks 00-03 at the smoke profile on BRIDGE_MODEL,
# then 00-01 on a tiny random Phi-3 folder, which 3.9 cannot load. `make setup` afterwards brings 3.9 back.
BRIDGE_MODEL ?= HuggingFaceTB/SmolLM2-135M-Instruct
BRIDGE_NOTEBOOKS = notebooks/00_icl_setting.ipynb notebooks/01_saliency_flow.ipynb
test-bridge:
	$(MAKE) --no-print-directory setup TL=4
	rm -rf .cache/test-results .cache/test-results-cache
	$(TEST_ENV) ICL_MODEL=$(BRIDGE_MODEL) $(PY) -m pytest tests/test_bridge.py $(BRIDGE_NOTEBOOKS) \
		notebooks/02_shallow_isolation.ipynb notebooks/03_deep_aucroc.ipynb \
		--nbmake --nbmake-timeout=1800 -p no:cacheprovider $(XDIST_TESTS) -q $(PYTEST_ARGS)
	rm -rf .cache/test-results .cache/test-results-cache
	$(TEST_ENV) ICL_MODEL="$$($(PY) scripts/bridge_parity.py folder --kind phi3)" $(PY) -m pytest $(BRIDGE_NOTEBOOKS) \
		--nbmake --nbmake-timeout=1800 -p no:cacheprovider $(XDIST_TESTS) -q $(PYTEST_ARGS)

bridge-reference: setup
	$(PY) scripts/bridge_parity.py reference

test-notebooks: setup
	rm -rf .cache/test-results .cache/test-results-cache
	$(TEST_ENV) $(PY) -m pytest tests notebooks --nbmake --nbmake-timeout=1800 -m notebooks $(XDIST) -q $(PYTEST_ARGS)

# the property-based tests of tests/test_fuzz.py with 1000 examples each (make test runs 25)
fuzz: setup
	HYPOTHESIS_PROFILE=long $(PY) -m pytest tests/test_fuzz.py -q $(PYTEST_ARGS)

test-fast: setup
	ICL_PROFILE=smoke $(PY) -m pytest tests -q -m "not slow" $(PYTEST_ARGS)

# seconds, before any notebook starts or model loads: fails with the reason (e.g. a hub model without a network).
# Installs nothing: without a set-up .venv it says to run `make setup` (make run sets up first).
preflight:
	@test -x $(PY) || { echo "preflight: $(PY) does not exist; run \`make setup\` first (make run does it for you)"; exit 1; }
	$(PY) scripts/preflight.py --profile $(PROFILE) --models $(MODELS) --jobs $(JOBS)$(if $(NOTEBOOKS), --notebooks $(NOTEBOOKS)) $(PREFLIGHT_ARGS)$(PREFLIGHT_CLUSTER)

run: setup preflight
	$(PY) scripts/run_all.py --profile $(PROFILE) --models $(MODELS) --jobs $(JOBS)$(RUN_ARGS)

exercises: setup
	$(PY) scripts/make_exercises.py

# writes .cache/control/<CONTROL>.safetensors (+ .sha256, _curve.csv; load it with load_control(path)), or every
# population's checkpoints under .cache/control/population/
control: setup
	$(PY) scripts/train_control.py $(if $(CONTROL),--control $(CONTROL) --seed $(CONTROL_SEED),--populations)

bench: setup
	$(PY) benchmarks/run_benchmarks.py --model $(word 1,$(MODELS))
	$(PY) benchmarks/bench_ops.py --model $(word 1,$(MODELS))

# on a device: the CUDA tests, operator counts, the saliency flow/batch ratio, notebooks 01, 08, 09 at smoke, one
# JSON (scripts/gpu_check.py; on a CPU it runs against a tiny random folder)
gpu-check: setup
	$(PY) scripts/gpu_check.py

record: setup
	$(PY) scripts/record.py save --profile $(PROFILE) --models $(MODELS)$(if $(NOTEBOOKS), --notebooks $(NOTEBOOKS))
	$(PY) scripts/record.py tables

tables: setup
	$(PY) scripts/record.py tables

# only says which blocks differ from the records, which records are stale or broken (exit 1); rewrites nothing
# (`make tables --check` would not do this: make reads --check as its own option)
tables-check: setup
	$(PY) scripts/record.py tables --check

# copy the results page's figures (docs/results.md) from a finished default run into docs/figures
figures:
	$(PY) scripts/readme_figures.py --profile $(PROFILE)

# the site of a finished run: notebooks 00-08 of the first of MODELS that has them, 09 of the positive control
site: setup
	$(PY) scripts/build_site.py --profile $(PROFILE) --models $(MODELS)
	$(MAKE) --no-print-directory site-check

# every page of site/html in headless Chromium (apt-get install chromium chromium-driver; without it: skipped, exit 0,
# unless REQUIRE_BROWSER=1)
site-check: setup
	$(PY) scripts/check_site.py site/html

# JupyterLab comes from the lock (make setup); double-clicking a notebook source (.py) opens it as a notebook: a
# default of the JupyterLab in .venv only
lab: setup
	$(PY) scripts/lab_settings.py
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR)

data: setup
	$(PY) scripts/build_data.py

clean:
	rm -rf $(VENV) results .cache site
