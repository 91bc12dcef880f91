# Two commands, both of which set up what they need on a fresh machine:
#   make run   - this machine's slice of the test matrix, and what is gated to other runners
#   make test  - lint and the whole `pr` test suite (what every pull request runs; nightly.yml runs `nightly`)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# A machine without a working NVIDIA driver gets the CPU build of torch and the Triton
# release whose interpreter the CPU kernel tests use.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
CPU_PINS := torch==2.13.0 triton==3.6.0

.PHONY: run test lint install clean

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
ifeq ($(HAS_GPU),)
	$(PIP) install -q $(CPU_PINS)
endif
	$(PIP) install -q -e '.[kernels,test]'
	@touch $@

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gpumatrix run --runner auto

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

test: $(STAMP) lint
	$(PY) -m pytest -n auto -p no:cacheprovider --suite pr tests

clean:
	rm -rf $(VENV) reports .pytest_cache
