# Two commands set everything up on a fresh Debian machine with Python 3.11:
#   make demo   creates .venv, installs fleetguard, runs the embedded default on a simulated fleet
#   make test   installs everything the suite needs (system packages included) and runs lint, types and tests
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-runtime
DEVSTAMP := $(VENV)/.installed-dev
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := prometheus prometheus-alertmanager chromium nats-server slurm-wlm munge

.PHONY: demo test lint typecheck rules unit system-deps bench clean vendor-plotly

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[predictor,dashboard]'
	touch $@

# The tests' PyTorch is the CPU build, pinned with its local version so that pip can never pick the multi-GB
# CUDA build instead: found in pip's find-links where the machine has it, else from PyTorch's CPU index
# (make test TORCH_INDEX=https://download.pytorch.org/whl/cpu).
TORCH       := torch==2.13.0+cpu
TORCH_INDEX ?=

$(DEVSTAMP): $(STAMP)
	@echo "installing the test tools and $(TORCH) (the CPU build of PyTorch, about 200 MB; no CUDA libraries)"
	$(BIN)/pip install -q -e '.[predictor,dashboard,scale,dev]' '$(TORCH)' $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	touch $@

system-deps:
	@command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null && command -v chromium >/dev/null && command -v nats-server >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); }

demo: $(STAMP)
	$(BIN)/fleetguard up --simulate 2x8

lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo

typecheck: $(DEVSTAMP)
	$(BIN)/mypy

unit: $(DEVSTAMP) system-deps
	$(BIN)/pytest

# The shipped alert rules: valid, and firing as their unit tests say (tests/prometheus runs these too).
rules: system-deps
	promtool check rules data/prometheus/alerts.yml
	cd tests/prometheus && promtool test rules alerts_test.yml

test: lint typecheck rules unit

bench: $(DEVSTAMP)
	$(BIN)/python bench/run_all.py

# plotly.js's cartesian partial bundle (MIT), unchanged from npm, served in place of Dash's full plotly.js
# (dashboard/plotly_bundle.py: its VERSION and TRACE_TYPES must match what this fetches).
PLOTLY_VERSION := 4.1.1
vendor-plotly:
	rm -rf $(VENV)/plotly-pack && mkdir -p $(VENV)/plotly-pack
	cd $(VENV)/plotly-pack && npm pack -q plotly.js-cartesian-dist-min@$(PLOTLY_VERSION) && tar -xzf plotly.js-cartesian-dist-min-$(PLOTLY_VERSION).tgz
	cp $(VENV)/plotly-pack/package/plotly-cartesian.min.js dashboard/vendor/plotly-cartesian-$(PLOTLY_VERSION).min.js
	cp $(VENV)/plotly-pack/package/LICENSE dashboard/vendor/plotly-LICENSE

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
