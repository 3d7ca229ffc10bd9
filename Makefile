# The two commands a newcomer needs: `make run` and `make test`. Both create .venv/ when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REDOCLY := @redocly/cli@2.77.0
SPECTRAL := @stoplight/spectral-cli@6.16.3

.PHONY: install run test newest lint bench chaos clean

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

# The store's and server's tests against the newest release of each library within pyproject.toml's
# bounds, in a throwaway venv installed from the package registry (fails without it): tests/newest.py.
newest: install
	$(BIN)/python tests/newest.py $(PYTEST_ARGS)

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
	$(BIN)/python -m bench.fanout --streams 1000
	$(BIN)/python -m bench.views --sizes 1000,10000

# The fault suite's long round (docs/reliability.md, "Fault suite"); e.g. CHAOS_ARGS='--hosts 3 --seconds 240'.
chaos: install
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
