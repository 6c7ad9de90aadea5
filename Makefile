# Two commands set up a fresh machine: `make demo` and `make test`.
# Each creates .venv when missing, installs PyPI's standard torch and the matching torchvision
# first (the wheels users run; they work on a CPU-only machine too), then the core and every
# plugin distribution under plugins/ in editable mode with the dev tools.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.14.1 torchvision==0.29.1
STAMP  := $(VENV)/.installed
PLUGINS := $(wildcard plugins/*/pyproject.toml)
PYTEST_ARGS ?=

# make test-bridge: the released Megatron-Bridge beside us, in its own Python 3.12 environment
# (Bridge 0.6.2 needs Python 3.12 and megatron-core 0.19). PYTHON312: a python3.12 on PATH, else
# pyenv's; set it to point elsewhere.
PYTHON312_CANDIDATES := python3.12 \
	$(wildcard $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions/3.12.*/bin/python3.12)
PYTHON312 ?= $(firstword $(foreach p,$(PYTHON312_CANDIDATES),$(if $(shell $(p) -c \
	"import sys; print(sys.version_info[:2] == (3, 12) or '')" 2>/dev/null),$(p))))
BRIDGE_VENV  ?= .venv-bridge
BRIDGE_PY    := $(BRIDGE_VENV)/bin/python
BRIDGE_STAMP := $(BRIDGE_VENV)/.installed
BRIDGE       ?= megatron-bridge==0.6.2
BRIDGE_CORE  ?= megatron-core==0.19.2
# Bridge is installed without its dependencies (flashinfer, Transformer Engine, mlflow, ...: CUDA
# builds and services a data test never touches); these are the ones its code on our path imports.
BRIDGE_REQUIREMENTS := tests_bridge/requirements.txt

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: install demo lint test test-all test-fast test-bridge bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml $(PLUGINS)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]" $(foreach p,$(PLUGINS),-e $(dir $(p)))
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/energon-plugins demo

# ruff (lint and format), mypy over energon_plugins, and the import contracts (the layers, the
# plugins' public face): all configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The suite runs in a random order (pytest-randomly prints the seed; replay an order with
# PYTEST_ARGS=--randomly-seed=N, or keep the file order with PYTEST_ARGS='-p no:randomly').
# Tests marked slow (several processes, soak-like loops) run in CI (CI=true) and with
# `make test-all`; a plain `make test` leaves them out.
SLOW_FILTER := $(if $(filter true,$(CI)),,-m "not slow")

test: lint
	$(PY) -m pytest -q -n 2 $(SLOW_FILTER) $(PYTEST_ARGS)

test-all: lint
	$(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

$(BRIDGE_PY):
	@test -n "$(PYTHON312)" || { echo "make test-bridge needs Python 3.12: put python3.12 on" \
	  "PATH or pass PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv $(BRIDGE_VENV)

$(BRIDGE_STAMP): $(BRIDGE_PY) pyproject.toml $(PLUGINS) $(BRIDGE_REQUIREMENTS)
	$(BRIDGE_PY) -m pip install -q $(TORCH)
	$(BRIDGE_PY) -m pip install -q $(BRIDGE_CORE) -r $(BRIDGE_REQUIREMENTS) \
	  -e . $(foreach p,$(PLUGINS),-e $(dir $(p)))
	$(BRIDGE_PY) -m pip install -q --no-deps $(BRIDGE)
	touch $(BRIDGE_STAMP)

test-bridge: $(BRIDGE_STAMP)
	$(BRIDGE_PY) -m pytest -q -p no:cacheprovider tests_bridge $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) $(BRIDGE_VENV) site .pytest_cache .hypothesis
