"""Fit the backward-data / forward ratios that price transposed convolutions (lilou/latency/kernel_model/transposed.py).

DeepBench timed FP32 convolutions forward and backward-data (the kernel ``nn.ConvTranspose2d`` runs) for the same
shapes on eight GPUs from Maxwell to Turing. This pairs the two rows of each shape and GPU, fits one ratio per
stride class (the median over GPUs of each GPU's median), and prints, leave-one-architecture-out, how well
"measured forward x ratio fitted on the other architectures" predicts the measured backward-data time, beside the
ratio 1 that pricing a transposed convolution as a forward one assumes. Then it fits on every GPU and writes
lilou/latency/kernel_model/transposed_conv.json. How the convolution *models* price these rows (fold models that
never saw the architecture) is ``make bench-conv-geometry``.

    python scripts/fit_transposed_conv.py [--out FILE]   (default: the shipped lilou/latency/kernel_model/ file)
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from lilou.data.kernel_table import kernel_table
from lilou.hardware.database import architecture_class
from lilou.latency.kernel_model.transposed import PARAMETERS_FILE, SHAPE_FIELDS, fit_ratios, paired_ratios
from lilou.research.fold_tables import print_table

OUT = Path(__file__).resolve().parents[1] / "lilou" / "latency" / "kernel_model" / PARAMETERS_FILE


def pairs(dtype: str = "fp32") -> list[dict]:
    """The convolutions DeepBench timed forward and backward-data on one GPU, with their ratio."""
    relation = kernel_table(["deepbench"]).filter(
        f"family = 'conv' AND dtype = '{dtype}' AND mode IN ('forward', 'backward-data')")
    columns = ["gpu", "dtype", "subset", "mode", *SHAPE_FIELDS, "latency_ms"]
    return paired_ratios(relation.project(", ".join(columns)).to_arrow_table().to_pylist())


def _ape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured) * 100)


def leave_one_architecture_out(paired: list[dict]) -> list[dict]:
    rows = []
    for architecture in sorted({architecture_class(p["gpu"]) for p in paired}):
        train = [p for p in paired if architecture_class(p["gpu"]) != architecture]
        held = [p for p in paired if architecture_class(p["gpu"]) == architecture]
        fitted = fit_ratios(train)
        for cls in sorted({p["stride_class"] for p in held}):
            picked = [p for p in held if p["stride_class"] == cls]
            measured = np.array([p["backward_data_ms"] for p in picked])
            forward = np.array([p["forward_ms"] for p in picked])
            ratio = fitted[cls]["ratio"] if cls in fitted else 1.0
            rows.append({"architecture": architecture, "stride": cls, "gpus": len({p["gpu"] for p in picked}),
                         "rows": len(picked), "ratio_fitted": ratio, "mape_ratio": _ape(forward * ratio, measured),
                         "mape_as_forward": _ape(forward, measured)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"file to write (default: the shipped lilou/latency/kernel_model/{OUT.name})")
    args = parser.parse_args(argv)
    paired = pairs("fp32")
    folds = leave_one_architecture_out(paired)
    print_table("Measured forward x ratio fitted without the architecture, against measured backward-data (FP32)",
                folds, ["architecture", "stride", "gpus", "rows", "ratio_fitted", "mape_ratio", "mape_as_forward"])
    for cls in ("unit_stride", "strided"):
        picked = [f for f in folds if f["stride"] == cls]
        print(f"{cls}: mean over architectures {statistics.fmean(f['mape_ratio'] for f in picked):.1f} % "
              f"(priced as forward: {statistics.fmean(f['mape_as_forward'] for f in picked):.1f} %)")
    fitted = fit_ratios(paired)
    result = {
        "source": "DeepBench FP32 convolutions timed forward and backward-data on the same shapes and GPUs "
                  "(kernel table, lilou data list: deepbench; host-timer loops, cuDNN 6-7)",
        "command": "python scripts/fit_transposed_conv.py" + (f" --out {args.out}" if args.out != OUT else ""),
        "ratio": {cls: round(entry["ratio"], 4) for cls, entry in fitted.items()},
        "architectures": sorted({architecture_class(p["gpu"]) for p in paired}),
        "per_gpu": {cls: {gpu: round(r, 4) for gpu, r in entry["gpus"].items()} for cls, entry in fitted.items()},
        "rows": {cls: entry["rows"] for cls, entry in fitted.items()},
        "leave_one_architecture_out": [{k: round(v, 2) if isinstance(v, float) else v for k, v in f.items()}
                                       for f in folds],
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"ratios {result['ratio']} -> {args.out}")


if __name__ == "__main__":
    main()
