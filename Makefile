# The two commands a fresh machine needs: `make demo` and `make test`.
# Both build .venv from the pinned dependencies in constraints.txt when it is missing or stale.
# PIP_CONSTRAINT (rather than -c) also pins the build backend in pip's isolated build.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck package docs pytest docs-package-pytest bench soak failover jepsen golden clean

DEMO_STAMP := $(VENV)/.installed-demo

# What the demo and the commands it ends with need and nothing more: inert, its own
# dependencies, the OTLP export of its spans and the console.
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing inert and its dependencies into $(VENV) (once)..."
	PIP_CONSTRAINT=constraints.txt $(BIN)/python -m pip install --disable-pip-version-check \
		--progress-bar on -e '.[otlp,console]'
	touch $(DEMO_STAMP)

# Everything the tests, the benchmarks and the examples use besides, and the integrations.
$(STAMP): $(DEMO_STAMP)
	@echo "Installing the tools of the tests, the benchmarks and the examples (once)..."
	PIP_CONSTRAINT=constraints.txt $(BIN)/python -m pip install --quiet \
		--disable-pip-version-check -e '.[test,bench,postgresql,examples,console,otlp,otlp-grpc,docs,mcp,pydantic-ai,openai-agents]'
	touch $(STAMP)

# The demo's log stays in demo.db (ignored by git) for the commands it ends with; each run
# starts it afresh.
demo: $(DEMO_STAMP)
	rm -f demo.db demo.db-*
	$(BIN)/inert demo --log sqlite:///demo.db

# On a clean clone mypy's cache is empty and it keeps one CPU busy for over a minute, which
# nothing else waits for: it runs beside the docs, the package and the tests instead of before
# them. Those three run one after the other, as the package's build and the tests' own build of
# the wheel both write build/.
test: lint
	$(MAKE) --no-print-directory --jobs=2 typecheck docs-package-pytest

docs-package-pytest: $(STAMP)
	$(MAKE) --no-print-directory docs
	$(MAKE) --no-print-directory package
	$(MAKE) --no-print-directory pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (MkDocs, the API reference from the docstrings) in site/, built
# strictly: a broken link or reference fails it. Its Python examples run in the tests
# (tests/test_docs.py); tests/test_site.py reads the pages it builds. It has a folder of its own:
# `make package` empties build/ and dist/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The wheel and the source distribution build, and their metadata and README pass twine's check.
package: $(STAMP)
	rm -rf build dist
	$(BIN)/python -m build --no-isolation --outdir dist . > /dev/null
	$(BIN)/twine check --strict dist/*
	rm -rf build

# The tests spread over TEST_WORKERS processes (pytest-xdist), the slowest started first; idle
# workers take queued tests from busy ones. TEST_WORKERS=0 runs them all in this process. As
# many as the two CPUs of the machine make test is timed on: a third worker shortened the run
# by a minute or two, but starved the tests that run several real runtime processes against a
# deadline (a survivor that must end a killed process's calls within a minute did not).
TEST_WORKERS ?= 2

# The bytecode of inert and of the modules the tests' own processes import is written first:
# on a clean clone, or where PYTHONDONTWRITEBYTECODE is set, each of the processes the tests
# start (the test workers, runtime and MCP server processes, CLI runs, crash children)
# compiled them again, a third of a second of CPU each. The test modules themselves are left
# out: pytest rewrites their asserts and compiles them its own way.
pytest: $(STAMP)
	$(BIN)/python -m compileall -q -x '/(test_[^/]*|conftest)\.py$$' inert tests examples benchmarks
	$(BIN)/pytest --numprocesses $(TEST_WORKERS) --dist worksteal

# A benchmark that crashes or cannot complete a case exits non-zero (guest mode also when it
# misses its target); the others report a stated target missed in their output ("NOT met",
# "**no**"). Every benchmark runs, so that one run gives every figure; then `make bench` fails,
# naming those that exited non-zero.
BENCHMARKS = append_throughput call_actors history restart adapters adapter_path validation \
	tracing_overhead guest_mode postgres_log console erasure

bench: $(STAMP)
	@failed=""; \
	for name in $(BENCHMARKS); do \
		echo "$(BIN)/python -m benchmarks.$$name"; \
		$(BIN)/python -m benchmarks.$$name || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "benchmarks that failed:$$failed" >&2; exit 1; fi

# The example agent server (examples/agent_server) on http://127.0.0.1:8000; Ctrl-C stops it.
.PHONY: example
example: $(STAMP)
	$(BIN)/python -m examples.agent_server

# Long runs kept out of `make test`, which runs a sample of each: 200 SIGKILLs of a process in
# the middle of appending (6 in make test); 200 of a process running the runtime (4), 10,000
# fault runs (500), 100 of them on SQLite (8), the load of 10,000 call keys for 10 minutes with
# faults (1,000 for 30 s), 10,000 simulator seeds (100), 2,000 seeds of runtime processes on a
# partitioned log (8), 20,000 examples of the decider's state machine (1,000) and 100 seeds of
# power cuts (6).
soak: $(STAMP)
	INERT_CRASH_KILLS=200 $(BIN)/pytest tests/log/test_log_crash.py
	INERT_RUNTIME_KILLS=200 INERT_FAULT_SEEDS=10000 INERT_FAULT_SQLITE_SEEDS=100 \
		INERT_LOAD_KEYS=10000 INERT_LOAD_SECONDS=600 \
		$(BIN)/pytest tests/runtime/test_crash_points.py tests/testing/test_faults.py tests/runtime/test_load_smoke.py
	INERT_SIMULATION_SEEDS=10000 $(BIN)/pytest tests/testing/test_simulator.py -k every_seed
	INERT_CLUSTER_SEEDS=2000 $(BIN)/pytest tests/testing/test_cluster_simulator.py -k every_cluster_seed
	INERT_DECIDER_EXAMPLES=20000 $(BIN)/pytest tests/actors/test_decider_stateful.py
	INERT_POWER_CUT_SEEDS=100 $(BIN)/pytest tests/log/test_power_loss.py

# Failovers of a PostgreSQL log between two clusters made for the test (root and Debian's
# postgresql-15 tools): 20 promoted runs under synchronous replication and 20 under
# asynchronous (2 of each in make test), each run's figures printed.
failover: $(STAMP)
	INERT_FAILOVER_RUNS=20 $(BIN)/pytest -s tests/log/test_failover.py

# Seeded fault runs of three runtime processes, each in a network namespace of its own (root,
# iproute2, iptables and Debian's postgresql-15 tools), on a partitioned PostgreSQL log: links
# cut, one-way, lossy and slow, processes killed, and every fourth run a failover of a
# synchronously replicated pair; the whole log checked after each; and three planted bugs, each
# caught (make test: one run and one planted bug, a run that breaks only the invariants of bugs
# still open an expected failure). About 35 s a run.
jepsen: $(STAMP)
	INERT_JEPSEN_RUNS=100 INERT_JEPSEN_SECONDS=10 INERT_JEPSEN_FAILOVER_EVERY=4 \
		INERT_JEPSEN_PLANTS=all INERT_JEPSEN_STRICT=1 $(BIN)/pytest -s tests/log/test_network_faults.py

# Records the golden logs of tests/golden that do not exist yet (see tests/golden/README.md);
# make test replays them all.
golden: $(STAMP)
	$(BIN)/python tests/golden_logs.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist site
