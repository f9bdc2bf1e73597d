# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv from a bare Python 3.11 and installs everything itself. torch is
# installed first, pinned to the CPU build 2.13.0, so nothing ever pulls a CUDA build.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup system-deps demo test lint typecheck bench clean screenshots

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

system-deps:
	@bash scripts/system-deps.sh

demo: setup system-deps
	$(BIN)/deepedge demo --site

test: setup system-deps
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=40

# The dashboard's browser tests, writing docs/OPERATING.md's screenshots as they go.
screenshots: setup system-deps
	DEEPEDGE_SCREENSHOTS=docs/images $(BIN)/python -m pytest -q tests/api/test_dashboard_operator_browser.py

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: setup
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
