# Two commands do all the set-up on a fresh Debian machine:
#   make demo   creates .venv, installs the project and runs a real job on the embedded bus
#   make test   the same set-up, then lint and the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= dev,spark

.PHONY: all setup system venv bytecode agents demo test lint format bench clean

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

# The real agent CLIs, for the tests that check our profiles against them: into the checkout
# (.cache/agents, ignored by git), never into the system.
AGENTS     := .cache/agents
AGENT_PKGS := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0
$(AGENTS)/.installed: Makefile
	@mkdir -p $(AGENTS)
	npm install --prefix $(AGENTS) --no-audit --no-fund --loglevel=error $(AGENT_PKGS)
	@touch $@

agents: $(AGENTS)/.installed

setup: system venv bytecode agents

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python examples/demo.py

lint: venv system
	$(BIN)/ruff check delegate tests bench examples
	$(BIN)/ruff format --check delegate tests bench examples
	$(BIN)/mypy
	shellcheck -s bash shell/delegate-job shell/delegate-monitor shell/delegate-session-*
	shellcheck -s sh shell/delegate-report.sh

format: venv
	$(BIN)/ruff format delegate tests bench examples
	$(BIN)/ruff check --fix delegate tests bench examples

test: setup lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q

bench: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .cache
