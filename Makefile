# Every target sets up its own virtual environment (.venv inside the repo): torch==2.13.0 first,
# so that no other requirement can pull a CUDA build, then ember. `make demo` installs ember alone
# (the demo needs no extra); every other target installs every extra and the dev tools on top.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.ember-demo-installed
STAMP := $(VENV)/.ember-installed
EXTRAS := dev,docs,metrics,plot,examples,tensorboard,mlflow-skinny,hf,cli,pandas,optuna,wandb,bench
# the Pythons the wheel is checked on (make package), as the classifiers in pyproject.toml say
PACKAGE_PYTHONS := 3.11 3.12 3.13
PACKAGE_CHECKS := $(PACKAGE_PYTHONS:%=package-%)
SITE := build/docs

.PHONY: demo venv test test-slow lint pytest docs package $(PACKAGE_CHECKS) bench bench-user clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

# the version is part of the installed metadata: a new one reinstalls
$(DEMO_STAMP): pyproject.toml src/ember/_version.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

venv: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/ember demo

lint: $(STAMP)
	$(BIN)/ruff format --check src tests benchmarks examples docs/conf.py docs/_ext
	$(BIN)/ruff check src tests benchmarks examples docs/conf.py docs/_ext
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

# the site, from docs/ (docs/conf.py): a warning fails it, an unresolved link or reference too
docs: $(STAMP)
	rm -rf $(SITE)
	$(BIN)/sphinx-build -W --keep-going -q -b html -d $(SITE)/doctrees docs $(SITE)/html
	@echo "the site: $(SITE)/html/index.html"

# ember installed as a user installs it, on each Python: the sdist and the wheel built from it,
# the wheel in a fresh virtual environment (torch==2.13.0 first), run from outside the checkout
package: $(PACKAGE_CHECKS)

$(PACKAGE_CHECKS): package-%: $(STAMP)
	python=$$(bash .ci/find-python $*) && bash .ci/wheel-check $(BIN)/python "$$python"

test: lint docs pytest package

# the properties that take minutes at full size (CI runs their smaller variants)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/dataloader.py
	$(BIN)/python benchmarks/learner_overhead.py

# issue 30's targets, each against its raw equivalent, in one run (~8 min; QUICK=1: ~4 min)
bench-user: $(STAMP)
	$(BIN)/python benchmarks/user_loops.py $(if $(QUICK),--quick)

clean:
	rm -rf $(VENV) artifacts dist build
