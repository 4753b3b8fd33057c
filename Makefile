# Every target sets up what it needs: Debian packages, the virtualenv, the project.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := bubblewrap debootstrap postgresql iproute2 jq gcc libc6-dev chromium qemu-system-x86 python3-venv
# Debian's own Python: built with profile-guided and link-time optimisation, as the Docker image's
# python:3.11-slim is. A self-built one (pyenv's default build, first on PATH on some machines) ran the
# api and the node ~20% slower (docs/performance.md, "The interpreter").
PYTHON ?= /usr/bin/python3
STAMP := $(VENV)/.installed-with$(subst /,_,$(PYTHON))

TS_SDK := sdk/typescript

PACKAGES := activities api bench cli egress engine http1 node packs sdk/python/b3os telemetry tests

.PHONY: run test setup deb bytecode lint typecheck bench clean typescript sdk-types

run: setup bytecode
	$(BIN)/b3os demo

# mypy runs beside the tests (its ~18 s on one core while pytest starts its workers); its report is
# printed after theirs, and either failing fails the target.
test: setup bytecode typescript
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
# The stamp names the interpreter: a virtualenv made from another one than $(PYTHON) is made again.
$(STAMP): pyproject.toml sdk/python/pyproject.toml
	@base="$$($(PYTHON) -c 'import sys; print(sys.base_prefix)')"; \
	if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; print(sys.base_prefix)')" != "$$base" ]; then \
	  echo "$(VENV) was made from another Python than $(PYTHON): making it again"; rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./sdk/python -e '.[dev]'
	touch $(STAMP)

# The TypeScript SDK (@b3os/sdk): its dev dependencies installed from package-lock.json when they are
# stale, built with tsc, and its own tests (node --test against a local HTTP server); pytest then runs it
# against the real stack (tests/sdk/test_sdk_typescript.py). node and npm come with the nodejs package.
typescript: $(TS_SDK)/node_modules/.package-lock.json
	cd $(TS_SDK) && npm run --silent build && npm test --silent

$(TS_SDK)/node_modules/.package-lock.json: $(TS_SDK)/package-lock.json $(TS_SDK)/package.json
	cd $(TS_SDK) && npm ci --no-audit --no-fund

# The SDK's types from the api: openapi.json written from the app, src/schema.ts generated from it
# (tests/sdk/test_sdk_typescript.py fails while the committed ones differ from what the server makes).
sdk-types: setup $(TS_SDK)/node_modules/.package-lock.json
	$(BIN)/python -m tests.sdk.typescript_sdk $(TS_SDK)/openapi.json
	cd $(TS_SDK) && npm run --silent generate

lint: setup $(TS_SDK)/node_modules/.package-lock.json
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd $(TS_SDK) && npm run --silent lint

typecheck: setup
	$(BIN)/mypy .

bench: setup
	$(BIN)/python -m bench goals
	$(BIN)/python -m bench growth

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(TS_SDK)/node_modules $(TS_SDK)/dist
