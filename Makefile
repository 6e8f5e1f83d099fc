# Two commands on a fresh machine:  make lab   |   make test
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test setup system-deps lint bench clean

setup: $(STAMP) system-deps

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "onnx_lab needs Python >= 3.11 (found $$($(PYTHON) --version)); set PYTHON=python3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

system-deps:
	@sh scripts/install-system-deps.sh graphviz || true

lab: setup
	$(VENV)/bin/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/01_explore.ipynb

test: setup
	@sh scripts/install-system-deps.sh chromium || echo "chromium missing: the browser test will skip"
	$(PY) -m pytest tests --nbmake notebooks

lint: setup
	$(VENV)/bin/ruff check onnx_lab tests benchmarks

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
