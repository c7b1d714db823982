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

# other RL frameworks the suite drives (docs/frameworks.md), each in a folder of its own
# (its pins differ from the others'; the folder's name holds `site-packages`, which dill,
# under datasets, takes for installed code). TRL: what `from trl import GRPOTrainer` and
# a CPU run import; AReaL: what areal.utils.stats_logger and perf_tracer import (areal's
# own __init__ loads its controllers); SkyRL: `skyrl` 0.3.0, the package skyrl-train
# became (skyrl-train 0.3.1 wants Python 3.12 and Ray 2.51); OpenRLHF: its Python code
# alone (what its trainer, engine actor and CLI import besides vLLM, DeepSpeed and
# flash-attn is in the project's environment already: ray, torch, numpy, aiohttp, tqdm)
TRL_PACKAGES = trl==1.16.0 accelerate==1.16.0 datasets==5.2.0 pandas==3.1.1 pyarrow==26.0.1 \
    dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 python-dateutil==4.0.0
AREAL_PACKAGES = areal==1.0.4 colorlog==6.12.0 tenacity==9.2.1 flask==3.1.3 blinker==1.9.0 \
    itsdangerous==2.2.0 torchdata==0.11.0 lark==1.3.1 hydra-core==1.4.0.dev1 numba==0.68.1 \
    llvmlite==0.50.0 pillow==12.3.0 einops==0.8.2 aiofiles==25.1.0 openai==3.60.0 \
    httpx2==2.16.2 sniffio==1.3.1 jiter==0.19.0 swanlab==0.6.12 pyecharts==2.1.0 \
    simplejson==4.3.0 prettytable==3.19.0 boto3==1.44.8 botocore==1.44.8 s3transfer==0.19.3 \
    jmespath==1.1.0 python-dateutil==2.9.0.post0 nvidia-ml-py==13.615.71 trackio==0.43.0 \
    gradio_client==2.7.2 wandb==0.31.0 xxhash==4.1.0 tensorboardX==2.6.5 tabulate==0.10.0
SKYRL_PACKAGES = skyrl==0.3.0 loguru==0.7.3 skyrl-gym==0.4.0 pandas==3.1.1 \
    python-dateutil==4.0.0
OPENRLHF_PACKAGES = openrlhf==0.11.2

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
	@echo "== installing TRL 1.16.0, AReaL 1.0.4, SkyRL 0.3.0 and OpenRLHF 0.11.2 into $(VENV)/frameworks/<name>/site-packages (their Python code without their GPU dependencies, and what their trainers' logging paths import, beside the CPU torch: the suite drives their own classes)"
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps --upgrade \
	    --target $(VENV)/frameworks/trl/site-packages $(TRL_PACKAGES)
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps --upgrade \
	    --target $(VENV)/frameworks/areal/site-packages $(AREAL_PACKAGES)
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps --upgrade \
	    --target $(VENV)/frameworks/skyrl/site-packages $(SKYRL_PACKAGES)
	$(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar on --no-deps --upgrade \
	    --target $(VENV)/frameworks/openrlhf/site-packages $(OPENRLHF_PACKAGES)
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
