# countersign — `make test` and `make demo` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install system-deps test demo lint format mypy imports bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev,fast,openai-agents,pydantic-ai]"
	touch $(STAMP)

install: $(STAMP) system-deps

# Real Redis servers for the tests and the embedded default; Chromium for the browser tests.
system-deps:
	@./scripts/system-deps.sh

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy agent_host bot slack_sandbox bench
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider --durations=15

# The demo needs Redis but no browser: it prints a URL for yours.
demo: $(STAMP)
	@./scripts/system-deps.sh redis
	$(BIN)/countersign demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

mypy: install
	$(BIN)/mypy agent_host bot slack_sandbox bench

imports: install
	$(BIN)/lint-imports

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .countersign .pytest_cache .mypy_cache .ruff_cache
