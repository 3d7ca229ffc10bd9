# The two commands a newcomer needs: `make run` and `make test`. Both create .venv/ when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REDOCLY := @redocly/cli@2.77.0
SPECTRAL := @stoplight/spectral-cli@6.16.3

.PHONY: install run test test-newest lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

HOST ?= 127.0.0.1
PORT ?= 8000

run: install
	mkdir -p var
	$(BIN)/cantstop serve --host $(HOST) --port $(PORT)

test: install
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)  # the browser tests' Chromium
	$(BIN)/python -m pytest -q -n auto $(PYTEST_ARGS)  # pytest-xdist: one worker per core

# The store's tests against the newest release of each library whose pin was loosened once the
# store used only its public API (psycopg, psycopg-pool: pyproject.toml), in a venv of their own.
NEWEST := /tmp/cantstop-newest
STORE_TESTS := tests/test_fast_paths.py tests/test_outages.py tests/test_log_reader.py tests/test_views.py
test-newest:
	rm -rf $(NEWEST) && $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]'
	$(NEWEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(psycopg|psycopg-pool|eventsourcing) '
	$(NEWEST)/bin/python -m pytest -q -n auto $(STORE_TESTS)

lint: install
	$(BIN)/ruff check domain service tests bench clients
	$(BIN)/ruff format --check domain service tests bench clients
	$(BIN)/mypy
	$(BIN)/mypy --strict clients/python/examples  # the reference bot (mypy_path finds the client)
	$(BIN)/lint-imports
	npx --yes $(REDOCLY) lint openapi.yaml
	npx --yes $(SPECTRAL) lint openapi.yaml --ruleset .spectral.yaml --fail-severity=warn

bench: install
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.http
	$(BIN)/python -m bench.scaling
	$(BIN)/python -m bench.streams --streams 1000
	$(BIN)/python -m bench.views --sizes 1000,10000

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
