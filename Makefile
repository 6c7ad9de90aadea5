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

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: install demo test test-fast bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml $(PLUGINS)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]" $(foreach p,$(PLUGINS),-e $(dir $(p)))
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/energon-plugins demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis
