# Two commands: `make run` and `make test`. Everything else is a helper for those.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
RIFFLUX_ROOT ?= docs
export RIFFLUX_ROOT

.PHONY: install run test lint format bench clean

$(BIN)/rifflux: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/rifflux

# Workers on the embedded SQLite broker, an index job for $(RIFFLUX_ROOT), and the MCP
# server over streamable HTTP on 127.0.0.1:8765 (see Procfile).
run: install
	$(BIN)/honcho start -f Procfile

test: install
	$(BIN)/ruff check rifflux workers tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check rifflux workers tests benchmarks
	$(BIN)/ruff format --check rifflux workers tests benchmarks

format: install
	$(BIN)/ruff format rifflux workers tests benchmarks
	$(BIN)/ruff check --fix rifflux workers tests benchmarks

clean:
	rm -rf .rifflux .pytest_cache .ruff_cache .mypy_cache
