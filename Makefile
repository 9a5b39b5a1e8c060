# Two commands for a fresh machine: `make demo` and `make test`.
#
# torch: an existing torch in .venv is kept.  Otherwise TORCH_SPEC is installed first; its
# default pins the 2.13.0 release so that machines with a local CPU wheel of it (CI) take that
# wheel instead of downloading a CUDA build.  Elsewhere, choose yours:  make test TORCH_SPEC=torch
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

# One pytest worker per core (pytest-xdist); TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= auto

.PHONY: demo test bench venv install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

venv: $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH_SPEC)"

install: venv
	$(PIP) install -e .

install-dev: venv
	$(PIP) install -e ".[dev]"

demo: venv
	$(PIP) install -e ".[demo]"
	$(BIN)/npu-anywhere demo

test: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

bench: install
	$(BIN)/npu-anywhere bench

clean:
	rm -rf $(VENV) build src/*.egg-info
