# The README's two commands are `sudo make demo` and `make test`; the rest are conveniences.
VENV := .venv/bin
export PATH := $(CURDIR)/$(VENV):$(PATH)
BOARDS ?= 3
LINT_PATHS := npudure workshop ansible_plugins tests scripts roles $(wildcard benchmarks)

.PHONY: bootstrap demo test lint typecheck proto lock local lab-up lab-down bench-forwarding

bootstrap:
	@scripts/bootstrap.sh

## The main job: emulated fleet up, site.yml, verify.yml, benchmark.yml, print the result (root).
demo: bootstrap
	@scripts/demo.sh $(BOARDS)

## Every test: lint, unit, integration, the emulated fleet + Ansible + molecule (root for the fleet).
test: bootstrap
	$(VENV)/ruff check $(LINT_PATHS)
	$(VENV)/ruff format --check $(LINT_PATHS)
	$(VENV)/mypy
	$(VENV)/lint-imports
	$(VENV)/pytest -ra --durations=15

lint: bootstrap
	$(VENV)/ruff check $(LINT_PATHS) && $(VENV)/ruff format --check $(LINT_PATHS) && $(VENV)/mypy && $(VENV)/lint-imports

## mypy over npudure/ and workshop/ (configuration: [tool.mypy] in pyproject.toml; strict on the runtime, npudure/).
typecheck: bootstrap
	$(VENV)/mypy

## Regenerate requirements/controller.lock and fleet.lock (pinned, hashed) from pyproject.toml; then `make test` and commit.
lock: bootstrap
	@scripts/lock.sh

proto: bootstrap
	$(VENV)/python -m npudure.proto.generate

local: bootstrap
	$(VENV)/npudure local --boards $(BOARDS) --backend sim

lab-up: bootstrap
	$(VENV)/npudure lab up --boards $(BOARDS)

lab-down:
	$(VENV)/npudure lab down

bench-forwarding: bootstrap
	$(VENV)/python benchmarks/forwarding.py
