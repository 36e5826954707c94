"""Kernel-table rows as kernel-model inputs, and the GPU / architecture folds over them."""
from __future__ import annotations

import numpy as np
import pytest

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.kernel import describe_kernel
from lilou.latency.kernel_model.measured import cost_nodes
from lilou.hardware.database import ARCHITECTURE_CLASSES, architecture_class
from lilou.latency.evaluation.table_folds import Scored, logo_table, loao_table, unit_peaks
from lilou.latency.kernel_model.table_kernels import row_nodes, table_kernels


def test_a_neusight_linear_row_is_the_same_kernel_as_the_loader_gives() -> None:
    row = {"family": "gemm", "op": "linear", "dtype": "fp32", "batch": 1, "m": 58, "n": 141, "k": 13, "bias": True}
    assert describe_kernel(row_nodes(row)) == describe_kernel(cost_nodes("linear", {"B": 1, "M": 58, "N": 13, "K": 141}))


def test_precision_sets_the_bytes_not_the_flops() -> None:
    base = {"family": "gemm", "op": "gemm", "batch": 1, "m": 4096, "n": 4096, "k": 4096, "bias": False}
    fp32, bf16, fp8 = (describe_kernel(row_nodes({**base, "dtype": d})) for d in ("fp32", "bf16", "fp8"))
    assert fp32.flops == bf16.flops == fp8.flops == 2 * 4096 ** 3
    assert fp32.bytes == 2 * bf16.bytes == 4 * fp8.bytes == 4 * 3 * 4096 * 4096


def test_a_quantised_linear_moves_bf16_activations() -> None:
    """AIConfigurator's quantised GEMMs are Linear modules: BF16 in and out, the weights in their own type; with
    activation scales (FP8, NVFP4, SmoothQuant) the activations are cast first, weight-only ones are not."""
    base = {"family": "gemm", "op": "gemm", "batch": 1, "m": 8, "n": 4096, "k": 2048, "bias": False}
    fp8 = describe_kernel(row_nodes({**base, "dtype": "fp8", "quant": "fp8-per-tensor"}))
    assert fp8.ops == ("Cast", "MatMul") and fp8.family == "gemm" and fp8.gemm == (1, 8, 4096, 2048)
    assert fp8.bytes == 2 * 8 * 2048 + 2048 * 4096 + 2 * 8 * 4096
    weight_only = describe_kernel(row_nodes({**base, "dtype": "int8", "quant": "int8-weight-only"}))
    assert weight_only.ops == ("MatMul",) and weight_only.bytes == fp8.bytes
    assert describe_kernel(row_nodes({**base, "dtype": "fp8"})).bytes == 8 * 2048 + 2048 * 4096 + 8 * 4096


def test_rows_without_a_pinned_shape_are_skipped_and_counted() -> None:
    columns = {"family": ["gemm", "moe", "conv", "norm"], "op": ["gemm", "moe", "conv2d", "rms_norm"],
               "dtype": ["bf16", "bf16", "fp32", "bf16"], "gpu": ["h200", "h200", "t4", "a100-sxm4-80gb"],
               "batch": [1, None, 2, None], "m": [8, None, None, None], "n": [16, None, None, None],
               "k": [32, None, None, None], "bias": [False, None, None, None], "rows": [None, None, None, 2048],
               "cols": [None, None, None, 4096]}
    priced = table_kernels(columns)
    assert priced.index.tolist() == [0, 3]
    assert priced.skipped == {"family moe not priced by the model": 1, "conv shape not pinned down": 1}
    assert priced.devices.sms.tolist() == [132.0, 108.0]


def test_architecture_classes() -> None:
    expected = {"m40-24gb": "Maxwell", "gtx-1080-ti": "Pascal", "v100-sxm2-16gb": "Volta", "t4": "Turing",
                "a100-sxm4-80gb": "GA100", "a40": "GA10x", "rtx-3090": "GA10x", "l40s": "Ada", "h200": "Hopper",
                "b200": "Blackwell", "rtx-pro-6000-blackwell-server": "Blackwell"}
    assert {gpu: architecture_class(gpu) for gpu in expected} == expected
    assert set(expected.values()) == set(ARCHITECTURE_CLASSES)


def test_unit_peaks_follow_the_row_unit() -> None:
    gpus = np.array(["h200", "h200", "h200", "t4"], dtype=object)
    units = np.array(["bf16_tensor", "fp8_tensor", None, "int8_tensor"], dtype=object)
    assert unit_peaks(gpus, units).tolist() == pytest.approx([989.4, 1978.9, 66.9, 130.0], rel=0.01)


def _scored(gpus: list[str], predicted: list[float], measured: list[float]) -> Scored:
    n = len(gpus)
    rows = {"source": np.array(["s"] * n, dtype=object), "dtype": np.array(["bf16"] * n, dtype=object),
            "family": np.array(["gemm"] * n, dtype=object), "gpu": np.array(gpus, dtype=object),
            "architecture": np.array([architecture_class(g) for g in gpus], dtype=object),
            "latency_ms": np.array(measured, dtype=object)}
    return Scored(rows=rows, predicted_ms=np.array(predicted), loao_predicted_ms=np.array(predicted) * 2,
                  roofline_ms=np.array(measured) * 1.5, skipped={})


def test_logo_averages_per_gpu_and_needs_enough_rows() -> None:
    scored = _scored(["h200"] * 3 + ["l40s"] * 3 + ["b200"], [1.1, 1.1, 1.1, 2.0, 2.0, 2.0, 9.0], [1.0] * 7)
    (row,) = logo_table(scored, min_rows=3)
    assert (row["gpus"], row["rows"], row["worst_gpu"]) == (2, 6, "l40s")  # the B200 has too few rows
    assert row["model_mape"] == pytest.approx((10 + 100) / 2) and row["roofline_mape"] == pytest.approx(50)
    loao = {r["architecture"]: r for r in loao_table(scored)}
    assert loao["Hopper"]["model_mape"] == pytest.approx(120) and loao["Blackwell"]["rows"] == 1


def test_table_rows_train_with_their_unit_peak_timing_and_kernel_names() -> None:
    from lilou.latency.kernel_model.dataset import TIMINGS
    from lilou.latency.kernel_model.dataset import dataset_from_sample

    sample = {"source": ["aiconfigurator", "neusight"], "gpu": ["h200", "t4"], "dtype": ["bf16", "fp32"],
              "family": ["gemm", "gemm"], "op": ["gemm", "linear"], "unit": ["bf16_tensor", "fp32"],
              "timing": ["cuda-graph-replay", "cuda-events-eager"], "provider": ["torch_flow", "volta_sgemm_32x128_tn"],
              "batch": [1, 1], "m": [4096, 58], "n": [4096, 141], "k": [4096, 13], "bias": [False, True],
              "latency_ms": [0.2, 0.05]}
    data = dataset_from_sample(sample)
    assert data.devices.compute_tflops.tolist() == pytest.approx([989.4, 8.1])
    assert data.timing.tolist() == [TIMINGS.index("cuda-graph-replay"), TIMINGS.index("cuda-events-eager")]
    assert data.kernel_type[0] == -1 and data.kernel_type[1] >= 0  # only NeuSight records kernel names
    assert data.family.tolist() == ["gemm", "gemm"]


def test_a_model_with_timing_floors_keeps_them_apart() -> None:
    import torch

    from lilou.latency.kernel_model.model import KernelLatencyNet

    net = KernelLatencyNet(3, 2, hidden=(4,), type_hidden=(4,), num_timings=2)
    with torch.no_grad():
        net.log_floor[:] = torch.arange(2 * net.log_floor.numel() // 2, dtype=torch.float32)
    family = torch.tensor([1, 1])
    floors, _, _ = net.parts(torch.zeros(2, 3), torch.zeros(2, 2), family, torch.zeros(2, 3), torch.tensor([0, 1]))
    from lilou.latency.kernel_model.kernel import FAMILIES

    assert floors.tolist() == [1.0, 1.0 + len(FAMILIES)]
    eager, _, _ = net.parts(torch.zeros(2, 3), torch.zeros(2, 2), family, torch.zeros(2, 3))
    assert eager.tolist() == [1.0, 1.0]  # no timing given: eager CUDA events, as the end-to-end model assumes


def test_floors_per_unit_keep_bf16_and_fp8_gemms_apart_in_torch_and_numpy(tmp_path) -> None:
    """With one floor per compute unit, a BF16 and an FP8 GEMM on the same GPU, timed the same way, take different
    floors; a BF16 and a TF32 MMA take their FP16 stand-in's; the numpy runtime reads the same (eager) floors as torch."""
    import torch

    from lilou.hardware import resolve_device
    from lilou.latency.kernel_model.features import UNITS, DeviceColumns, KernelBatch
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.kernel_model.kernel import FAMILIES, describe_kernel
    from lilou.latency.kernel_model.model import KernelLatencyNet
    from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
    from lilou.latency.kernel_model.table_kernels import row_nodes

    from lilou.latency.kernel_model.features import feature_names

    groups, type_groups = ("family", "waves", "precision"), ("family", "shape", "waves")
    sizes = len(feature_names(groups)), len(feature_names(type_groups))
    net = KernelLatencyNet(*sizes, hidden=(4,), type_hidden=(4,), num_timings=2, floor_units=len(UNITS))
    with torch.no_grad():
        net.log_floor[:] = torch.arange(net.log_floor.numel(), dtype=torch.float32) / 100
    predictor = KernelLatencyPredictor(net, groups, type_groups,
                                       {"num_features": sizes[0], "num_type_features": sizes[1], "hidden": [4],
                                        "num_timings": 2, "floor_units": len(UNITS)})
    row = {"family": "gemm", "dtype": "bf16", "op": "gemm", "m": 16, "n": 4096, "k": 4096}
    kernels = KernelBatch.from_specs([describe_kernel(row_nodes(row))] * 3)
    h200 = resolve_device("h200")
    devices = DeviceColumns.from_devices([h200] * 3, ["bf16_tensor", "fp8_tensor", "tf32_tensor"])
    gemm = FAMILIES.index("gemm")
    eager = predictor.predict(kernels, devices).floor_ms
    expected = [np.exp((UNITS.index(u) * len(FAMILIES) + gemm) / 100) for u in ("fp16_tensor", "fp8_tensor",
                                                                               "fp16_tensor")]
    assert eager == pytest.approx(expected, rel=1e-6)
    replay = predictor.predict(kernels, devices, np.array([1, 1, 1])).floor_ms
    assert replay == pytest.approx([e * np.exp(len(UNITS) * len(FAMILIES) / 100) for e in expected], rel=1e-5)
    predictor.save(tmp_path / "model")
    assert KernelModel.load(tmp_path / "model").predict(kernels, devices).floor_ms == pytest.approx(eager, rel=1e-6)


def test_floors_start_at_their_rows_quantile_and_an_unmeasured_unit_at_its_pool() -> None:
    """A floor with training rows starts at their quantile; a unit without rows (FP4 in a fold that holds out every
    Blackwell GPU) starts at the quantile of its timing method and family on every unit, not at 20 us."""
    import torch

    from lilou.latency.kernel_model.features import UNITS
    from lilou.latency.kernel_model.kernel import FAMILIES
    from lilou.latency.kernel_model.model import KernelLatencyNet

    net = KernelLatencyNet(3, 2, hidden=(4,), type_hidden=(4,), num_timings=2, floor_units=len(UNITS))
    latency_ms = torch.tensor([0.002, 0.003, 0.005, 0.006])
    bf16, fp8, fp4 = (UNITS.index(u) for u in ("bf16_tensor", "fp8_tensor", "fp4_tensor"))
    net.start_floors_at(latency_ms.log(), 0.0, family=torch.zeros(4, dtype=torch.int64),
                        timing=torch.ones(4, dtype=torch.int64), unit=torch.tensor([bf16, bf16, fp8, fp8]))

    def floor_us(timing: int, unit: int, family: int) -> float:
        return round(float(net.log_floor[(timing * len(UNITS) + unit) * len(FAMILIES) + family].detach().exp()) * 1e3, 3)

    assert [floor_us(1, bf16, 0), floor_us(1, fp8, 0), floor_us(1, fp4, 0)] == [2.0, 5.0, 2.0]
    assert floor_us(0, bf16, 0) == floor_us(1, bf16, 1) == 20.0  # no rows of that timing method or family


def test_the_neusight_style_baseline_is_bounded_by_the_roofline_and_learns(datasets_dir) -> None:
    from lilou.data.neusight import load_kernels
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.evaluation.neusight_baseline import NeuSightBaseline, tiles

    data = build_dataset(load_kernels("train", ops=["linear", "bmm"], devices=["t4"], data_dir=datasets_dir,
                                      limit_per_file=2000))
    waves, wave_ms, _ = tiles(data.kernels, data.devices)
    untrained = NeuSightBaseline.fit(data, epochs=0).predict(data.kernels, data.devices)
    trained = NeuSightBaseline.fit(data, epochs=8).predict(data.kernels, data.devices)
    assert np.all(trained >= waves * wave_ms * (1 - 1e-9))  # utilisation <= 1: never faster than the roofline

    def mape(p):
        return float(np.mean(np.abs(p - data.latency_ms) / data.latency_ms))

    assert mape(trained) < 0.5 * mape(untrained)


def test_rows_timed_without_the_launch_are_compared_with_the_gpu_work(datasets_dir) -> None:
    """Vidur's profiler kernel time has no launch floor: the model's GPU work is what it is compared with; the same
    row timed with eager CUDA events gets floor + work (the model's own latency)."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.data.kernel_table import kernel_table
    from lilou.latency.evaluation.table_folds import Fold
    from lilou.latency.kernel_model.inference import KernelModel

    relation = kernel_table(["vidur"], data_dir=datasets_dir).filter("family = 'norm' AND dtype = 'fp16'").limit(1)
    row = dict(zip(relation.columns, relation.fetchall()[0]))
    assert row["timing"] == "profiler-kernel-time"
    columns = {c: [v, v] for c, v in row.items()}
    columns["timing"] = ["profiler-kernel-time", "cuda-events-eager"]
    priced = table_kernels(columns)
    rows = {c: np.asarray(v, dtype=object)[priced.index] for c, v in columns.items()}
    model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    times = model.predict(priced.kernels, priced.devices)
    got = Fold(model, None).model_ms(priced, np.arange(2), rows)
    assert got.tolist() == [times.work_ms[0], times.latency_ms[1]]
    assert got[1] - got[0] == pytest.approx(times.floor_ms[1]) and times.floor_ms[1] > 0.01


def test_a_feature_constant_in_training_is_ignored_not_blown_up() -> None:
    """Held-out Pascal DP4A rows set a unit one-hot no training row sets; standardised by a floor of 1e-6 it reached
    the network as 1e6 and the prediction overflowed. A constant feature is now scaled by 1e6: the row is priced
    as if it were unset."""
    import torch

    from lilou.latency.kernel_model.model import KernelLatencyNet

    net = KernelLatencyNet(2, 1, hidden=(8,), type_hidden=(4,))
    training = torch.stack([torch.linspace(-1, 1, 16), torch.zeros(16)], dim=1)
    net.set_normalisation(training, torch.zeros(16, 1))
    assert net.feature_std.tolist()[1] == 1e6 and net.type_feature_std.tolist() == [1e6]
    held_out = torch.tensor([[0.5, 1.0], [0.5, 0.0]])
    log_latency, _ = net(held_out, torch.ones(2, 1), torch.tensor([0, 0]), torch.zeros(2, 3))
    assert torch.isfinite(log_latency).all()
    assert log_latency[0].item() == pytest.approx(log_latency[1].item(), abs=1e-4)


def test_winograd_roofline_is_the_same_in_torch_and_numpy(tmp_path) -> None:
    """A checkpoint trained with data.winograd_roofline prices a 3x3 stride-1 FP32 convolution at its Winograd
    FLOPs in both runtimes, and a stride-2 one at its direct FLOPs."""
    import torch

    from lilou.hardware import resolve_device
    from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch, feature_names
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.kernel_model.kernel import describe_kernel
    from lilou.latency.kernel_model.measured import cost_nodes
    from lilou.latency.kernel_model.model import KernelLatencyNet
    from lilou.latency.kernel_model.predictor import KernelLatencyPredictor

    groups, type_groups = ("family", "waves", "algorithm", "ridge"), ("family", "shape")
    sizes = len(feature_names(groups)), len(feature_names(type_groups))
    torch.manual_seed(0)
    net = KernelLatencyNet(*sizes, hidden=(4,), type_hidden=(4,))
    config = {"num_features": sizes[0], "num_type_features": sizes[1], "hidden": [4]}
    shapes = [{"B": 32, "C_in": 256, "C_out": 256, "kernel_size": 3, "input_size": 28, "stride": s, "padding": 1}
              for s in (1, 2)]
    kernels = KernelBatch.from_specs([describe_kernel(cost_nodes("conv", shape)) for shape in shapes])
    devices = DeviceColumns.from_devices([resolve_device("v100-pcie-32gb")] * 2)
    direct = KernelLatencyPredictor(net, groups, type_groups, config).predict(kernels, devices)
    winograd = KernelLatencyPredictor(net, groups, type_groups, {**config, "winograd_roofline": True})
    faster = winograd.predict(kernels, devices)
    assert faster.work_ms[1] == pytest.approx(direct.work_ms[1], rel=1e-6)   # stride 2: direct FLOPs
    assert faster.work_ms[0] < direct.work_ms[0]
    winograd.save(tmp_path / "model")
    numpy_model = KernelModel.load(tmp_path / "model")
    assert numpy_model.winograd
    assert numpy_model.predict(kernels, devices).work_ms == pytest.approx(faster.work_ms, rel=1e-5)


def test_the_kernel_table_gpu_folds_hold_out_each_chip_with_its_twins() -> None:
    """One fold per die (lilou/hardware/dies.yaml): a GPU is never scored by a fold that trained on its twin."""
    from lilou.latency.evaluation.table_folds import chip_folds

    present = ["a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "a40", "b200", "b300", "gb200", "gb300",
               "gtx-1080-ti", "gtx-titan-x", "h200", "l40s", "m40-24gb", "p100-pcie-16gb", "p4", "rtx-3090", "rtx-4090",
               "rtx-pro-6000-blackwell-server", "t4", "titan-x-pascal", "titan-xp", "v100-pcie-32gb", "v100-sxm2-16gb"]
    scored = ["a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "a40", "b200", "b300", "gb200", "gb300", "h200",
              "l40s", "p100-pcie-16gb", "p4", "rtx-pro-6000-blackwell-server", "t4", "v100-pcie-32gb"]
    assert chip_folds(scored, present) == [
        ("a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-80gb"), ("a40", "rtx-3090"), ("b200", "gb200"),
        ("b300", "gb300"), ("h200",), ("l40s", "rtx-4090"), ("p100-pcie-16gb",), ("p4",),
        ("rtx-pro-6000-blackwell-server",), ("t4",), ("v100-pcie-32gb", "v100-sxm2-16gb")]
    # a die none of whose GPUs is scored gets no fold; its GPUs stay in every fold's training rows
    assert chip_folds(["t4"], ["t4", "gtx-titan-x", "m40-24gb"]) == [("t4",)]
    # one GPU as a string is that GPU, not its letters ([('4',), ('t',)])
    assert chip_folds("t4", ["t4", "gtx-titan-x"]) == [("t4",)]
    # a scored GPU without rows (misspelt) made a fold of its own that held nothing out
    with pytest.raises(LilouInputError, match=r"^scored GPU\(s\) T4, t5 not among the present GPUs \(p4, t4\)$"):
        chip_folds(["t5", "T4", "t4"], ["t4", "p4"])


def test_twins_are_one_data_file_of_database_names() -> None:
    from lilou.hardware.database import all_gpus
    from lilou.hardware.dies import dies, twins
    from lilou.latency.kernel_model.folds import KERNEL_FOLDS

    names = {g.name for g in all_gpus()}
    assert {g for boards in dies().values() for g in boards} <= names
    assert twins("h100-sxm") == ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "gh200")
    assert twins("b200") == ("b200", "gb200") and twins("b300") == ("b300", "gb300") and twins("t4") == ("t4",)
    # the NeuSight folds are the same twins, among the GPUs of the FP32 model's data
    assert KERNEL_FOLDS == {"a100": ("a100-pcie-40gb", "a100-pcie-80gb"), "p100": ("p100-pcie-16gb",), "p4": ("p4",),
                            "t4": ("t4",), "v100": ("v100-pcie-32gb", "v100-sxm2-16gb")}
