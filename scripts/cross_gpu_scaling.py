"""How the same measured kernels scale between two GPUs, against the bandwidth, SM-throughput and FP32-peak ratios,
and which share of the spec peak each GPU's large GEMMs reach (docs/kernel_model.md, "Session 25"). Measurements
only: no model is involved.

    python scripts/cross_gpu_scaling.py [--source vidur] [--gpus a100-sxm4-80gb,a40] [--families elementwise,norm]
        [--min-ms 0.05] [--peak-shares aiconfigurator:bf16:bf16_tensor,aiconfigurator:fp8:fp8_tensor]
        [--out outputs/bench/cross_gpu_scaling.json]
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lilou.latency.evaluation.cross_gpu import op_scalings, paired_times, peak_shares, spec_ratios, table_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="vidur")
    parser.add_argument("--gpus", default="a100-sxm4-80gb,a40", help="A,B: ratios are time on B / time on A")
    parser.add_argument("--families", default="elementwise,norm")
    parser.add_argument("--min-ms", type=float, default=0.05, help="pairs whose time on A is shorter are left out")
    parser.add_argument("--peak-shares", default="aiconfigurator:bf16:bf16_tensor,aiconfigurator:fp8:fp8_tensor",
                        help="SOURCE:DTYPE:UNIT,...: large GEMMs' share of the unit's spec peak per GPU ('' for none)")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/cross_gpu_scaling.json"))
    args = parser.parse_args()
    gpu_a, gpu_b = args.gpus.split(",")
    families = tuple(args.families.split(","))
    pairs = paired_times(table_rows(args.source, gpu_a, families), table_rows(args.source, gpu_b, families))
    scalings = op_scalings(pairs, min_ms=args.min_ms)
    specs = spec_ratios(gpu_a, gpu_b)
    table = Table(title=f"{args.source}: time on {gpu_b} / time on {gpu_a}, same op and shape (>= {args.min_ms} ms on "
                        f"{gpu_a}); spec ratios: bandwidth {specs['bandwidth']:.2f}, SM x clock "
                        f"{specs['sm_throughput']:.2f}, FP32 peak {specs['fp32_peak']:.2f}")
    for column in ("op", "family", "pairs", "median", "10 %", "90 %"):
        table.add_column(column, justify="left" if column in ("op", "family") else "right")
    for s in scalings:
        table.add_row(s.op, s.family, str(s.pairs), f"{s.median_ratio:.2f}", f"{s.q10:.2f}", f"{s.q90:.2f}")
    Console(width=160).print(table)
    shares = {}
    for spec in filter(None, args.peak_shares.split(",")):
        source, dtype, unit = spec.split(":")
        shares[spec] = rows = peak_shares(source, dtype, unit)
        table = Table(title=f"{source} {dtype} GEMMs with M, N, K >= 4096: share of the {unit} spec peak, and MAPE "
                            f"of pricing each GPU at the other GPUs' mean share (leave-one-GPU-out, no model)")
        for column in ("gpu", "rows", "median share", "others' mean", "MAPE %"):
            table.add_column(column, justify="left" if column == "gpu" else "right")
        for r in rows:
            table.add_row(r.gpu, str(r.rows), f"{r.median_share:.3f}", f"{r.others_mean_share:.3f}",
                          f"{r.mape_at_others_share:.1f}")
        if rows:
            mean = sum(r.mape_at_others_share for r in rows) / len(rows)
            table.add_row("mean over GPUs", "", "", "", f"{mean:.1f}")
        Console(width=160).print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"source": args.source, "gpu_a": gpu_a, "gpu_b": gpu_b, "min_ms": args.min_ms,
                                    "spec_ratios": specs, "ops": [asdict(s) for s in scalings],
                                    "peak_shares": {k: [asdict(r) for r in v] for k, v in shares.items()}},
                                   indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
