# Two commands do all the set-up on a fresh Debian machine:
#   make demo   creates .venv, installs the project and runs a real job on the embedded bus
#   make test   the same set-up, then lint and the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= dev,spark

.PHONY: all setup system venv bytecode demo test lint format bench clean

all: test

system:
	@scripts/system-deps.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]' --config-settings editable_mode=compat
	@touch $(STAMP)

# PYTHONDONTWRITEBYTECODE may be set; compile once so `delegate publish` starts fast.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q delegate

venv: $(STAMP)

setup: system venv bytecode

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python examples/demo.py

lint: venv
	$(BIN)/ruff check delegate tests bench examples
	$(BIN)/ruff format --check delegate tests bench examples
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format delegate tests bench examples
	$(BIN)/ruff check --fix delegate tests bench examples

test: setup lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q

bench: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
