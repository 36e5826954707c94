"""Each kernel family's smallest GPU time (lilou/latency/kernel_model/kernel_floor.py): measured in the kernel table,
and no kernel priced below it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from lilou.api import Predictor
from lilou.graph import build_graph
from lilou.latency.kernel_model.kernel_floor import PARAMETERS_FILE, family_floors_ms
from tests.conftest import REPO, load_script
from tests.onnx_builders import make_model, tensor, weight

SHIPPED = REPO / "lilou" / "latency" / "kernel_model" / PARAMETERS_FILE


def test_the_shipped_floors_are_the_fastest_launch_free_kernels_the_table_measured(datasets_dir: Path) -> None:
    """``scripts/kernel_floors.py`` writes what the real rows give: AIConfigurator's fastest graph-replayed GEMM (a
    B300's BF16, 1.484 us) and Vidur's fastest profiled element-wise kernel (an A100's, 1 us, timed to the
    microsecond), the floor of every family no launch-free source timed at small sizes."""
    script = load_script("kernel_floors")
    measured = script.measured_floors(str(datasets_dir))
    shipped = json.loads(SHIPPED.read_text())
    assert shipped["measurements"] == measured
    assert (measured["gemm"]["gpu"], measured["gemm"]["source"], measured["gemm"]["timing"]) == (
        "b300", "aiconfigurator", "cuda-graph-replay")
    assert {family: entry["floor_us"] for family, entry in shipped["floors"].items()} == {
        "gemm": 1.484, "conv": 1.0, "elementwise": 1.0, "layernorm": 1.0, "softmax": 1.0, "reduction": 1.0,
        "memory": 1.0}


def small_fp16_layer() -> object:
    """x[1, 64] @ W[64, 64] -> Relu in FP16: two kernels the size of a batch-1 head."""
    fp16 = 10
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")]
    return build_graph(make_model(nodes, [tensor("x", [1, 64], fp16)], [tensor("y", [1, 64], fp16)],
                                  [weight("w", [64, 64], np.float16)]))


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm", "a100-sxm4-80gb", "t4"])
def test_under_graph_replay_no_kernel_is_priced_below_its_familys_floor(gpu: str) -> None:
    """With ``--launch-gap-us 0`` nothing but a kernel's own GPU time sets the total: the FP16 GEMM of a batch-1
    layer was priced at tens of nanoseconds on Hopper and Blackwell (0.5 us per kernel for BERT-base on a B200)."""
    predictor = Predictor(launch_gap_ms=0.0)
    result = predictor.predict(small_fp16_layer(), gpu=gpu)
    floors = family_floors_ms()
    assert [k.ops for k in result.kernels] == [("MatMul",), ("Relu",)]
    assert [k.alone_ms for k in result.kernels] >= [floors["gemm"], floors["elementwise"]]
    assert min(k.alone_ms for k in result.kernels) == floors["elementwise"]  # the Relu of 64 values: the floor itself
    # a running model's GPU time is the end-to-end scale's share of it, and nothing else adds under graph replay
    scale = predictor.model.overhead.scale
    assert result.latency_ms == pytest.approx(scale * sum(k.alone_ms for k in result.kernels), abs=5e-5)  # 4 decimals
