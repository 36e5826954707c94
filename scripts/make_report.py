"""Regenerate docs/results.md and docs/results/*.png from the ablation scripts (``make report``).

Runs, in-process and in this order, scripts/plot_resources.py, ablate_kernels.py,
ablate_e2e.py and ablate_fusion.py (each with ``--quick`` under ``--quick``), each
writing outputs/results/<name>.{csv,png,json}; then copies the figures to
docs/results/ and writes docs/results.md: every table inline with the exact command,
seed and data it rests on, the benchmark summary of outputs/bench/*.json when present,
and the known limits. An ablation that fails is reported as such (the others still run)
and the exit status is 1.

    python scripts/make_report.py [--quick] [--only ablate_kernels,...] [--skip ...]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lilou.research.ablation import REPO, RESULTS, describe_provenance, markdown_table  # noqa: E402

SCRIPTS = REPO / "scripts"
DOCS = REPO / "docs"
FIGURES = DOCS / "results"
# name -> what the section shows
ABLATIONS = {
    "plot_resources": "Resources: predicted latency across MIG slices",
    "ablate_kernels": "Kernel latency: feature groups, model size, leave-one-GPU-out",
    "ablate_e2e": "End to end: oracle vs predicted vs no fusion",
    "ablate_fusion": "Fusion: GNN architecture, depth, features, rule baseline and the two replays",
}
NOTES = {
    "plot_resources": (
        "x: SMs (top) and DRAM bandwidth (bottom) of every MIG profile of the A100-80GB (SXM4) and H100-SXM plus "
        "the whole GPU; y: predicted end-to-end latency of the shipped checkpoints. `monotone_violations` counts, "
        "per row, the slices with no more SMs, bandwidth and L2 that are predicted faster: 0 everywhere means "
        "the predictions are monotone in resources. These are predictions, not measurements: no MIG latency "
        "was measured for this report."),
    "ablate_kernels": (
        "Each variant is `experiment=kernel_latency` with the overrides listed in the JSON beside the CSV, "
        "trained once per fold on four training GPUs and tested on every kernel row of the fifth (columns: the "
        "held-out GPU; the A100 fold holds out the 40GB and 80GB PCIe cards together). Pooled MAPE over all "
        "held-out rows; per-family rows are in the CSV. The roofline baseline (fitted floor + per-family "
        "efficiency) is fitted on the same rows. `data.max_rows` subsamples the training rows of each fold "
        "(`--max-rows`, spelled out in the command; default 80,000 of roughly 190-200k), for every variant: the "
        "`shipped config` row is the shipped recipe re-fitted on that subsample, not the shipped model that "
        "`make bench-kernels` scores. `mean MAPE` = mean over the held-out GPUs of each GPU's pooled MAPE; "
        "`mean median APE` = mean over the held-out GPUs of each GPU's median APE (a mean of medians, not a "
        "median)."),
    "ablate_e2e": (
        "The `lilou eval` pipeline once per kernel grouping: `oracle` = eager groups from the dynamo exporter's "
        "metadata, `predicted` = what `lilou infer` uses (the fusion GNN checkpoint when shipped, else the rule "
        "baseline; the `kernel groups` column says which ran), `none` = one kernel per ONNX node (view-only nodes "
        "still launch nothing). Everything else is identical between rows; in leave-one-GPU-out mode the "
        "overhead scale is refitted per fold and per grouping, in-sample (quick) "
        "the shipped overhead is used for all three. `model_*` = Lilou, `roofline_*` = the roofline baseline "
        "through the same pipeline."),
    "ablate_fusion": (
        "Each variant is `experiment=fusion_gnn_heldout` (the shipped recipe, one GNN for both backends, trained on "
        "the `train` split alone as `make bench-fusion` does) with the overrides listed in the JSON beside the CSV, "
        "scored per backend on the held-out test families. `edge acc` = accuracy on runtime edges, `F1` = F1 of "
        "fused edges, `exact` = share of "
        "graphs whose whole kernel grouping is right. Feature rows zero one node-feature group "
        "(`model.node_feature_mask`) or the edge column of one replay prior (`model.edge_feature_mask`) in "
        "training and at prediction. `TVM FuseOps replay alone` and `eager view replay alone` score each prior "
        "without any learning; variants train 8 epochs with the shipped seed, so they show direction, not the shipped "
        "model's figures."),
}
LIMITS = """\
* **What was measured.** End-to-end labels: NeuSight's eager FP32 forward passes of six transformer families on
  five GPUs (`neusight/e2e`, PyTorch 2.1, CUDA events; no CNN, no FP16/BF16 model). Per-kernel rows: the kernel
  table of five public sources (NeuSight, DeepBench, AIConfigurator, Vidur, Liger-Kernel) on 23 GPUs from Maxwell
  to Blackwell in seven dtypes, each timed its own way (eager CUDA events, host-timer loops, CUDA-graph replay,
  profiler kernel time, `do_bench`; docs/kernel_table.md). LLM serving: ML.ENERGY and Argonne runs (docs/llm.md).
  No source measured TF32, TensorRT, `torch.compile` or TVM-compiled latency.
* **Two kernel models.** FP32 GEMMs, norms, softmax and elementwise kernels are priced by the model trained on
  NeuSight's rows alone (6 GPUs; its leave-one-GPU-out figures are the `kernels` rows above); GEMMs and
  convolutions in every other precision, and every FP32 convolution, by the model trained on the whole kernel
  table (`kernel_table` rows: leave-one-GPU-out per source, dtype and family, and leave-one-architecture-out).
  Rows measured on H100 and L4 GPUs are held back from both for evaluation (the H200 and GH200, on the same die, train them).
* **What limits the FP32 model** is measured by `make bench-kernels`: with two constants of the held-out
  machine fitted in hindsight (its launch offset and speed scale), elementwise, softmax and layer norm reach
  8-9 % leave-one-GPU-out, while GEMM and conv stay at 20-26 % (kernel choices differ by architecture, and the
  P4's large GEMMs slow more than the T4's as they run longer). Those rows in the summary above are diagnostics,
  not results.
* **Leave-one-GPU-out figures are the best configuration found on these folds.** Model and feature choices
  (feature groups, the low-power and duration terms, the launch-queue model, seeds) were judged on the same
  leave-one-GPU-out / leave-one-architecture-out folds whose figures are reported, so those figures are
  optimistically biased; no untouched final test exists apart from the held-back H100 and L4 rows. The
  `kernels` "A100 80GB" test rows are not an unseen chip: the A100 40GB PCIe (same GA100, SMs and clocks) is
  trained on.
* **Kinds nobody measured** (batch norms, pooling, reductions, copies, depthwise convolutions, cumulative sums ...)
  use the memory-bound fallback and are flagged extrapolated; TF32 kernels stand in on the FP16 tensor-core
  pipeline at the TF32 peak; every prediction names these in its warnings. The launch gap (30 us per kernel) is
  NeuSight's 2023 hosts'.
* **Fusion labels** come from oracles, not from profiling: eager groups from the dynamo exporter's node
  metadata; TVM groups from TVM 0.27 Relax `FuseOps` for `{"kind": "cuda", "arch": "sm_80"}` without
  compiling or running anything. TorchScript exports carry TVM labels only. The fusion dataset is zoo models
  with reduced depth/width (30 families) and a decomposition corpus; held-out families are never seen in training.
* **No TVM latency data**: the TVM backend's fusion is evaluated, its latency is not.
* Quick runs (`make report QUICK=1`) train on tiny subsets for one or two epochs: their numbers show that the
  pipeline runs and are **not** results.
"""


def load_main(name: str):
    spec = importlib.util.spec_from_file_location(f"_report_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def run_ablation(name: str, args: list[str]) -> tuple[bool, str, float]:
    """Run ``scripts/<name>.py args`` in-process with ``sys.argv`` as if it were run alone."""
    saved = sys.argv
    sys.argv = [f"scripts/{name}.py", *args]
    started = time.perf_counter()
    print(f"\n=== python scripts/{name}.py {' '.join(args)}", flush=True)
    try:
        code = load_main(name)(args)
        ok, error = code in (0, None), "" if code in (0, None) else f"exit status {code}"
    except Exception as exc:  # noqa: BLE001 - report the failure, run the other ablations
        traceback.print_exc()
        ok, error = False, f"{type(exc).__name__}: {exc}"
    finally:
        sys.argv = saved
    return ok, error, time.perf_counter() - started


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        # The report's own outputs (written before this stamp) do not count as uncommitted changes.
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!docs/results.md", ":!docs/results"],
                               cwd=REPO, capture_output=True, text=True).stdout
        return out + (" (working tree with uncommitted changes)" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bench_section() -> list[str]:
    folder = REPO / "outputs" / "bench"
    if not any(folder.glob("*.json")):
        return ["No benchmark outputs (`outputs/bench/*.json`) were present: run `make bench` and then "
                "`make report` to include them."]
    spec = importlib.util.spec_from_file_location("_report_bench_summary", SCRIPTS / "bench_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows, missing = module.summary(folder)
    lines = ["Headline figures of `make bench` as found in `outputs/bench/*.json` (written by the benchmark "
             "scripts, not regenerated by `make report`; summarised by `python scripts/bench_summary.py`). "
             "Each benchmark's figures come from its own run:", ""]
    lines += [f"- `{name}`: {describe_provenance(found)}" for name, found in module.provenance(folder).items()]
    lines.append("")
    for row in rows:
        for key in ("value", "baseline"):
            if isinstance(row.get(key), float):
                row[key] = round(row[key], 3) if abs(row[key]) < 2 else round(row[key], 1)
    lines.append(markdown_table(rows, ["bench", "metric", "value", "baseline", "unit", "target", "status"], 3))
    if missing:
        lines += ["", f"Not run: {', '.join(missing)}."]
    return lines


def section(name: str, status: dict) -> list[str]:
    lines = [f"## {ABLATIONS[name]}", ""]
    meta_path = RESULTS / f"{name}.json"
    if not status.get("ok"):
        lines += [f"**Not regenerated**: `python scripts/{name}.py{' --quick' if status.get('quick') else ''}` "
                  f"failed ({status.get('error', 'not run')}).", ""]
        return lines
    meta = json.loads(meta_path.read_text())
    table = meta["table"]
    lines += [f"Command: `{meta['command']}`  ",
              f"Run: {describe_provenance(meta.get('provenance'))}  ",
              f"Seed: {meta['seed'] if meta['seed'] is not None else 'n/a (no training)'}; wall time "
              f"{meta['wall_s']:.0f} s{'; **QUICK run, not for citing**' if meta['quick'] else ''}  ",
              f"Data: {meta['data']}", "",
              markdown_table(table["rows"], table["columns"], table.get("digits", 1)), "",
              NOTES[name], ""]
    png = RESULTS / f"{name}.png"
    if png.exists():
        lines += [f"![{ABLATIONS[name]}](results/{name}.png)", ""]
    lines += [f"Full table: `outputs/results/{name}.csv`; provenance: `outputs/results/{name}.json`.", ""]
    return lines


def write_report(statuses: dict[str, dict], quick: bool, wall_s: float) -> Path:
    FIGURES.mkdir(parents=True, exist_ok=True)
    for name, status in statuses.items():
        png = RESULTS / f"{name}.png"
        if status.get("ok") and png.exists():
            shutil.copyfile(png, FIGURES / png.name)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    reused = [name for name, status in statuses.items() if "seconds" not in status]
    lines = ["# Lilou results", "",
             f"Generated by `make report{' QUICK=1' if quick else ''}` (`python scripts/make_report.py"
             f"{' --quick' if quick else ''}`) on {now}, commit {git_commit()}, in {wall_s / 60:.1f} min on "
             "a CPU. Do not edit by hand: rerun `make report`. The report's commit is not the figures' commit: each "
             "section below names the commit and date of the run that produced it.", ""]
    if reused:
        lines += [f"Sections taken from an earlier run's outputs (`--only`): {', '.join(reused)}; each shows its "
                  "own wall time and seed.", ""]
    if quick:
        lines += ["> **QUICK report**: every model below was trained on a tiny subset for one or two epochs. "
                  "The tables show that the pipeline runs end to end; their numbers are not results. Run "
                  "`make report` (no `QUICK`) for the real figures.", ""]
    lines += ["Each section names the exact command that produced its table (run it alone to regenerate that "
              "table), its seed and the data it rests on. Seeds are fixed (`seed=0` unless stated); on a CPU "
              "two runs of the same command give the same numbers to the printed precision "
              "(`tests/test_ablation.py` checks this for the kernel model).", "",
              "## Contents", ""]
    lines += [f"- [{title}](#{title.lower().replace(' ', '-').replace(':', '').replace(',', '').replace('.', '')})"
              for title in ABLATIONS.values()]
    lines += ["- [Benchmarks](#benchmarks)", "- [Data and known limits](#data-and-known-limits)", ""]
    for name, status in statuses.items():
        lines += section(name, status)
    lines += ["## Benchmarks", "", *bench_section(), "", "## Data and known limits", "", LIMITS]
    path = DOCS / "results.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny configs everywhere (minutes; not for citing)")
    parser.add_argument("--only", default=None, help="comma-separated ablations to rerun (others: last outputs)")
    parser.add_argument("--skip", default="", help="comma-separated ablations to leave out")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    wanted = args.only.split(",") if args.only else list(ABLATIONS)
    skipped = set(filter(None, args.skip.split(",")))
    unknown = (set(wanted) | skipped) - set(ABLATIONS)
    if unknown:
        parser.error(f"unknown ablation(s) {', '.join(sorted(unknown))}; known: {', '.join(ABLATIONS)}")
    statuses: dict[str, dict] = {}
    for name in ABLATIONS:
        if name in skipped:
            continue
        if name in wanted:
            ok, error, seconds = run_ablation(name, ["--quick"] if args.quick else [])
            statuses[name] = {"ok": ok, "error": error, "seconds": seconds, "quick": args.quick}
        else:  # reuse the last outputs
            meta = RESULTS / f"{name}.json"
            statuses[name] = {"ok": meta.exists(), "error": "no earlier output", "quick": args.quick}
    path = write_report(statuses, args.quick, time.perf_counter() - started)
    print(f"\nwrote {path.relative_to(REPO)} and {FIGURES.relative_to(REPO)}/*.png in "
          f"{(time.perf_counter() - started) / 60:.1f} min")
    for name, status in statuses.items():
        took = f" ({status['seconds']:.0f} s)" if "seconds" in status else ""
        print(f"  {name}: {'ok' if status['ok'] else 'FAILED: ' + status['error']}{took}")
    return 0 if all(s["ok"] for s in statuses.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
