# Two commands on a fresh machine:  make lab   |   make test
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test check setup system-deps lint bench fuzz conformance clean

setup: $(STAMP) system-deps

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "onnx_lab needs Python >= 3.11 (found $$($(PYTHON) --version)); set PYTHON=python3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# plain `jupyter nbconvert --to html` keeps each onnx_lab widget's last view
	$(PY) -m onnx_lab.widgets.nbconvert --install-config
	touch $(STAMP)

system-deps:
	@sh scripts/install-system-deps.sh graphviz || true

# Opens notebooks/01_explore.ipynb with the repository as the server's root (scripts/lab.sh; on a
# machine without a display it starts with --no-browser and prints the URL to open from
# elsewhere). Widget state is saved with the notebook (settings override in the venv), so a
# saved notebook shows each widget's last view without a kernel.
LAB_PORT ?= 8888
lab: setup
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@[ -f $(VENV)/share/jupyter/lab/settings/overrides.json ] || \
	  echo '{"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	@sh scripts/lab.sh $(VENV)/bin/jupyter $(LAB_PORT) notebooks/01_explore.ipynb

# Every test and the notebooks: the tests that drive no browser and the notebooks (nbmake) in
# two worker processes (one per core: most of them are one-core Python), then the JupyterLab
# browser tests in one process (a browser test's kernel, server and Chromium already take both
# cores; beside another they time out). Both parts run; the exit status is 1 if either fails.
test: setup
	@sh scripts/install-system-deps.sh chromium || echo "chromium missing: the browser test will skip"
	$(PY) -m pytest tests --ignore=tests/browser --nbmake notebooks -n 2 --dist loadfile; a=$$?; \
	  $(PY) -m pytest tests/browser; b=$$?; \
	  [ $$a -eq 0 ] && [ $$b -eq 0 ]

# The contributors' fast tier: lint, the architecture test and the unit tests that need no
# browser, no torch and no long runs (slow: a test that takes over a second, sweeps, the fuzz
# harness, subprocess round trips). `make test` stays the whole suite.
CHECK_MARKERS := not slow and not browser and not torch
check: setup
	$(VENV)/bin/ruff check onnx_lab tests benchmarks
	$(PY) -m pytest tests -q -p no:cacheprovider -m "$(CHECK_MARKERS)"

lint: setup
	$(VENV)/bin/ruff check onnx_lab tests benchmarks

# 10,000 hostile models, CLI calls and histories, each in its own process (20 s, 2 GiB):
# every case must end in a result or a LabError. CASES=, JOBS=, SEED= override.
fuzz: setup
	$(PY) tests/fuzz/fuzz.py --cases $(or $(CASES),10000) --jobs $(or $(JOBS),2) \
	  $(if $(SEED),--seed $(SEED)) --out test-artifacts/fuzz

# The ONNX backend conformance cases (onnx's generated node cases + the model folders of its
# wheel, about 2,000) through open..safe..save..onnxruntime..compare, each in its own process
# (60 s, 2 GiB); summary.json + cases.csv in test-artifacts/conformance (docs/core.md).
# JOBS=, SUBSET=, SEED= override.
conformance: setup
	$(PY) scripts/conformance.py --jobs $(or $(JOBS),2) $(if $(SUBSET),--subset $(SUBSET)) \
	  $(if $(SEED),--seed $(SEED)) --out test-artifacts/conformance

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
