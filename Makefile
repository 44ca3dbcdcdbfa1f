# gpuyard: `make run` starts a pool on this machine and runs the example job;
# `make test` runs every check. Both set up the virtual environment first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpuyard-installed
RUN_STAMP := $(VENV)/.gpuyard-run-installed
PYTEST_ARGS ?=

.PHONY: setup chromium image-tools run test lint unit bench clean ray-cluster

# MPICH and Open MPI both ship mpirun and libmpi, so MPICH (for `mpi: mpich` jobs) lives in a
# prefix of its own, where gpuyard's settings look for it (GPUYARD_MPI_MPICH); Open MPI comes
# with the train extra, in the environment itself.
MPICH_PREFIX := $(VENV)/mpich
MPICH_SPEC ?= mpich>=4.2,<6

# Two installs: `make run` needs the pool and what its example runs (the `example` extra: a CPU
# build of torch, a 190 MB download); `make test` adds the rest (`dev`: Ray, Playwright, MPI, the
# Slurm clients, the linters; about 1.8 GB). pip says what it fetches and how big, as it goes.
$(RUN_STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "gpuyard: creating the virtual environment $(VENV)"; \
	  $(PYTHON) -m venv $(VENV); }
	@echo "gpuyard: installing the pool and the example's torch into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar off -e '.[example]'
	@touch $@

$(STAMP): pyproject.toml | $(RUN_STAMP)
	@echo "gpuyard: installing what the tests use into $(VENV) (Ray, Playwright, MPI, Slurm clients, linters; about 1.8 GB)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

$(MPICH_PREFIX)/bin/mpichversion: | $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
	    --prefix $(MPICH_PREFIX) '$(MPICH_SPEC)'

setup: $(STAMP) $(MPICH_PREFIX)/bin/mpichversion chromium image-tools

# The web UI's browser tests (tests/e2e/test_web_browser.py) drive Debian's Chromium through
# Playwright: Playwright's own browser download needs the internet, the distribution's package
# does not. Installed only when missing; where that cannot be done (not root, no apt-get) this
# says so and the browser tests skip with the same reason.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the web UI's browser tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	      || echo "could not install chromium: the browser tests will skip"; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    (sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium) || echo "could not install chromium: the browser tests will skip"; \
	  else \
	    echo "chromium is missing and cannot be installed here (needs root and apt-get):"; \
	    echo "the browser tests will skip; install it with: apt-get install chromium"; \
	  fi; }

# The image tests (tests/integration/images) start Debian's OCI registry with TLS (openssl) and
# bcrypt htpasswd users (apache2-utils), and build their images from busybox-static: no
# internet; the tests of workers in an image (tests/integration/executors/test_worker_image.py)
# need that busybox static (its rootfs has no libc). Installed only when missing; where that
# cannot be done the image tests skip, saying which packages are missing. The image of the
# launch modes (gpuyard/testing/pyimage.py) carries Debian's own Python 3.11 and dash.
IMAGE_TOOLS := docker-registry:docker-registry htpasswd:apache2-utils busybox:busybox-static openssl:openssl \
	/usr/bin/python3.11:python3.11 /usr/bin/dash:dash
image-tools:
	@missing=""; for pair in $(IMAGE_TOOLS); do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	ldd /bin/busybox 2>&1 | grep -Eq 'not a dynamic|statically linked' \
	  || case "$$missing" in *busybox-static*) ;; *) missing="$$missing busybox-static";; esac; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (apt-get) for the image tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
	      || echo "could not install$$missing: the image tests will skip"; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    (sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq $$missing) || echo "could not install$$missing: the image tests will skip"; \
	  else \
	    echo "missing$$missing, which cannot be installed here (needs root and apt-get):"; \
	    echo "the image tests will skip; install them with: apt-get install$$missing"; \
	  fi; fi

# Start (or reuse) a pool of 2 virtual nodes in the background, submit the example job,
# stream its log, and fail unless it succeeds. `gpuyard down` stops the pool.
run: $(RUN_STAMP)
	@echo "gpuyard: starting a pool of 2 virtual nodes in the background (gpuyard down stops it)"
	@$(BIN)/gpuyard up --detach --virtual-nodes 2 --gpus-per-node 2
	@job=$$($(BIN)/gpuyard submit --name ddp-example --json --mode pytorch --nodes 2 --gpus 2 -- \
	    $(abspath $(BIN))/python $(abspath examples/ddp_train.py) \
	    | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["id"])') && \
	  echo "submitted job $$job; its log:" && \
	  $(BIN)/gpuyard logs --follow $$job && \
	  $(BIN)/gpuyard wait $$job && \
	  echo "job $$job succeeded. Try: $(BIN)/gpuyard ls, gpuyard show $$job, gpuyard down"

# A Ray test cluster on this machine (docs/cluster.md): a head on 127.0.0.1 and RAY_NODES nodes
# on 127.0.0.2, .3, … (labels gpuyard.node=nodeN and zone, 2 fake GPUs each), in the foreground
# until Ctrl-C, which stops every process of it (and only of it: not `ray stop`).
RAY_NODES ?= 4
ray-cluster: setup
	$(BIN)/python -m gpuyard.testing.raycluster up $(RAY_NODES)

lint: setup
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy src
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup --durations=20 $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/control_plane.py
	$(BIN)/python bench/supervise.py
	$(BIN)/python bench/scheduler.py
	$(BIN)/python bench/simulate.py
	$(BIN)/python bench/usage.py
	$(BIN)/python bench/goodput.py
	$(BIN)/python bench/web.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
