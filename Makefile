# HAL — the two commands a newcomer needs are `make up` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP   := $(VENV)/.installed-dev
UP_ARGS ?=
TEST_ARGS ?=
# pytest-xdist workers: most live tests wait on processes, so more workers than cores pay
# (on 2 cores: 6 workers 10.3 min, 4 workers 12.3 min for the whole suite)
TEST_WORKERS ?= 6
PYTEST  := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
# the site's build; the two variables silence the banners of mkdocs' plugins (no --quiet:
# it hides the warnings that --strict turns into a failure)
MKDOCS  := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict

# Prism, the mock server of Lambda Cloud's API contract the Lambda provider's tests run
# (tools/prism/package.json pins it; npm ci installs exactly the lock file's tree)
PRISM   := tools/prism/node_modules/.bin/prism

.PHONY: up test test-fast check docs bench venv clean lint type imports fmt prism

# `make up` installs HAL alone; `make test`/`check` add the test tools and workflow tools.
$(RUN_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "HAL needs Python 3.11 or newer")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[dev,workflows]'
	@touch $(STAMP)

venv: $(STAMP)

$(PRISM): tools/prism/package.json tools/prism/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix tools/prism --no-audit --no-fund --ignore-scripts --loglevel=error \
	  && touch $(PRISM); \
	else echo "npm is not installed: the Lambda provider's tests will be skipped"; fi

## Prism for the Lambda provider's tests (needs npm; the tests skip without it)
prism: $(PRISM)

## Start a local cluster: control plane + 2 agents + SQLite under ~/.local/share/hal
up: $(RUN_STAMP)
	$(VENV)/bin/hal up $(UP_ARGS)

## Run the test suite in parallel (slow tests too when CI=true or HAL_SLOW=1)
test: $(STAMP) prism
	$(PYTEST) $(TEST_ARGS)

## The inner loop: unit and property tests that start no server and replay no trace
test-fast: $(STAMP)
	$(PYTEST) -m "not live and not slow and not replay" tests/unit tests/property $(TEST_ARGS)

## Lint, format check, strict typing, import layers and the documentation site
check: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MKDOCS)

## The documentation site in site/ (its reference pages written from the code)
docs: $(STAMP)
	$(MKDOCS)

fmt: $(STAMP)
	$(VENV)/bin/ruff format src tests bench scripts
	$(VENV)/bin/ruff check --fix src tests bench scripts

## Benchmarks: JSON results under bench/results/
bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache tools/prism/node_modules
