"""Benchmark the speed of `lilou infer` and `lilou rank`: wall clock in a fresh process.

Each case runs REPEATS times, every time in a new Python process (imports and
checkpoint loading included, as a user sees it), and the median wall time and
median peak RSS are reported:

- `lilou infer` on BERT-large (NeuSight `bert_large`), seq 512, batch 8, on an A100 80GB;
- `lilou infer` on ResNet-50, batch 1, on an A10G;
- `lilou rank` on ResNet-50, batch 1, over every GPU and MIG slice of the database;
- `lilou llm` (Llama-3.1-8B, batch 8, 512 + 128 tokens, A100-SXM4-80GB);
- the floor any ONNX tool pays: `onnx.load` + `onnx.shape_inference.infer_shapes` of the BERT-large file.

Targets (kernel-model and LLM issues): infer BERT-large <= 1.5x the floor, rank <= 1.2x one infer of the same
model, llm < 1 s; the ratios are printed and written with the cases. The floor runs are interleaved with the
BERT-large infer runs (one floor run after each), so that both see the same load on a shared machine.

Lilou's modules are byte-compiled first, as a pip install does: with PYTHONDONTWRITEBYTECODE set (as on
this project's machines) every fresh process would otherwise compile about 70 modules again (0.1 s). In that
environment the bytecode is removed again at the end, so the source tree stays as it was.

The models are exported weight-free once (BERT-large shares `datasets/e2e_models`
with `make fit-e2e` and `lilou eval`; ResNet-50 goes to `datasets/bench_models`).
Writes outputs/bench/speed.json.

    python scripts/bench_speed.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fresh_process import byte_compiled, run_lilou
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"
MODELS_DIR = REPO / "datasets" / "bench_models"
E2E_MODELS = REPO / "datasets" / "e2e_models"


def bert_large() -> Path:
    """NeuSight bert_large at seq 512, dynamic batch (the cache of `make fit-e2e`)."""
    path = E2E_MODELS / "bert_large-512.onnx"
    if not path.exists():
        E2E_MODELS.mkdir(parents=True, exist_ok=True)
        # The same command as lilou.latency.composition.calibrate.export_models, so the cache is shared.
        subprocess.run([sys.executable, "-m", "lilou.cli", "zoo", "export", "bert_large", "--seq", "512", "--batch",
                        "8", "--dynamic-batch", "--strip-weights", "-o", str(path)], check=True)
    return path


def resnet50() -> Path:
    path = MODELS_DIR / "resnet50-batch1.onnx"
    if not path.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        from lilou.zoo.export import export_onnx

        export_onnx("resnet50", path, batch=1, strip_weights=True)
    return path


def cases() -> list[tuple[str, list[str]]]:
    bert, resnet = str(bert_large().relative_to(REPO)), str(resnet50().relative_to(REPO))
    return [
        ("infer BERT-large seq 512 batch 8 (a100-80gb)",
         ["infer", bert, "--gpu", "a100-80gb", "--batch", "8", "--format", "json"]),
        ("infer ResNet-50 batch 1 (a10g)", ["infer", resnet, "--gpu", "a10g", "--format", "json"]),
        ("rank ResNet-50 batch 1 (all devices)", ["rank", resnet, "--format", "json"]),
        ("llm Llama-3.1-8B batch 8, 512+128 tokens (a100-sxm4-80gb)",
         ["llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "a100-sxm4-80gb", "--batch", "8", "--input-len", "512",
          "--output-len", "128", "--format", "json"]),
    ]


_FLOOR = "import sys, onnx; onnx.shape_inference.infer_shapes(onnx.load(sys.argv[1], load_external_data=False))"


def floor_s(path: Path, repeats: int) -> float:
    """Median wall seconds of onnx.load + infer_shapes of ``path`` in a fresh process (the file cache is warm:
    the infer runs read the same file)."""
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _FLOOR, str(path)], check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per case (default 5)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give at least 1")
    with byte_compiled(REPO / "lilou"):
        measure(args.repeats)


def measure(repeats: int) -> None:
    """Run every case ``repeats`` times, print the table and the ratios, write outputs/bench/speed.json."""
    results, floors = [], []
    for name, argv in cases():
        run_lilou(argv)  # warm the file cache; not counted
        walls, peaks = [], []
        for _ in range(repeats):
            wall, peak, output = run_lilou(argv)
            walls.append(wall)
            peaks.append(peak)
            if name.startswith("infer BERT-large"):
                floors.append(floor_s(bert_large(), 1))
        if isinstance(output, dict) and "itl_ms" in output:
            detail = f"ITL {output['itl_ms']:.2f} ms, TTFT {output['ttft_ms']:.1f} ms"
        elif isinstance(output, dict):
            detail = f"{output['latency_ms']:.2f} ms predicted, {len(output['kernels'])} kernels"
        else:
            detail = (f"{len(output)} devices, fastest {output[0]['gpu']}"
                      f"{'/' + output[0]['mig'] if output[0]['mig'] else ''}")
        results.append({"case": name, "command": "lilou " + " ".join(argv), "repeats": repeats,
                        "median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls),
                        "median_peak_rss_mib": statistics.median(peaks), "detail": detail})
        print(f"{name}: median {statistics.median(walls):.2f} s", flush=True)
    table = Table(title=f"lilou speed: wall clock of a fresh process, median of {repeats}")
    for column in ("case", "median s", "min s", "max s", "peak RSS MiB", "result"):
        table.add_column(column, justify="left" if column in ("case", "result") else "right")
    for r in results:
        table.add_row(r["case"], f"{r['median_s']:.2f}", f"{r['min_s']:.2f}", f"{r['max_s']:.2f}",
                      f"{r['median_peak_rss_mib']:.0f}", r["detail"])
    Console(width=200).print(table)
    median = {r["case"].split(" (")[0]: r["median_s"] for r in results}
    floor = statistics.median(floors)
    ratios = {"infer BERT-large / onnx load + infer_shapes (target <= 1.5)":
              median["infer BERT-large seq 512 batch 8"] / floor,
              "rank ResNet-50 all devices / infer ResNet-50 (target <= 1.2)":
              median["rank ResNet-50 batch 1"] / median["infer ResNet-50 batch 1"]}
    print(f"floor (onnx.load + infer_shapes, BERT-large): median {floor:.2f} s")
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "speed.json").write_text(json.dumps({"cases": results, "floor_s": floor, "ratios": ratios,
                                                "python": sys.version.split()[0]}, indent=2) + "\n")
    from lilou.research.ablation import write_provenance

    write_provenance(OUT / "speed.json")


if __name__ == "__main__":
    main()
