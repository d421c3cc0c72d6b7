# `make test` is the only thing CI runs (.ci/run); `make test-fast` is the edit loop.

PYTHON ?= python3
EXTRAS ?= dev,spark,docs

VENV := .venv
BIN := $(VENV)/bin
comma := ,
# One stamp per extras set, so switching EXTRAS (e.g. to dev,spark) reinstalls.
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: venv demo demo-spark demo-streaming test test-fast docs docs-check bench bench-spark lint clean soak screenshots

venv: $(STAMP)

# rayq's Spark jar compiles with javac (a JRE alone runs Spark, but not the JVM Spark
# tests, which fail on CI without it): a JDK is installed with apt-get when javac is
# missing (sudo when not root), or one line says it is needed.
SUDO = $(if $(filter 0,$(shell id -u)),,sudo)
JDK_PACKAGE := openjdk-17-jdk-headless
define install_jdk
	@if command -v javac >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
		echo "no javac: installing $(JDK_PACKAGE) (rayq's Spark jar and its tests need a JDK)"; \
		{ $(SUDO) apt-get update -y && \
		  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(JDK_PACKAGE); } || \
		echo "could not install $(JDK_PACKAGE): the JVM Spark tests need a JDK"; \
	else echo "no javac and no apt-get: the JVM Spark tests need a JDK 17 ($(JDK_PACKAGE))"; fi
endef

# The web console's browser tests (tests/integration/test_console_browser.py) drive
# Debian's chromium with its chromedriver: installed with apt-get when missing, as the JDK.
CHROMIUM_PACKAGES := chromium chromium-driver
define install_chromium
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
		echo "no chromium/chromedriver: installing $(CHROMIUM_PACKAGES) (the console's browser tests)"; \
		{ $(SUDO) apt-get update -y && \
		  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(CHROMIUM_PACKAGES); } || \
		echo "could not install $(CHROMIUM_PACKAGES): the console's browser tests need them"; \
	else echo "no chromium and no apt-get: the console's browser tests need $(CHROMIUM_PACKAGES)"; fi
endef

$(STAMP): pyproject.toml
	$(install_jdk)
	$(install_chromium)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/pip install -e ".[$(EXTRAS)]"
	touch $@

# lint-imports and mypy find modules on the file system, where actors/ and store/ are not
# inside rayq/ (pyproject's package-dir maps them at install time). $(LINT_VIEW) is a tree
# of symlinks laid out as installed (rayq/actors -> actors/, rayq/store -> store/), first
# on their path, so every module is checked under its import name (rayq.store.codec).
# lint-imports runs inside it because it puts its working directory first on sys.path;
# mypy finds it through MYPYPATH (its cache, .mypy_cache/, makes a second run quick).
LINT_VIEW := build/lint-view

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	rm -rf $(LINT_VIEW) && mkdir -p $(LINT_VIEW)/rayq
	for f in rayq/*; do ln -s ../../../$$f $(LINT_VIEW)/rayq/; done
	ln -s ../../../actors $(LINT_VIEW)/rayq/actors
	ln -s ../../../store $(LINT_VIEW)/rayq/store
	cd $(LINT_VIEW) && ../../$(BIN)/lint-imports ../../pyproject.toml
	MYPYPATH=$(LINT_VIEW) $(BIN)/mypy -p rayq

# The documentation site (mkdocs.yml, docs/): `docs` builds it into site/; `docs-check`
# builds it with --strict (a broken link, anchor or API reference fails) into a
# throwaway folder, and is part of `test`. (NO_MKDOCS_2_WARNING: no banner about
# Material's successor in every build.)
MKDOCS = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(STAMP)
	$(MKDOCS) build --strict --site-dir site

docs-check: $(STAMP)
	rm -rf build/docs-check
	$(MKDOCS) build --strict --quiet --site-dir build/docs-check

# Call .venv/bin/pytest, not `python -m pytest`: the latter puts the repo root on
# sys.path, so `import store` would wrongly succeed.
# The suite runs as two pytest processes at once. Most tests wait on Ray actors,
# sockets and Spark far more than they compute (a serial run kept the 2 cores about a
# third busy), so two processes, each with its own Ray sessions, finish in about 60% of
# the time. SIDE lists what the second process runs (its output follows the first's);
# everything else, new test modules included, runs in the first.
SIDE = tests/unit tests/recovery tests/soak tests/spark \
	tests/integration/test_push_consumer.py tests/integration/test_job_submit.py \
	tests/integration/test_pop_failover.py tests/integration/test_restarts.py \
	tests/integration/test_replication_async.py tests/integration/test_replication_reads.py

test: $(STAMP) lint docs-check
	@mkdir -p build; \
	$(BIN)/pytest $(SIDE) -p no:cacheprovider > build/test-side.log 2>&1 & side=$$!; \
	$(BIN)/pytest tests $(addprefix --ignore=,$(SIDE)); first=$$?; \
	wait $$side; second=$$?; \
	echo "---- the second process: $(SIDE) ----"; cat build/test-side.log; \
	echo "pytest exit codes: $$first (first), $$second (second)"; \
	test $$first -eq 0 && test $$second -eq 0

test-fast: $(STAMP)
	$(BIN)/pytest tests/unit -q

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

demo-spark: $(STAMP)
	$(BIN)/python examples/spark_pipeline.py

demo-streaming: $(STAMP)
	$(BIN)/python examples/structured_streaming.py

# The web console's screenshots in docs/images/console-*.png (docs/guide/console.md): a
# deployment of its own with some data, the console, a headless Chromium.
screenshots: $(STAMP)
	$(BIN)/python docs/screenshots.py --out docs/images

# Figures print as they come and go as JSON lines to $(RESULTS) (benchmarks/results.py);
# plot.py then draws them into docs/bench/*.png (docs/benchmarks.md shows them). ANCHORS=<file>: the
# anchors' JSON lines of the same run (../shared/anchors), drawn beside rayq's. QUICK=1:
# the smaller runs (smoke figures).
RESULTS ?= bench-results/results.jsonl
ANCHORS ?=
QUICK ?=
Q = $(if $(QUICK),--quick)
PLOT = $(BIN)/python benchmarks/plot.py $(RESULTS) --out docs/bench $(if $(ANCHORS),--anchors $(ANCHORS))

bench: $(STAMP)
	rm -f $(RESULTS)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/store_bench.py $(Q)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/codec_bench.py
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/arrow_bench.py
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/arrow_encode_bench.py $(Q)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/broker_bench.py $(Q)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/push_bench.py $(Q)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/data_bench.py
	$(PLOT)

bench-spark: $(STAMP)
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/spark_bench.py
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/spark_write_bench.py
	RAYQ_BENCH_RESULTS=$(RESULTS) $(BIN)/python benchmarks/structured_streaming_bench.py
	$(PLOT)

# The nemesis soak (tests/soak/, docs/guide/soak.md): DURATION (default 30m) of faults, a
# fault every 10 s on average; SEED= replays a schedule (default: a random one, printed).
# `make test` runs two short ones (tests/soak/test_soak.py).
DURATION ?= 30m
SEED ?=

soak: $(STAMP)
	PYTHONPATH=tests $(BIN)/python -m soak --duration $(DURATION) $(if $(SEED),--seed $(SEED))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist site *.egg-info
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
