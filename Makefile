# Lilou developer targets. `make demo` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
LILOU  := $(VENV)/bin/lilou
STAMP  := $(VENV)/.installed
# Real measurements: a local mirror (CI passes ../shared/datasets) or `lilou data fetch`.
export LILOU_DATA_DIR ?= $(firstword $(wildcard ../shared/datasets) datasets)

.PHONY: install lint test demo bench bench-data bench-kernel-table bench-conv-geometry bench-graph bench-kernels bench-fusion bench-e2e bench-speed bench-summary train-kernels fusion-data train-fusion fit-e2e fuzz clean bench-intervals calibrate calibrate-llm bench-serve bench-llm kernel-floors

install: $(STAMP)

# torch first, pinned: the local CPU wheel. An unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check lilou scripts tests

# pytest exits 5 when it collects no test: make treats that as a failure too.
test: install lint
	$(PY) -m pytest -q

# Predictions on the shipped example: a whole A10G, then a 1g.10gb MIG slice of an A100-SXM4-80GB
# with the breakdown plot (outputs/ is git-ignored).
demo: install
	$(LILOU) graph examples/resnet18.onnx
	$(LILOU) gpus
	$(LILOU) infer examples/resnet18.onnx --gpu a10g
	mkdir -p outputs/demo
	$(LILOU) infer examples/resnet18.onnx --gpu a100-sxm4-80gb --mig 1g.10gb --plot outputs/demo/resnet18-a100-sxm4-80gb-1g.10gb.png

# Hostile-input fuzzer: random ONNX graphs and mutants of real files through `lilou graph|fuse|infer`;
# fails on any traceback, hang (> 30 s) or memory failure (> 1 GiB RSS). Failing cases: outputs/fuzz/.
FUZZ_N ?= 2000
fuzz: install
	$(PY) scripts/fuzz.py --cases $(FUZZ_N) --zoo distilbert-base --file tests/data/ort/bert-mha.onnx \
		--file tests/data/ort/cnn-ort-session.onnx --file tests/data/diffusion/unet-ort.onnx --out outputs/fuzz

# Every benchmark, then one summary table of outputs/bench/*.json.
bench: bench-data bench-graph bench-kernels bench-fusion bench-e2e bench-speed
	$(PY) scripts/bench_summary.py

bench-summary: install
	$(PY) scripts/bench_summary.py

# The kernel-measurement table: rows per source/GPU/dtype/family, rows left out and why, build and
# query time and peak memory (a cold build into a fresh cache folder).
bench-data: install
	$(PY) scripts/bench_data.py

bench-graph: install
	$(PY) scripts/bench_graph.py

# Leave-one-GPU-out and unseen-GPU test rows on the NeuSight measurements.
bench-kernels: install
	$(PY) scripts/bench_kernels.py

# The kernel model trained on the whole kernel table (experiment=kernel_table), one fold model per
# architecture and per GPU with >= 500 rows of a family (about 5 min on 2 cores; not shipped yet).
bench-kernel-table: install
	$(PY) scripts/bench_kernel_table.py

# FP32 convolutions by geometry (DeepBench's 1x1, strided, 5x5, 7x7 beside NeuSight's 3x3), leave-one-architecture-out,
# for the config that prices them (the tensor-core model's) and the NeuSight-only FP32 model (about 7 min on 2 cores).
bench-conv-geometry: install
	$(PY) scripts/bench_conv_geometry.py --experiment kernel_latency_tensor
	$(PY) scripts/bench_conv_geometry.py --experiment kernel_latency

# Fusion GNN vs the rule baseline and the replays on the held-out splits: leave-family-out, leave-op-out
# and leave-exporter-setting-out, eager and TVM, with the misses by pattern (needs `make fusion-data`).
# Scores the held-out protocol model (trained on the `train` split alone; trained here when missing), not the
# shipped one, which also learns from the held-out splits.
bench-fusion: install
	test -f outputs/fusion_heldout/model.safetensors || $(PY) -m lilou.train experiment=fusion_gnn_heldout
	$(PY) scripts/bench_fusion.py --checkpoint outputs/fusion_heldout

# `lilou eval` leave-one-GPU-out on the NeuSight eager end-to-end labels, with the roofline baseline; MAPE pooled over
# labels and the mean of per-GPU MAPEs (fold checkpoints cached in outputs/logo, models exported into
# datasets/e2e_models; the first run exports 7 models, ~4 min, and trains five folds, 50-76 s each on 2 cores).
bench-e2e: install
	$(PY) scripts/bench_e2e.py

# LLM serving (lilou llm) against ML.ENERGY / Argonne measurements: leave-one-GPU-out, leave-one-LLM-out, H100 held
# back; writes outputs/bench/llm.json only (docs/llm.md).
bench-llm: install
	$(PY) scripts/bench_llm.py

# The shipped LLM constants lilou/llm/calibration.json and attention.json, refitted by the same script (no CLI timing).
# Each kernel family's smallest GPU time, from the kernel table's launch-free rows (lilou/latency/kernel_model/kernel_floor.json).
kernel-floors: install
	$(PY) scripts/kernel_floors.py

calibrate-llm: install
	$(PY) scripts/bench_llm.py --quick --write-shipped

# Wall clock of `lilou infer` / `lilou rank` in a fresh process, median of repeats.
bench-speed: install
	$(PY) scripts/bench_speed.py

# `lilou serve` on loopback: 200 requests at concurrency 16 over 3 models x 4 GPUs (errors, p50/p99, req/s),
# cold vs warm against an in-process Predictor.predict, with and without the graph cache, and RSS over
# 2,000 requests -> outputs/bench/serve.json (about 10 min on 2 cores).
bench-serve: install
	$(PY) scripts/bench_serve.py

# 90 % interval coverage, leave-one-GPU-out nested, per family and end to end, and `lilou plan` (every
# device x 8 batches) vs one `lilou infer` in a fresh process -> outputs/bench/intervals.json.
bench-intervals: install
	$(PY) scripts/bench_intervals.py --table

# The shipped interval calibration lilou/plan/calibration.json: held-out residuals of the fold checkpoints
# (outputs/logo, trained when missing), the kernel table and `lilou eval` leave-one-GPU-out (docs/intervals.md).
calibrate: install
	$(PY) -m lilou.plan.fit

# Zoo graphs and the decomposition corpus (lilou/zoo/decomp.py, each op under 8 exporter settings), labelled
# by the eager and TVM oracles, into datasets/fusion (resumable, not committed; FUSION_DATA_ARGS="--splits
# test,test-op,test-exporter" builds only what bench-fusion scores).
fusion-data: install
	$(PY) scripts/build_fusion_data.py --out datasets/fusion $(FUSION_DATA_ARGS)

# The shipped fusion GNN and tuned rule tables: checkpoints/fusion_gnn, checkpoints/fusion_rules
# (config conf/experiment/fusion_gnn.yaml). Replacing a shipped folder is explicit: `python -m lilou.train
# experiment=fusion_gnn` alone writes only its run folder.
train-fusion: install
	$(PY) -m lilou.train experiment=fusion_gnn output_checkpoint=checkpoints/fusion_gnn
	$(PY) scripts/tune_fusion_rules.py --data datasets/fusion --out checkpoints/fusion_rules

# The shipped per-kernel models: checkpoints/kernel_latency (FP32, NeuSight; conf/experiment/kernel_latency.yaml)
# and checkpoints/kernel_latency_tensor (every other unit, the whole kernel table; kernel_latency_tensor.yaml,
# about 3 min on 2 cores) with its measured coverage (coverage.json). Replacing the shipped folders is explicit
# (output_checkpoint=...): the experiments alone write only their run folders. Then the fitted parameters, written
# into the package (not beside the checkpoints; --out writes elsewhere): recurrent layers
# (lilou/latency/kernel_model/recurrent.json) and the backward-data / forward ratios of transposed convolutions
# (lilou/latency/kernel_model/transposed_conv.json).
train-kernels: install
	$(PY) -m lilou.train experiment=kernel_latency output_checkpoint=checkpoints/kernel_latency
	$(PY) -m lilou.train experiment=kernel_latency_tensor output_checkpoint=checkpoints/kernel_latency_tensor
	$(PY) scripts/kernel_coverage.py --out checkpoints/kernel_latency_tensor
	$(PY) scripts/fit_recurrent.py
	$(PY) scripts/fit_transposed_conv.py

# End-to-end side: memory-bound fallback and launch/gap overhead fitted on the real NeuSight
# rows and eager end-to-end labels of the training GPUs -> checkpoints/e2e_overhead. Exports the
# labelled models once into datasets/e2e_models (git-ignored; ~5 min the first time, ~1.5 min after).
fit-e2e: install
	$(PY) -m lilou.latency.composition.calibrate

# Ablation tables and figures -> outputs/results/, then docs/results.md and docs/results/*.png
# (scripts/make_report.py; 25 min on 2 cores). `make report QUICK=1`: tiny configs, minutes, not for citing.
.PHONY: report
# The full report builds the fusion dataset first when it is missing (resumable; 15 min on 2 cores):
# 41 min in all from a clean clone, venv included.
report: install
	$(if $(QUICK),,$(PY) scripts/build_fusion_data.py --out datasets/fusion)
	$(PY) scripts/make_report.py $(if $(QUICK),--quick,)

clean:
	rm -rf $(VENV) .pytest_cache
