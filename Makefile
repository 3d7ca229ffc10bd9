# The two commands a newcomer needs: `make run` and `make test`. Both create .venv/ when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: install
	mkdir -p var
	$(BIN)/cantstop serve --host 127.0.0.1 --port 8000

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check domain service tests bench
	$(BIN)/ruff format --check domain service tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.http

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
