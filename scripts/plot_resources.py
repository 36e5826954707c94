"""Predicted latency vs SM count and memory bandwidth across the MIG slices of A100-80GB and H100-SXM.

Uses the shipped checkpoints through :class:`lilou.Predictor` (eager backend): every
MIG profile of each GPU plus the whole GPU, for a few zoo models exported weight-free
into <--out>/models (cached; default outputs/results/models). A slice with no more SMs, bandwidth and L2 than
another must not be predicted faster; the CSV marks each row's violations of that
order (``monotone_violations``, 0 everywhere when the predictions are monotone).
Writes outputs/results/plot_resources.{csv,png,json}.

    python scripts/plot_resources.py [--quick] [--models resnet50,bert-base,gpt2] [--onnx PATH ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lilou.research.ablation import REPO, RESULTS, pyplot, save_figure, write_result  # noqa: E402

NAME = "plot_resources"
GPUS = ("a100-80gb", "h100-sxm")
# zoo name -> (batch, seq or None); image models use the zoo's default image size (224)
MODELS = {"resnet50": (1, None), "bert-base": (1, 128), "gpt2": (1, 128)}
QUICK_ONNX = REPO / "examples" / "resnet18.onnx"


def export(name: str, batch: int, seq: int | None, cache: Path) -> Path:
    from lilou.zoo.export import export_onnx

    path = cache / f"{name}-b{batch}" f"{f'-s{seq}' if seq else ''}.onnx"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        print(f"exporting {name} (weight-free) to {path}", flush=True)
        export_onnx(name, path, batch=batch, seq=seq, strip_weights=True)
    return path


def devices_of(gpu: str):
    from lilou.hardware.database import find_gpu
    from lilou.hardware.device import mig_slice, whole_gpu

    spec = find_gpu(gpu)
    return [mig_slice(spec, p) for p in spec.mig_profiles] + [whole_gpu(spec)]


def violations(rows: list[dict]) -> None:
    """Per row: how many slices of the same GPU and model with <= every resource are predicted faster."""
    for row in rows:
        row["monotone_violations"] = sum(
            1 for other in rows
            if other is not row and other["model"] == row["model"] and other["gpu"] == row["gpu"]
            and other["sms"] <= row["sms"] and other["bandwidth_gbs"] <= row["bandwidth_gbs"]
            and other["l2_mb"] <= row["l2_mb"] and other["latency_ms"] < row["latency_ms"] - 1e-9)


def run(models: dict[str, Path]) -> list[dict]:
    from lilou import Predictor

    predictor = Predictor(backend="eager")
    rows = []
    for model, path in models.items():
        for gpu in GPUS:
            devices = devices_of(gpu)
            for device, prediction in zip(devices, predictor.predict_many(path, devices)):
                rows.append({"model": model, "gpu": device.gpu, "slice": device.mig or "whole GPU",
                             "sms": device.sms, "bandwidth_gbs": round(device.memory_bandwidth_gbs, 1),
                             "l2_mb": round(device.l2_mb, 2), "memory_gb": device.memory_gb,
                             "latency_ms": prediction.latency_ms, "kernels": len(prediction.kernels)})
    violations(rows)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    fig, axes = plt.subplots(2, len(gpus), figsize=(5.5 * len(gpus), 7.5), squeeze=False)
    for j, gpu in enumerate(gpus):
        for i, (key, label) in enumerate((("sms", "SMs of the slice"), ("bandwidth_gbs", "DRAM bandwidth (GB/s)"))):
            ax = axes[i][j]
            for model in models:
                picked = sorted((r for r in rows if r["gpu"] == gpu and r["model"] == model),
                                key=lambda r: (r[key], -r["latency_ms"]))
                ax.plot([r[key] for r in picked], [r["latency_ms"] for r in picked], marker="o", label=model)
                bad = [r for r in picked if r["monotone_violations"]]
                if bad:
                    ax.scatter([r[key] for r in bad], [r["latency_ms"] for r in bad], s=90, facecolors="none",
                               edgecolors="red", zorder=3, label=f"{model}: not monotone")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("predicted latency (ms)")
            ax.set_title(f"{gpu}: MIG slices and whole GPU")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_ONNX.relative_to(REPO)} (no export)")
    parser.add_argument("--models", default=",".join(MODELS), help="zoo models (of: " + ", ".join(MODELS) + ")")
    parser.add_argument("--onnx", type=Path, nargs="*", default=None, help="ONNX files instead of zoo models")
    parser.add_argument("--cache", type=Path, default=None, help="where zoo exports are cached (default <--out>/models)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.cache = args.cache or args.out / "models"  # --out alone keeps every file it writes out of the repository
    started = time.perf_counter()
    if args.onnx or args.quick:
        models = {p.stem: p for p in (args.onnx or [QUICK_ONNX])}
    else:
        models = {name: export(name, *MODELS[name], args.cache) for name in args.models.split(",")}
    rows = run(models)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.out / f"{NAME}.png")
    bad = sum(1 for r in rows if r["monotone_violations"])
    columns = ["model", "gpu", "slice", "sms", "bandwidth_gbs", "l2_mb", "memory_gb", "latency_ms", "kernels",
               "monotone_violations"]
    write_result(NAME, rows, columns, title="Predicted latency (ms) across MIG slices (shipped checkpoints, eager)",
                 table_columns=["model", "gpu", "slice", "sms", "bandwidth_gbs", "latency_ms", "monotone_violations"],
                 seed=None, quick=args.quick, started=started, out_dir=args.out, digits=3,
                 data=("no measurements: predictions of the shipped checkpoints (kernel_latency, e2e_overhead, fusion "
                       "model or rule fallback) for " + ", ".join(models) + "; MIG profiles from lilou/hardware/gpus.yaml"),
                 extra={"models": {k: str(v.relative_to(REPO) if v.resolve().is_relative_to(REPO) else v)
                                   for k, v in models.items()},
                        "rows_not_monotone": bad})
    print(f"rows not monotone in resources: {bad}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
