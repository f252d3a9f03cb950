# Two commands: `make run` and `make test`. Everything else is a helper for those.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
RIFFLUX_ROOT ?= docs
export RIFFLUX_ROOT
# deploy/Procfile.gpu adds a GPU embed worker (README, "GPU embedding").
PROCFILE ?= Procfile

.PHONY: install run test lint format bench clean

$(BIN)/rifflux: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# Bytecode for our own modules, as installing a wheel writes it. An editable install
# leaves it to the first import, which never writes it where PYTHONDONTWRITEBYTECODE is
# set: then every worker process compiled rifflux and workers from source at boot, ~60 ms
# of CPU each (BENCHMARKS.md, "Worker boot"). Quick when nothing changed.
install: $(BIN)/rifflux
	$(BIN)/python -m compileall -q rifflux workers

# Workers on the embedded SQLite broker, an index job for $(RIFFLUX_ROOT), and the MCP
# server over streamable HTTP on 127.0.0.1:8765 (see Procfile), which prints one
# `rifflux: MCP server at …; try: …` line once it accepts.
run: install
	$(BIN)/honcho start -f $(PROCFILE)

# The suite runs on every core (pytest-xdist); tests that share a server or a network
# namespace carry one xdist_group and run one at a time.
test: install
	$(BIN)/ruff check rifflux workers tests benchmarks
	$(BIN)/ruff format --check rifflux workers tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadgroup

lint: install
	$(BIN)/ruff check rifflux workers tests benchmarks
	$(BIN)/ruff format --check rifflux workers tests benchmarks

format: install
	$(BIN)/ruff format rifflux workers tests benchmarks
	$(BIN)/ruff check --fix rifflux workers tests benchmarks

# The quick benchmarks, which need nothing beside the clone (about a minute): in-process
# index and search on the vendored corpus (hash embeddings), the vector cache at 20k and
# 100k rows, idle broker CPU; one JSON line per measure. The suites
# (`python -m benchmarks SUITE`) and the full-size runs are in BENCHMARKS.md.
bench: install
	$(BIN)/python -m benchmarks.index_and_search --backend hash --corpus tests/corpus/awesome-copilot/agents
	$(BIN)/python -m benchmarks.vector_search --sizes 20000 100000
	$(BIN)/python -m benchmarks.broker_idle_cpu --seconds 5
	@echo "bench: quick set done; the suites: $(BIN)/python -m benchmarks --list; full-size runs: BENCHMARKS.md"

clean:
	rm -rf .rifflux .pytest_cache .ruff_cache .mypy_cache
