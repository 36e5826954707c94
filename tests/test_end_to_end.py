"""Composition on real graphs and data: numpy model = torch model, fitted checkpoint, fallback, monotonicity."""
from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import helper

from lilou.api import Predictor
from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import load_graph
from lilou.hardware import all_devices, all_gpus, resolve_device
from lilou.latency.composition.end_to_end import describe_kernels
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.composition.monotone import dominates, dominating_devices, ladder_factors, ladder_levels, scaled
from lilou.latency.composition.overhead import E2E_OVERHEAD
from tests.conftest import REPO
from tests.onnx_builders import make_model, tensor

EXAMPLE = REPO / "examples" / "resnet18.onnx"
OVERHEAD = checkpoint_path(E2E_OVERHEAD)
# Devices where the raw kernel model was seen to predict a larger batch faster (before the size ladder).
BATCH_DEVICES = ("a10g", "t4", "p4", "l40s", "rtx-4090", "h100-sxm", "h100-nvl", "v100-pcie-32gb", "a100-80gb/3g.40gb",
                 "h100-sxm/1g.10gb")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


def _kernels(path, batch=None):
    graph = load_graph(path, batch=batch)
    return graph, describe_kernels(graph, predict_partition(graph, "eager"))


def _device(name: str):
    gpu, _, mig = name.partition("/")
    return resolve_device(gpu, mig or None)


def test_numpy_model_matches_the_torch_predictor():
    from lilou.latency.kernel_model.predictor import KernelLatencyPredictor

    _, kernels = _kernels(EXAMPLE)
    devices = all_devices()[::7]
    n = len(kernels.unique)
    batch = KernelBatch.from_specs(kernels.unique).take(np.tile(np.arange(n), len(devices)))
    columns = DeviceColumns.from_devices([d for d in devices for _ in range(n)])
    ours = KernelModel.load(checkpoint_path(KERNEL_LATENCY)).predict(batch, columns)
    reference = KernelLatencyPredictor.load(checkpoint_path(KERNEL_LATENCY)).predict(batch, columns)
    np.testing.assert_allclose(ours.work_ms, reference.work_ms, rtol=1e-5)
    np.testing.assert_allclose(ours.latency_ms, reference.latency_ms, rtol=1e-5)
    assert (ours.kernel_type == reference.kernel_type).all()
    assert (ours.compute_bound == reference.compute_bound).all()


def test_fallback_and_gap_are_reproduced_from_real_elementwise_rows(datasets_dir):
    from lilou.latency.composition.calibrate import fit_floor_side

    params = json.loads((OVERHEAD / "model.json").read_text())
    trained_on = json.loads((checkpoint_path(KERNEL_LATENCY) / "config.json").read_text())["trained_on"]
    fallback, gap, metrics = fit_floor_side(trained_on, data_dir=datasets_dir)
    assert fallback.efficiency == pytest.approx(params["fallback"]["efficiency"], rel=1e-9)
    assert gap == pytest.approx(params["overhead"]["gap_ms"], rel=1e-9)
    assert 0.6 < fallback.efficiency < 1.0 and 0.02 < gap < 0.05  # 24 to 45 us launch floors in the data
    assert metrics["gpus"] == ["a100-pcie-40gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb"]


def test_overhead_was_fitted_on_training_gpus_only():
    config = json.loads((OVERHEAD / "config.json").read_text())
    metrics = json.loads((OVERHEAD / "metrics.json").read_text())
    trained_on = set(json.loads((checkpoint_path(KERNEL_LATENCY) / "config.json").read_text())["trained_on"])
    assert set(config["trained_on"]) <= trained_on
    assert {row["gpu"] for row in metrics["rows"]} <= trained_on
    assert set(metrics["leave_one_gpu_out"]["per_gpu"]) == set(config["trained_on"])
    assert metrics["e2e_mape"] < metrics["sum_of_work_mape"] and metrics["leave_one_gpu_out"]["mape"] < 20


def _launch_queue(gpu_ms, issue_ms):
    """Eager execution step by step: kernel i is issued at (i + 1) * issue_ms and runs when the GPU is free."""
    end, shares = 0.0, []
    for i, g in enumerate(gpu_ms):
        start = max(end, (i + 1) * issue_ms)
        shares.append(start + g - end)
        end = start + g
    return shares


def test_composition_is_the_launch_queue_of_the_kernels(predictor):
    result = predictor.predict(EXAMPLE, gpu="a10g")
    params = json.loads((OVERHEAD / "model.json").read_text())["overhead"]
    assert result.latency_ms == pytest.approx(sum(k.latency_ms for k in result.kernels), abs=1e-3)
    # work_ms is the kernel model's time (alone_ms) times the fitted scale: the GPU time the queue runs
    assert [k.work_ms for k in result.kernels] == pytest.approx([params["scale"] * k.alone_ms for k in result.kernels])
    expected = _launch_queue([k.work_ms for k in result.kernels], params["gap_ms"])
    assert [k.latency_ms for k in result.kernels] == pytest.approx(expected, abs=2e-6)
    # ResNet-18 at batch 1 is host-bound: the GPU waits before some kernels, and never runs two at once.
    assert any(k.latency_ms > k.work_ms + 1e-3 for k in result.kernels)
    assert all(k.latency_ms >= k.work_ms - 2e-6 for k in result.kernels)
    fallback_ops = {op for k in result.kernels if k.fallback for op in k.ops}
    assert fallback_ops == {"BatchNormalization", "MaxPool", "ReduceMean"}
    assert all(k.type == "memory_fallback" for k in result.kernels if k.fallback)
    assert not any(k.fallback for k in result.kernels if k.ops in (("Conv",), ("Relu",), ("Add",)))
    assert 0.1 < result.fallback_share < 0.5


def test_identical_kernels_are_described_once():
    _, kernels = _kernels(EXAMPLE)
    assert len(kernels) == 68 and len(kernels.unique) < 40
    assert [kernels.specs[i] for i in range(len(kernels))] == [kernels.unique[j] for j in kernels.index]


def test_kernels_with_unknown_shapes_use_the_fallback(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                        helper.make_node("Mystery", ["h"], ["m"], name="custom", domain="com.example"),
                        helper.make_node("Relu", ["m"], ["y"], name="after")],
                       [tensor("x", [8, 256])], [tensor("y", None)])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    result = Predictor().predict(path, gpu="t4")
    assert [k.fallback for k in result.kernels] == [False, True, True]
    assert any("Mystery" in w for w in result.warnings)


def test_dominating_devices():
    slice_ = resolve_device("a100-80gb", "1g.10gb")
    names = {d.name for d in dominating_devices(slice_)}
    assert {"a100-sxm4-80gb", "a100-sxm4-80gb/7g.80gb", "a100-sxm4-80gb/2g.20gb", "a100-sxm4-80gb/1g.10gb+me"} <= names
    assert "a100-sxm4-80gb/1g.10gb" not in names
    assert dominating_devices(resolve_device("a100-80gb")) == []


def _mig_pairs():
    for gpu in (g for g in all_gpus() if g.supports_mig):
        devices = [d for d in all_devices() if d.gpu == gpu.name]
        for small in devices:
            for big in devices:
                if big.name != small.name and dominates(big, small):
                    yield small, big


@pytest.mark.parametrize("model", ["resnet18", "bert-base"])
def test_a_smaller_mig_slice_is_never_faster(predictor, zoo_onnx, model):
    path = EXAMPLE if model == "resnet18" else zoo_onnx("bert-base", batch=1, seq=128)
    devices = all_devices()
    predictions = {d.name: p for d, p in zip(devices, predictor.predict_many(path, devices))}
    pairs = list(_mig_pairs())
    assert len(pairs) > 100
    for small, big in pairs:
        slow, fast = predictions[small.name], predictions[big.name]
        assert slow.latency_ms >= fast.latency_ms, (small.name, big.name)
        assert all(a.work_ms >= b.work_ms for a, b in zip(slow.kernels, fast.kernels))


def test_a_board_with_more_of_everything_is_never_slower(predictor, zoo_onnx):
    """Boards of one compute capability where one has at least every resource of the other (SMs, clock, bandwidth,
    L2, power, every unit's peak): the L40S of the L40, the A40 of the A10G, the Titan RTX of the T4 ... The kernel
    model, which reads each resource apart, priced Llama-3.1-8B's decode step 1-4 % slower on the L40S than on the
    L40 (and on the RTX PRO 6000 than on the RTX 5090); each kernel's work is now at least its dominators'."""
    from lilou.latency.composition.monotone import board_dominates
    from lilou.llm import LLMPredictor

    boards = [d for d in all_devices() if d.mig is None]
    pairs = [(small, big) for small in boards for big in boards if board_dominates(big, small)]
    assert len(pairs) >= 50 and ("l40", "l40s") in {(s.name, b.name) for s, b in pairs}
    path = zoo_onnx("bert-base", batch=1, seq=128)
    predictions = {d.name: p for d, p in zip(boards, predictor.predict_many(path, boards))}
    for small, big in pairs:
        slow, fast = predictions[small.name], predictions[big.name]
        assert all(a.work_ms >= b.work_ms for a, b in zip(slow.kernels, fast.kernels)), (small.name, big.name)
    llm = LLMPredictor(predictor)
    steps = {name: llm.predict("llama-3.1-8b", name, batch=8, input_len=512, output_len=128, dtype="fp16")
             for name in ("l40", "l40s", "rtx-5090", "rtx-pro-6000-blackwell-server")}
    assert steps["l40s"].itl_ms <= steps["l40"].itl_ms
    assert steps["rtx-pro-6000-blackwell-server"].itl_ms <= steps["rtx-5090"].itl_ms


def test_scaled_kernels_equal_the_real_larger_batch(zoo_onnx):
    """The size ladder's premise: a batch-1 kernel scaled by 2 is the batch-2 kernel."""
    path = zoo_onnx("resnet18", dynamic_batch=True)
    _, one = _kernels(path, batch=1)
    _, two = _kernels(path, batch=2)
    keep = [i for i, spec in enumerate(one.specs) if spec.family in ("conv", "elementwise", "gemm")]
    assert {one.specs[i].family for i in keep} == {"conv", "elementwise", "gemm"}
    fixed = one.unique_fixed_bytes[one.index[keep]]
    grown = scaled(KernelBatch.from_specs([one.specs[i] for i in keep]), fixed, 2.0)
    real = KernelBatch.from_specs([two.specs[i] for i in keep])
    for column in ("flops", "bytes", "out_elements", "gemm_batch", "gemm_m", "gemm_n", "gemm_k", "rows"):
        np.testing.assert_array_equal(getattr(grown, column), getattr(real, column), err_msg=column)
    assert ladder_factors(3) == tuple(b / 3 for b in (*range(3, 17), 32, 64))


def test_the_ladders_of_a_batch_above_16_reach_down_its_halvings():
    assert ladder_levels(8) == (ladder_factors(8),)
    assert ladder_levels(None) == ((1.0, 2.0, 4.0, 8.0, 16.0),)
    assert ladder_levels(24) == ((1.0, 2.0, 4.0), tuple(b / 24 for b in (12, 13, 14, 15, 16, 32, 64)))
    assert ladder_levels(64) == ((1.0, 2.0, 4.0), (0.5, 1.0, 2.0), (0.25, 0.5, 1.0))
    assert ladder_levels(17) == ((1.0, 2.0, 4.0),)


def test_a_doubled_batch_above_16_is_never_faster(predictor, zoo_onnx):
    """ResNet-18's classifier GEMM at batch 32 took the price of its batch-128 copy, below all of batch 16's ladder:
    the RTX PRO 6000 Blackwell priced batch 32 at 2.0569 ms, batch 16 at 2.0573 ms (lower bound 1.7034 < 1.7036)."""
    path = zoo_onnx("resnet18", dynamic_batch=True)
    runs = [predictor.predict(path, gpu="rtx-pro-6000-blackwell-server", batch=b) for b in (16, 32, 64)]
    assert [r.latency_ms for r in runs] == sorted(r.latency_ms for r in runs)
    assert [r.interval_ms[0] for r in runs] == sorted(r.interval_ms[0] for r in runs)
    assert runs[1].latency_ms >= runs[0].latency_ms == 2.0573


@pytest.mark.slow
@pytest.mark.parametrize(("model", "batches"), [("resnet18", (*range(1, 17), 32)), ("bert-base", (1, 2, 3, 4, 8))])
def test_a_larger_batch_is_never_faster(predictor, zoo_onnx, model, batches):
    options = {"dynamic_batch": True} if model == "resnet18" else {"dynamic_batch": True, "seq": 128}
    path = zoo_onnx(model, **options)
    devices = [_device(name) for name in BATCH_DEVICES]
    totals = np.array([[p.latency_ms for p in predictor.predict_many(path, devices, batch=b)] for b in batches])
    worse = np.argwhere(np.diff(totals, axis=0) < 0)
    assert not len(worse), [(batches[i], devices[j].name, totals[i, j], totals[i + 1, j]) for i, j in worse]


@pytest.mark.slow
def test_bert_large_against_real_end_to_end_labels(predictor, zoo_onnx, datasets_dir):
    """NeuSight's eager BERT-large (seq 512, batch 8) labels of the GPUs with the best-calibrated kernels."""
    from lilou.data.neusight import load_e2e

    path = zoo_onnx("bert_large", batch=8, seq=512)
    labels = {m.gpu: m.latency_ms for m in load_e2e() if (m.model, m.seq, m.batch, m.fusion) == ("bert_large", 512, 8, False)}
    for gpu in ("a100-pcie-40gb", "p100-pcie-16gb", "v100-pcie-32gb"):
        predicted = predictor.predict(path, gpu=gpu).latency_ms
        assert math.isclose(predicted, labels[gpu], rel_tol=0.2), (gpu, predicted, labels[gpu])


def test_gpt2_attention_matmuls_behind_split_views_are_gemms(predictor, zoo_onnx):
    """torch.split exports as SplitToSequence + SequenceAt, views in eager: the attention MatMuls they are
    grouped with are predicted by the kernel model as GEMMs, not sent to the memory-bound fallback."""
    result = predictor.predict(zoo_onnx("gpt2", batch=1, seq=128), gpu="a10g")
    attention = [k for k in result.kernels if "SequenceAt" in k.ops and "MatMul" in k.ops]
    assert len(attention) == 24  # QK^T and scores x V in each of the 12 layers
    assert all(not k.fallback and k.category == "gemm" and k.type.startswith("gemm") for k in attention)
    assert not any("SequenceAt" in w and "memory-bound fallback" in w for w in result.warnings)
    # a split's output is a sequence (no tensor shape), and a view: no "outputs of unknown shape" about it
    assert not any("unknown shape" in w for w in result.warnings)
