# fairseq_sparse_attn — see README.md
PYTHON ?= python3
MULTI30K_DIR ?= $(wildcard ../shared/data/multi30k)
DEMO_DIR ?= demo_out
export MULTI30K_DIR

.PHONY: install test test-fast demo bench clean

install:            ## torch (kept if present), fairseq, deps, the plugin with extras
	PYTHON=$(PYTHON) bash scripts/install.sh

test:               ## the whole test suite (unit + small real end-to-end runs)
	$(PYTHON) -m pytest -q tests

test-fast:          ## unit tests only (no training runs)
	$(PYTHON) -m pytest -q tests --ignore=tests/test_end_to_end.py --ignore=tests/test_analysis_cli.py --ignore=tests/test_distributed.py --ignore=tests/test_repro_scripts.py --ignore-glob='*_e2e.py'

demo:               ## softmax vs ReLA-g on Multi30k, CPU, <= 15 min
	$(PYTHON) scripts/demo.py --out $(DEMO_DIR)

bench:              ## speed ratios against softmax (JSON + table)
	$(PYTHON) benchmarks/bench_attention.py --json bench_attention.json

clean:
	rm -rf $(DEMO_DIR) bench_attention.json .pytest_cache
