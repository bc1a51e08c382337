# One task runner: `make demo`, `make test`, `make lint`, `make bench`, `make docs`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint fmt bench docs model clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py parsers/sglang/_linescan.c
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: venv
	@$(BIN)/python -m forensics.demo

test: venv
	$(BIN)/python -m pytest -n 3 --dist worksteal -q -rs

lint: venv
	$(BIN)/ruff check forensics parsers tests scripts
	$(BIN)/ruff format --check forensics parsers tests scripts
	$(BIN)/python scripts/gen_cli_docs.py --check

fmt: venv
	$(BIN)/ruff format forensics parsers tests scripts
	$(BIN)/ruff check --fix forensics parsers tests scripts

bench: venv
	$(BIN)/python scripts/bench_ingest.py --write-docs
	$(BIN)/python scripts/bench_client.py
	$(BIN)/python scripts/bench_store_scale.py

docs: venv
	$(BIN)/python scripts/gen_cli_docs.py

# retrain the packaged phase model after changing the corpus, classifier or signatures
model: venv
	$(BIN)/python scripts/train_packaged_model.py

clean:
	rm -rf $(VENV) .forensics build *.egg-info .pytest_cache
