# `make demo` and `make test` work from a fresh clone: they create .venv, install the
# package and the Debian packages they need, then run.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rl-insight-installed

# the integration tier in 2 xdist workers: on the project's 2-core machine the suite
# waits on processes (Ray, Prometheus, simulated steps) more than it computes, and 2
# workers took it from 17 to under 9 minutes (docs/development.md, "Tests"); more did not pay there
PYTEST_WORKERS ?= 2
# the fast tier in 3: its tests wait on threads and loopback sockets, and with 2 workers
# on 2 cores a third of the CPU stood idle (47-52 s in 3 workers, 51-57 s in 2)
FAST_WORKERS ?= 3

.PHONY: setup system-deps test test-fast lint demo bench bench-quick bench-scale bench-tier \
        bench-intake bench-requests bench-registrations pictures soak clean

$(STAMP): pyproject.toml
	@echo "== setting up $(VENV) (Python packages; the first time takes a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on -e '.[test,verl,transferqueue]'
	@echo "== installing verl 0.9.1 and transferqueue 0.1.11 (without GPU or hydra dependencies): the real trainer classes and data queue"
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps 'verl==0.9.1' 'transferqueue==0.1.11'
	@echo "== installing vLLM 0.34.0 and SGLang 0.5.23 into $(VENV)/engines (their Python code without their dependencies, beside the CPU torch, and what their request tracing imports: the suite drives it)"
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps --upgrade \
	    --target $(VENV)/engines 'vllm==0.34.0' 'pybase64==1.5.1' 'cachetools==8.0.2' \
	    'py-cpuinfo==9.0.0' 'sglang==0.5.23' 'triton==3.9.0' 'ipython==9.18.1' 'traitlets==5.16.1' \
	    'pillow==12.3.0'
	@echo "== downloading upstream rl-insight 0.3.0's wheel (not installed: the mixed-version tests unpack it in an environment of their own)"
	$(BIN)/python -m pip download --disable-pip-version-check -q --progress-bar on --no-deps -d $(VENV)/upstream 'rl-insight==0.3.0'
	@touch $(STAMP)

setup: $(STAMP)

system-deps:
	@./scripts/system-deps.sh

lint: setup
	$(BIN)/ruff check rl_insight tests examples scripts bench dashboards

# everything, as CI runs it; the slowest 15 tests close the output
# PYTHONDONTWRITEBYTECODE emptied: where a machine sets it (this project's does), every
# process the suite starts (servers, Ray workers, CLIs: about 500) compiled the package
# again, and pytest rewrote its plugins' modules again in every worker
test: setup system-deps lint
	PYTHONDONTWRITEBYTECODE= ./scripts/private-net.sh $(BIN)/python -m pytest -q -ra \
	    -n $(PYTEST_WORKERS) \
	    --dist loadgroup --durations=15

# for every edit: the tests that start no process (a test that does fails, naming it)
test-fast: setup
	PYTHONDONTWRITEBYTECODE= RL_INSIGHT_FAST_TIER=1 $(BIN)/python -m pytest -q \
	    -m "not integration" -n $(FAST_WORKERS) \
	    --durations=5

demo: setup system-deps
	$(BIN)/python examples/demo.py

bench: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/run.py

bench-quick: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/run.py --quick

# 1,000 engine endpoints and 4,000 rank lanes at three sizes, then lanes alone (about
# 25 minutes; docs/scaling.md); BENCH_SCALE_ARGS=--quick for a 2-minute try
bench-scale: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/scale.py $(BENCH_SCALE_ARGS)

# the lane tier of a 1,000-GPU run with its real classes against one server, 5 minutes
# (docs/scaling.md); BENCH_TIER_ARGS="--nodes 100 --replicas 26 --seconds 60" for a try
bench-tier: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/scale_tier.py $(BENCH_TIER_ARGS)

# the server's intake at saturation beside the code before the lane tier changed
bench-intake: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/intake.py $(BENCH_INTAKE_ARGS)

# engine request spans from 128 replicas into one server: 100,000 a minute for 10
# minutes against the same run without them, then a ramp to where it stops (about 25
# minutes; docs/scaling.md); BENCH_REQUESTS_ARGS="--minutes 1" for a 4-minute try
bench-requests: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/request_spans.py $(BENCH_REQUESTS_ARGS)

# the intake's p99 during a burst of 1,000 registrations, beside the code before the
# discovery files left the database's transaction (about 3 minutes; docs/scaling.md)
bench-registrations: setup system-deps
	./scripts/private-net.sh $(BIN)/python bench/registrations.py $(BENCH_REGISTRATIONS_ARGS)

pictures: setup system-deps
	$(BIN)/python -m pip install -q -e '.[test,docs]'
	./scripts/private-net.sh $(BIN)/python scripts/pictures.py
	./scripts/private-net.sh $(BIN)/python scripts/ray_dashboard_picture.py

soak: setup system-deps
	RL_INSIGHT_SOAK_SECONDS=600 RL_INSIGHT_SOAK_SPANS_PER_S=2000 ./scripts/private-net.sh $(BIN)/python -m pytest -q -s \
	    tests/reliability/test_soak.py

clean:
	rm -rf $(VENV) .demo-home .pytest_cache
