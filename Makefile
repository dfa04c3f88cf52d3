# Two commands do all the set-up on a fresh Debian machine:
#   make demo   creates .venv, installs delegate with its runtime extras, runs a real job on the
#               embedded bus and reports on it with Spark
#   make test   adds the dev tools, the real agent CLIs and the test-only system packages, then
#               lint and the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# What people run (the toolkit and the Spark report), and what the tests add to it.
DEMO_EXTRAS := spark,web,mcp
TEST_EXTRAS := dev,spark,web,mcp,docs

.PHONY: all setup setup-demo system system-demo venv venv-demo bytecode class-archive agents demo \
	test lint docs \
	format bench clean

all: test

system-demo:
	@scripts/system-deps.sh demo

system:
	@scripts/system-deps.sh test

# One stamp per set of extras: `make demo` then `make test` adds the dev tools on top.
$(VENV)/.installed-%: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[$*]'
	@touch $@

venv-demo: $(VENV)/.installed-$(DEMO_EXTRAS)
venv: $(VENV)/.installed-$(TEST_EXTRAS)

# PYTHONDONTWRITEBYTECODE may be set; compile once so `delegate publish` starts fast.
bytecode:
	@$(BIN)/python -m compileall -q delegate

# The report's JVM class archive (services/class_archive): made once per Java and PySpark, it
# halves Spark's start. `make test` makes it first (the suite starts many JVMs); after `make
# demo` the demo's own report starts it being made in the background, for the next report.
class-archive:
	@$(BIN)/python -m delegate.runtime.class_archive

# The real agent CLIs, for the tests that check our profiles against them: into the checkout
# (.cache/agents, ignored by git), never into the system.
AGENTS     := .cache/agents
AGENT_PKGS := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0
$(AGENTS)/.installed: Makefile
	@mkdir -p $(AGENTS)
	npm install --prefix $(AGENTS) --no-audit --no-fund --loglevel=error $(AGENT_PKGS)
	@touch $@

agents: $(AGENTS)/.installed

setup-demo: system-demo venv-demo
	@$(MAKE) -s bytecode

setup: system venv agents
	@$(MAKE) -s bytecode class-archive

demo: setup-demo
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python examples/demo.py

lint: venv system
	$(BIN)/ruff check delegate tests bench examples
	$(BIN)/ruff format --check delegate tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/vulture
	shellcheck -s bash shell/delegate-job shell/delegate-monitor shell/delegate-session-*
	shellcheck -s sh shell/delegate-report.sh
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The documentation site (MkDocs, Material) into site/: the pictures taken again from a real run
# (scripts/screenshots.py), the references made from the code at build time (docs/hooks).
docs: venv system
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/screenshots.py docs/images
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: venv
	$(BIN)/ruff format delegate tests bench examples
	$(BIN)/ruff check --fix delegate tests bench examples

# One pytest worker per core (pytest-xdist); tests/conftest.py orders the Spark tests first so
# that one worker, and one JVM, runs them.
TEST_WORKERS ?= auto
test: setup lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q --durations=25 \
		-n $(TEST_WORKERS) --dist load

bench: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .cache
