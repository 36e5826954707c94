"""Training the kernel model through Hydra on a small slice of the real data, and using it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lilou.data.neusight import load_kernels
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.dataset import build_dataset
from lilou.latency.kernel_model.features import DeviceColumns
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES
from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
from lilou.latency.evaluation.roofline import RooflineBaseline

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, datasets_dir) -> Path:
    """A model trained for one epoch on 4,000 rows of four GPUs, T4 held out."""
    out = tmp_path_factory.mktemp("run")
    command = [sys.executable, "-m", "lilou.train", f"hydra.run.dir={out}", "data.max_rows=4000",
               "trainer.max_epochs=1", "data.held_out_gpus=[t4]", "trainer.enable_progress_bar=false",
               f"data.data_dir={datasets_dir}"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def test_hydra_run_writes_checkpoint_metrics_and_csv_log(trained):
    checkpoint = trained / "checkpoint"
    assert {p.name for p in checkpoint.iterdir()} == {"model.safetensors", "config.json", "metrics.json"}
    metrics = json.loads((checkpoint / "metrics.json").read_text())
    assert metrics["train_rows"] == 3800  # 4,000 sampled, 5 % kept for validation
    assert "t4" not in metrics["trained_on"]
    assert {row["gpu"] for row in metrics["held_out"]} == {"t4"}
    assert {row["family"] for row in metrics["held_out"]} == {"gemm", "conv", "elementwise", "layernorm", "softmax"}
    assert list(trained.glob("csv/version_0/metrics.csv"))


def test_checkpoint_loads_without_pickle_and_predicts(trained, datasets_dir):
    predictor = KernelLatencyPredictor.load(trained / "checkpoint")
    table = load_kernels("train", ops=["linear"], devices=["Tesla T4"], data_dir=datasets_dir, limit_per_file=50)
    rows = build_dataset(table)
    prediction = predictor.predict(rows.kernels, rows.devices)
    assert prediction.latency_ms.shape == (50,)
    assert np.all(prediction.latency_ms > prediction.work_ms)  # floor + work
    assert np.all(prediction.work_ms > 0)
    assert set(prediction.kernel_type) <= set(KERNEL_TYPES)


def test_smaller_mig_slice_is_never_faster(trained, datasets_dir):
    predictor = KernelLatencyPredictor.load(trained / "checkpoint")
    rows = build_dataset(load_kernels("train", ops=["linear", "add"], devices=["Tesla T4"],
                                      data_dir=datasets_dir, limit_per_file=200))
    slices = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    times = [predictor.predict(rows.kernels, DeviceColumns.from_devices([resolve_device("a100-80gb", s)])).work_ms
             for s in slices]
    roofline = [DeviceColumns.from_devices([resolve_device("a100-80gb", s)]) for s in slices]
    assert [c.sms[0] for c in roofline] == [14, 28, 42, 98]
    # Summed over real kernels the predicted time falls as the slice grows.
    totals = [t.sum() for t in times]
    assert totals == sorted(totals, reverse=True)


def test_roofline_baseline_fits_floor_and_efficiency_on_real_rows(datasets_dir):
    rows = build_dataset(load_kernels("train", ops=["add"], devices=["Tesla T4", "Tesla P4"],
                                      data_dir=datasets_dir))
    baseline = RooflineBaseline.fit(rows)
    elementwise = 2  # FAMILIES.index("elementwise")
    assert 0.015 < baseline.floor_ms[elementwise] < 0.035  # the ~26 us launch floor of these machines
    assert 0.5 < baseline.efficiency[elementwise] < 0.95   # streaming at most of peak bandwidth
    predicted = baseline.predict(rows.kernels, rows.devices)
    ape = np.abs(predicted - rows.latency_ms) / rows.latency_ms
    assert np.median(ape) < 0.2


def test_shipped_checkpoint_loads_and_predicts_real_rows(datasets_dir):
    predictor = KernelLatencyPredictor.load(REPO / "checkpoints" / "kernel_latency")
    assert predictor.config["trained_on"] == ["a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4",
                                              "v100-pcie-32gb"]
    metrics = json.loads((REPO / "checkpoints" / "kernel_latency" / "metrics.json").read_text())
    assert metrics["command"] == "python -m lilou.train experiment=kernel_latency"
    rows = build_dataset(load_kernels("train", ops=["linear", "add", "softmax"], devices=["Tesla V100-PCIE-32GB"],
                                      data_dir=datasets_dir, limit_per_file=300))
    prediction = predictor.predict(rows.kernels, rows.devices)
    ratio = prediction.latency_ms / rows.latency_ms
    assert np.all(np.isfinite(ratio))
    assert 0.7 < np.median(ratio) < 1.4  # a GPU it was trained on: no gross bias


def test_kernel_table_rows_join_neusight_with_their_own_timing(datasets_dir):
    """DeepBench's FP32 forward convolutions (every geometry NeuSight lacks), as the FP32 model's extra rows."""
    from lilou.latency.kernel_model.datamodule import table_dataset
    from lilou.latency.kernel_model.dataset import TIMINGS

    rows = table_dataset({"sources": ["deepbench"], "dtypes": ["fp32"], "families": ["conv"]}, datasets_dir)
    gpus, counts = np.unique(rows.gpu, return_counts=True)
    assert gpus.tolist() == ["gtx-1080-ti", "gtx-titan-x", "m40-24gb", "p100-pcie-16gb", "t4", "titan-x-pascal",
                             "titan-xp", "v100-sxm2-16gb"]
    assert counts.tolist() == [90] * 8  # forward passes only
    assert set(rows.family) == {"conv"} and set(rows.timing) == {TIMINGS.index("host-timer-loop")}
    windows = set(rows.kernels.conv_window.tolist())
    assert {1.0, 9.0, 25.0, 49.0} <= windows  # 1x1, 3x3, 5x5 and 7x7 filters
    assert set(rows.kernels.conv_stride.tolist()) == {1.0, 2.0}
    assert np.all(rows.devices.unit == 0)  # FP32 CUDA cores
    with pytest.raises(ValueError, match="not \\['gpus'\\]"):
        table_dataset({"gpus": ["t4"]}, datasets_dir)


def test_held_out_gpus_leave_the_table_rows_too(datasets_dir):
    """The V100 fold holds out NeuSight's V100-PCIe and DeepBench's V100-SXM2: no V100 row trains it."""
    from lilou.latency.kernel_model.folds import KERNEL_FOLDS
    from lilou.latency.kernel_model.datamodule import KernelDataModule

    module = KernelDataModule(data_dir=str(datasets_dir), held_out_gpus=KERNEL_FOLDS["v100"], ops=["conv"],
                              table_rows={"sources": ["deepbench"], "dtypes": ["fp32"], "families": ["conv"]})
    module.setup()
    assert not {"v100-pcie-32gb", "v100-sxm2-16gb"} & set(module.train_gpus)
    assert "m40-24gb" in module.train_gpus  # DeepBench's Maxwell rows train it
    test_gpus, test_counts = np.unique(module.test_rows.gpu, return_counts=True)
    assert test_gpus.tolist() == ["v100-pcie-32gb", "v100-sxm2-16gb"]
    assert test_counts[1] == 90
    assert len(module.train_rows) + len(module.val_rows) + len(module.test_rows) == len(module.load_dataset())
