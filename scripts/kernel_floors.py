"""Measure each kernel family's smallest GPU time from the kernel table; write ``lilou/latency/kernel_model/kernel_floor.json``.

A kernel's GPU time never goes below what the fastest kernel of its family took on any measured GPU with no launch
overhead in the timing (CUDA-graph replay, profiler kernel time): the device's own cost of starting a grid,
scheduling its blocks and retiring them. The kernel model learns GPU work as roofline x slowdown, which nothing
keeps above that floor for the smallest kernels (a 1024x768x768 FP16 GEMM, a batch-1 convolution on a B200: tens
of nanoseconds). With the default launch gap of tens of microseconds such a kernel hides behind its launch; with
``--launch-gap-us 0`` (CUDA-graph replay) nothing else sets its time.

Families the launch-free sources did not time at small sizes (convolutions, softmax, reductions, norms, copies)
take the smallest floor measured (1 us: Vidur's element-wise kernels, timed to the microsecond).

    python scripts/kernel_floors.py [--data-dir DIR] [--out lilou/latency/kernel_model/kernel_floor.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lilou.data.kernel_schema import TIMING_INCLUDES_LAUNCH, TIMING_METHODS
from lilou.data.kernel_table import kernel_table
from lilou.latency.kernel_model.kernel import FAMILIES

REPO = Path(__file__).resolve().parents[1]
#: The kernel table's families -> Lilou's (lilou/latency/kernel_model/kernel.py) where the launch-free rows reach
#: the smallest shapes (AIConfigurator's GEMMs from M = 1, Vidur's element-wise ops). Vidur's norms and embeddings
#: are an LLM's (hidden size 4,096 and up: 3 and 2 us), too large to bound a small model's layer norm or copy; they
#: are written down, and those families take the smallest floor of all. The table's attention and MoE rows are
#: whole fused modules, not one ONNX group's kernel.
TABLE_FAMILY = {"gemm": "gemm", "elementwise": "elementwise"}
MEASURED = (*TABLE_FAMILY, "norm", "embedding")


def measured_floors(data_dir: str | None) -> dict[str, dict]:
    """Per table family the smallest launch-free time measured, with where it was measured."""
    launch_free = sorted(set(TIMING_METHODS) - TIMING_INCLUDES_LAUNCH)
    timings = ", ".join(f"'{t}'" for t in launch_free)
    families = ", ".join(f"'{f}'" for f in MEASURED)
    rows = kernel_table(data_dir=data_dir).filter(f"timing IN ({timings}) AND family IN ({families})").aggregate(
        "family, min(latency_ms) AS floor_ms, arg_min(gpu, latency_ms) AS gpu, arg_min(source, latency_ms) AS source, "
        "arg_min(timing, latency_ms) AS timing, arg_min(dtype, latency_ms) AS dtype, count(*) AS rows").fetchall()
    return {family: {"floor_us": round(floor * 1000, 3), "gpu": gpu, "source": source, "timing": timing,
                     "dtype": dtype, "rows": n} for family, floor, gpu, source, timing, dtype, n in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="the datasets mirror (default: LILOU_DATA_DIR)")
    parser.add_argument("--out", type=Path, default=REPO / "lilou" / "latency" / "kernel_model" / "kernel_floor.json")
    args = parser.parse_args()
    measured = measured_floors(args.data_dir)
    smallest = min(measured[family]["floor_us"] for family in TABLE_FAMILY)
    floors = {}
    for family in FAMILIES:
        table = [name for name, ours in TABLE_FAMILY.items() if ours == family and name in measured]
        floors[family] = ({"floor_us": measured[table[0]]["floor_us"], "measured_as": table[0]} if table
                          else {"floor_us": smallest, "measured_as": None})
    document = {"about": "per kernel family, the smallest GPU time of a kernel, in microseconds: the fastest "
                         "launch-free measurement of the family on any GPU (scripts/kernel_floors.py); families "
                         "without one take the smallest of all",
                "floors": floors, "measurements": measured}
    args.out.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(json.dumps(floors, indent=1))


if __name__ == "__main__":
    main()
