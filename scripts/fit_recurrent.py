"""Fit the recurrent-layer model (lilou/latency/kernel_model/recurrent.py) on DeepBench's forward RNN rows.

Prints the leave-one-GPU-out MAPE per cell beside a plain roofline (the same formula with no floor and
efficiency 1), then fits on every GPU and writes lilou/latency/kernel_model/recurrent.json.

    python scripts/fit_recurrent.py [--out FILE]   (default: the shipped lilou/latency/kernel_model/ file)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lilou.data.kernel_table import kernel_table
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.recurrent import PARAMETERS_FILE, RecurrentModel, RecurrentShape, fit_cell

OUT = Path(__file__).resolve().parents[1] / "lilou" / "latency" / "kernel_model" / PARAMETERS_FILE
CELLS = {"lstm": "lstm", "gru": "gru", "vanilla": "rnn"}
ITEMSIZE = {"fp32": 4, "fp16": 2}
PEAK = {"fp32": "fp32", "fp16": "fp16"}


def rows() -> list[dict]:
    relation = kernel_table().filter("family = 'rnn' AND mode = 'forward' AND dtype IN ('fp32', 'fp16')")
    table = relation.project("gpu, dtype, op, batch, hidden, timesteps, latency_ms").to_arrow_table().to_pylist()
    return [r for r in table if r["batch"] and r["hidden"] and r["timesteps"] and r["op"] in CELLS]


def arrays(selected: list[dict]):
    shapes, peaks, bandwidths = [], [], []
    for r in selected:
        device = resolve_device(r["gpu"])
        shapes.append(RecurrentShape(CELLS[r["op"]], int(r["timesteps"]), int(r["batch"]), 1, int(r["hidden"]),
                                     int(r["hidden"]), ITEMSIZE[r["dtype"]]))
        peak = device.peak_tflops.get(PEAK[r["dtype"]]) or device.fp32_tflops
        peaks.append(peak)
        bandwidths.append(device.memory_bandwidth_gbs)
    return shapes, np.array(peaks), np.array(bandwidths), np.array([r["latency_ms"] for r in selected], dtype=float)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"file to write (default: the shipped lilou/latency/kernel_model/{OUT.name})")
    args = parser.parse_args(argv)
    data = rows()
    gpus = sorted({r["gpu"] for r in data})
    report: dict[str, dict] = {}
    fitted: dict[str, tuple[float, float]] = {}
    for op, cell in CELLS.items():
        of_cell = [r for r in data if r["op"] == op]
        errors, roofline_errors = [], []
        for gpu in gpus:
            train = [r for r in of_cell if r["gpu"] != gpu]
            test = [r for r in of_cell if r["gpu"] == gpu]
            if not test or not train:
                continue
            floor, efficiency = fit_cell(*arrays(train))
            model = RecurrentModel({cell: floor}, {cell: efficiency})
            roofline = RecurrentModel({cell: 0.0}, {cell: 1.0})
            shapes, peaks, bandwidths, measured = arrays(test)
            for m, out in ((model, errors), (roofline, roofline_errors)):
                predicted = np.array([m.work_ms(s, p, b) for s, p, b in zip(shapes, peaks, bandwidths)])
                out.append(float(np.mean(np.abs(predicted - measured) / measured) * 100))
        fitted[cell] = fit_cell(*arrays(of_cell))
        report[cell] = {"rows": len(of_cell), "gpus": len({r["gpu"] for r in of_cell}),
                        "logo_mape": round(float(np.mean(errors)), 1), "logo_worst_gpu_mape": round(max(errors), 1),
                        "roofline_logo_mape": round(float(np.mean(roofline_errors)), 1)}
        print(cell, report[cell], "fit on all:", fitted[cell])
    args.out.write_text(json.dumps({
        "source": "DeepBench forward RNN rows of the kernel table (lilou data list: deepbench), H100/L4 held back",
        "command": "python scripts/fit_recurrent.py" + (f" --out {args.out}" if args.out != OUT else ""),
        "step_floor_ms": {c: f[0] for c, f in fitted.items()},
        "efficiency": {c: f[1] for c, f in fitted.items()},
        "leave_one_gpu_out": report}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
