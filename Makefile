# Two commands, both of which set up what they need on a fresh machine:
#   make run   - this machine's slice of the test matrix, and what is gated to other runners; writes the
#                report page (reports/gpumatrix-RUNNER.html) and says where
#   make test  - lint, the whole `pr` test suite (what every pull request runs; nightly.yml runs `nightly`),
#                and the path coverage of its report (reports/coverage-test.html)
# and one that is not part of either (it takes hours on two cores):
#   make mutation - mutation testing (mutmut) of the CPU-side modules against their unit tests; the score
#                and every survivor with its reason are in docs/mutation.md
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# A machine without a working NVIDIA driver gets the CPU build of torch and the Triton
# release whose interpreter the CPU kernel tests use.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
CPU_PINS := torch==2.13.0 triton==3.6.0
# The report page's browser test (tests/unit/gpumatrix/report/test_report_page_browser.py) drives the system's Chromium.
BROWSERS ?= chromium chromium-browser google-chrome google-chrome-stable
TEST_REPORT := reports/gpumatrix-test.json

.PHONY: run test lint install browser clean mutation

$(STAMP): pyproject.toml packaging/gpumatrix/pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
ifeq ($(HAS_GPU),)
	$(PIP) install -q $(CPU_PINS)
endif
	# gpumatrix (packaging/gpumatrix) is a distribution of its own; mxfuse's `test` extra needs it.
	$(PIP) install -q -e ./packaging/gpumatrix -e '.[kernels,test]'
	@touch $@

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gpumatrix run --runner auto

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

# Debian's chromium where none is installed and apt-get can install it (as root, or through sudo without a
# password); elsewhere a note, and the browser test skips (under CI, where CI is set, it fails instead).
browser:
	@for name in $(BROWSERS); do command -v $$name >/dev/null 2>&1 && exit 0; done; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "note: no Chromium and no apt-get: the browser test cannot run"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true >/dev/null 2>&1; then sudo="sudo -n"; \
	else echo "note: no Chromium, and apt-get needs root: the browser test cannot run"; exit 0; fi; \
	echo "installing Debian's chromium for the report page's browser test"; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null \
	  || echo "warning: apt-get could not install chromium: the browser test cannot run"

test: $(STAMP) lint browser
	$(PY) -m pytest -n auto -p no:cacheprovider --suite pr tests --gpumatrix-report $(TEST_REPORT)
	$(VENV)/bin/gpumatrix coverage $(TEST_REPORT) --html reports/coverage-test.html --title "make test: path coverage"

mutation: $(STAMP)
	$(PY) -m benchmarks mutation

clean:
	rm -rf $(VENV) reports .pytest_cache .mutation
