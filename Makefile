# fairseq_sparse_attn — see README.md
PYTHON ?= python3
MULTI30K_DIR ?= $(wildcard ../shared/data/multi30k)
DEMO_DIR ?= demo_out
DEMO_RECIPE ?= auto
export MULTI30K_DIR

.PHONY: install test test-fast demo demo-sweep bench clean check-readme publish-demo

install:            ## torch (kept if present), fairseq, deps, the plugin with extras
	PYTHON=$(PYTHON) bash scripts/install.sh

TEST_WORKERS ?= 2
test:               ## the whole test suite: tests/unit + tests/integration (small real runs), TEST_WORKERS processes
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30 tests/unit tests/integration

test-fast:          ## tests/unit only: no training, no subprocess (minutes)
	$(PYTHON) -m pytest -q tests/unit

demo:               ## softmax vs ReLA-g on Multi30k, the recipe that fits the machine (DEMO_RECIPE=auto|cpu|cuda; cuda ~10 min on one H100, cpu ~15 min on 2 cores): BLEU, 95% CI, p-values, curves
	$(PYTHON) scripts/demo.py --out $(DEMO_DIR) --recipe $(DEMO_RECIPE)

check-readme:       ## the README's demo tables agree with docs/results/demo-{cpu,cuda}.json (no training; CI)
	$(PYTHON) scripts/check_readme.py --check

publish-demo:       ## $(DEMO_DIR)/results.json -> docs/results/demo-<recipe>.json, then the README's table from it
	$(PYTHON) scripts/check_readme.py --publish $(DEMO_DIR)/results.json

demo-sweep:         ## the learning-rate sweep on the validation set that fixes the demo's rates (docs/demo.md)
	$(PYTHON) scripts/demo.py --out $(DEMO_DIR)/sweep --sweep --recipe $(DEMO_RECIPE)

BENCH_ARGS ?=
bench:              ## speed ratios against softmax, the recipe for claims (CPU ~20 min on 2 cores; JSON + table); BENCH_ARGS="--quick" for a smoke run
	$(PYTHON) benchmarks/bench_attention.py --claims --json bench_attention.json $(BENCH_ARGS)

clean:
	rm -rf $(DEMO_DIR) bench_attention.json .pytest_cache
