# make serve: set up .venv and run a broker on 127.0.0.1:9092 with data in ./chronik-data
#             and its schema registry on http://127.0.0.1:8081 (REGISTRY_LISTEN= turns it off)
# make cluster: ZooKeeper on 127.0.0.1:2181 and three brokers on 127.0.0.1:9092-9094,
#               data in ./chronik-cluster (needs ZooKeeper: make deps). A broker that dies
#               is reported and the others keep running; Ctrl-C stops them all
# make cluster-broker N=2 ACTION=kill: from another terminal, kill (SIGKILL), stop
#               (SIGTERM), start or restart broker N of the running `make cluster`;
#               start N=4 adds broker 4 on 127.0.0.1:9095; ACTION=status lists them
# make test:  the whole test suite (unit, integration with real clients, Spark), in
#             TEST_WORKERS (2) processes
# make fuzz:  fuzz a live broker for FUZZ_SECONDS (findings in ./fuzz-findings)
# make chaos: random faults against a 3-broker cluster under the Jepsen-style workloads
#             for CHAOS_MINUTES in all, split evenly between CHAOS_SEEDS (a fresh cluster
#             per seed); CHAOS_ARGS adds options (--scenario all, --kinds ..., --out DIR).
#             Needs root (network namespaces); a failed run is saved and its re-run printed
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SERVE_ARGS ?=
REGISTRY_LISTEN ?= 127.0.0.1:8081
PYTEST_ARGS ?=

.PHONY: serve cluster cluster-broker test test-fast lint bench bench-quick bank-demo deps clean fuzz chaos

# setup.py compiles chronik.records.stamping and .heads: an edit of either reinstalls.
$(STAMP): pyproject.toml setup.py src/chronik/records/stamping.py src/chronik/records/heads.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

deps: $(STAMP)
	bash scripts/install-test-deps.sh

serve: $(STAMP)
	$(VENV)/bin/chronik serve \
	  $(if $(REGISTRY_LISTEN),--schema-registry-listen $(REGISTRY_LISTEN)) $(SERVE_ARGS)

CLUSTER_ARGS ?=
cluster: $(STAMP)
	$(PY) scripts/cluster.py $(CLUSTER_ARGS)

# No $(STAMP): a command to the running cluster must not reinstall the venv under it.
ACTION ?= status
N ?=
cluster-broker:
	$(PY) scripts/cluster.py $(ACTION) $(N) $(CLUSTER_ARGS)

# Most of the suite's time is waiting (brokers starting, failovers, fault timings), so
# more workers than cores pays: four on a 2-core machine (13 minutes against 19 with two).
# tests/conftest.py keeps a module's shared cluster, the Spark session and each chaos
# lane on one worker. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 4
test: deps
	$(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not spark" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts

# The bounded run in `make test` is the same harness with a fixed seed and frame count.
FUZZ_SECONDS ?= 600
FUZZ_SEED ?= 1
FUZZ_FRAMES ?= 0
fuzz: $(STAMP)
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) FUZZ_FRAMES=$(FUZZ_FRAMES) \
	FUZZ_FINDINGS=$(CURDIR)/fuzz-findings \
	$(PY) -m pytest -q -s --timeout=0 tests/integration/test_fuzz.py::test_fuzz_campaign

CHAOS_MINUTES ?= 30
CHAOS_SEEDS ?= 1,2,3
CHAOS_ARGS ?=
chaos: deps
	PYTHONPATH=tests $(PY) -m chaos.campaign --minutes $(CHAOS_MINUTES) --seeds $(CHAOS_SEEDS) \
	  $(CHAOS_ARGS)

BENCH_ARGS ?= --repeat 3
bench: $(STAMP)
	$(PY) bench/broker_bench.py $(BENCH_ARGS)

bench-quick: $(STAMP)
	$(PY) bench/broker_bench.py --quick

bank-demo: $(STAMP)
	$(PY) examples/bank/run.py demo

clean:
	rm -rf $(VENV) chronik-data chronik-cluster .pytest_cache
