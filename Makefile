# Every target sets up what it needs: Debian packages, the virtualenv, the project.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEB_PACKAGES := bubblewrap debootstrap postgresql iproute2 jq gcc libc6-dev chromium
PYTHON ?= python3

PACKAGES := activities api bench cli egress engine http1 node packs sdk/python/b3os telemetry tests

.PHONY: run test setup deb bytecode lint typecheck bench clean

run: setup bytecode
	$(BIN)/b3os demo

# mypy runs beside the tests (its ~18 s on one core while pytest starts its workers); its report is
# printed after theirs, and either failing fails the target.
test: setup bytecode
	$(BIN)/ruff check .
	@$(BIN)/mypy . > $(VENV)/mypy.log 2>&1 & typing=$$!; \
	$(BIN)/pytest -n 4 --dist loadgroup --no-loadscope-reorder; tests=$$?; \
	wait $$typing; typed=$$?; echo "mypy: $$(tail -1 $(VENV)/mypy.log)"; \
	if [ $$typed -ne 0 ]; then cat $(VENV)/mypy.log; fi; \
	[ $$tests -ne 0 ] && exit $$tests; exit $$typed

setup: deb $(STAMP)

# The project's modules compiled once: where PYTHONDONTWRITEBYTECODE is set (as in many images) every
# process would otherwise compile each module it imports from source again (the api ~0.5 s of CPU).
bytecode: setup
	@$(BIN)/python -m compileall -q -j 0 $(PACKAGES) >/dev/null

deb:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# One pip command: the platform (b3os-platform) depends on the SDK (b3os), which only sdk/python provides.
$(STAMP): pyproject.toml sdk/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./sdk/python -e '.[dev]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy .

bench: setup
	$(BIN)/python -m bench goals

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
