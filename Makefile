# Every target sets up its own virtual environment (.venv inside the repo): torch==2.13.0 first,
# so that no other requirement can pull a CUDA build, then ember with the extras it needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ember-installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,metrics,plot,examples,tensorboard,mlflow-skinny,hf,pandas,optuna,wandb]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ember demo

lint: $(STAMP)
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/dataloader.py
	$(BIN)/python benchmarks/learner_overhead.py

clean:
	rm -rf $(VENV) artifacts
