# `make test` is the only thing CI runs (.ci/run); `make test-fast` is the edit loop.

PYTHON ?= python3
EXTRAS ?= dev,spark

VENV := .venv
BIN := $(VENV)/bin
comma := ,
# One stamp per extras set, so switching EXTRAS (e.g. to dev,spark) reinstalls.
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: venv demo demo-spark test test-fast bench bench-spark lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/pip install -e ".[$(EXTRAS)]"
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Call .venv/bin/pytest, not `python -m pytest`: the latter puts the repo root on
# sys.path, so `import store` would wrongly succeed.
test: $(STAMP) lint
	$(BIN)/pytest tests

test-fast: $(STAMP)
	$(BIN)/pytest tests/unit -q

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

demo-spark: $(STAMP)
	$(BIN)/python examples/spark_pipeline.py

bench: $(STAMP)
	$(BIN)/python benchmarks/store_bench.py
	$(BIN)/python benchmarks/codec_bench.py
	$(BIN)/python benchmarks/broker_bench.py
	$(BIN)/python benchmarks/push_bench.py

bench-spark: $(STAMP)
	$(BIN)/python benchmarks/spark_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
