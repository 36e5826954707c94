"""The launch/gap overhead and the sustained-power slowdown: formula, fit, and what `infer` reports."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lilou.api import Predictor
from lilou.checkpoints import checkpoint_path
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import load_graph
from lilou.hardware import resolve_device
from lilou.latency.end_to_end import describe_kernels
from lilou.latency.overhead import (E2E_OVERHEAD, REFERENCE_POWER_W, GraphWork, OverheadModel, _best_scale,
                                    compute_slowdown, fit_overhead, queue_shares, sustained_slowdown)
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "resnet18.onnx"
SHIPPED = json.loads((checkpoint_path(E2E_OVERHEAD) / "model.json").read_text())["overhead"]


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def example_work(predictor):
    """ResNet-18's real kernels on three boards: 70 W, 75 W and 250 W."""
    graph = load_graph(EXAMPLE)
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    devices = [resolve_device(name) for name in ("t4", "p4", "v100-pcie-32gb")]
    return predictor.model.kernel_work(kernels, devices, 1)


def test_boards_at_or_above_the_reference_power_are_never_slowed():
    ratios = np.array([0.0, 0.01, 1.0, 7.0, 1e6])
    for power in (REFERENCE_POWER_W, 250.0, 700.0):
        np.testing.assert_array_equal(sustained_slowdown(ratios, power, exponent=1.3), np.ones(5))


def test_slowdown_is_the_power_factor_on_compute_bound_kernels_and_fades_to_one():
    f = (150 / 70) ** 0.75
    assert float(compute_slowdown(70.0, 0.75)) == pytest.approx(f)
    ratios = np.array([0.0, 0.2, 1 / f, 0.9, 1.0, 2.0, 50.0])
    slowdown = sustained_slowdown(ratios, 70.0, 0.75)
    # Far from compute-bound: untouched; from compute time = memory time / f on, compute sets the pace.
    np.testing.assert_allclose(slowdown, [1.0, 1.0, 1.0, 0.9 * f, f, f, f])
    assert (np.diff(slowdown) >= 0).all()  # a larger kernel (higher ratio) is never relatively faster
    np.testing.assert_array_equal(sustained_slowdown(ratios, 70.0, 0.0), np.ones(len(ratios)))


def test_queue_shares_add_up_to_the_step_by_step_queue():
    gpu = np.array([0.01, 0.01, 1.0, 0.001, 0.001, 0.001, 2.0])
    shares = queue_shares(gpu, 0.03)
    # Host-bound start (each kernel waits for its issue), then the 1 ms kernel lets the host run ahead.
    np.testing.assert_allclose(shares, [0.04, 0.03, 1.02, 0.001, 0.001, 0.001, 2.0])
    both = queue_shares(np.stack([gpu, 10 * gpu], axis=1), 0.03)
    np.testing.assert_allclose(both[:, 0], shares)
    assert both[:, 1].sum() == pytest.approx(0.03 + 10 * gpu.sum())  # GPU-bound from the first kernel on


def test_best_scale_equals_the_queue_total(example_work):
    work = [example_work.work_ms[:, j] for j in range(3)]
    gap = SHIPPED["gap_ms"]
    # Targets off a known scale by a few %: this checks the search, not a fit to measurements.
    labels = np.array([queue_shares(0.8 * w, gap).sum() for w in work]) * [1.05, 0.97, 1.0]
    scale, error = _best_scale(work, labels, gap)

    def mape_at(s):
        totals = np.array([queue_shares(s * w, gap).sum() for w in work])
        return 100 * np.mean(np.abs(totals - labels) / labels)

    assert error == pytest.approx(mape_at(scale), rel=1e-9)
    # No scale on a fine grid around it does better by more than the search's resolution.
    assert min(mape_at(s) for s in np.linspace(0.5 * scale, 1.5 * scale, 1001)) >= error - 0.01


def test_fit_recovers_scale_and_exponent_of_a_known_overhead(example_work):
    """Targets computed from a known OverheadModel (not measurements): the fit must find it again."""
    truth = OverheadModel(scale=0.9, gap_ms=SHIPPED["gap_ms"], power_exponent=0.6)
    graphs = [GraphWork(example_work.work_ms[:, j] * size, example_work.compute_ratio[:, j],
                        float(example_work.board_power_w[j])) for j in range(3) for size in (1.0, 8.0)]
    fitted = fit_overhead(graphs, [truth.total_ms(g) for g in graphs], truth.gap_ms)
    assert fitted.power_exponent == pytest.approx(0.6, abs=0.011)
    assert fitted.scale == pytest.approx(0.9, rel=0.01)


def test_exponent_stays_zero_without_a_low_power_board(example_work):
    v100 = GraphWork(example_work.work_ms[:, 2], example_work.compute_ratio[:, 2], 250.0)
    fitted = fit_overhead([v100], [1.3 * v100.work_ms.sum()], SHIPPED["gap_ms"])
    assert fitted.power_exponent == 0.0


def test_infer_on_a_low_power_board_applies_and_reports_the_slowdown(predictor, example_work):
    f = (REFERENCE_POWER_W / 70) ** SHIPPED["power_exponent"]
    assert SHIPPED["power_exponent"] > 0
    t4 = predictor.predict(EXAMPLE, gpu="t4")
    notes = [w for w in t4.warnings if "70 W board" in w]
    assert len(notes) == 1 and f"{f:.2f}x slower" in notes[0]
    # The composition slows each kernel by the formula, then queues them.
    ratio = example_work.compute_ratio[:, 0]
    gpu = SHIPPED["scale"] * example_work.work_ms[:, 0] * sustained_slowdown(ratio, 70.0, SHIPPED["power_exponent"])
    np.testing.assert_allclose([k.latency_ms for k in t4.kernels], queue_shares(gpu, SHIPPED["gap_ms"]), atol=2e-6)
    assert (gpu[ratio >= 1] == pytest.approx(f * SHIPPED["scale"] * example_work.work_ms[ratio >= 1, 0]))
    assert (ratio >= 1).any()
    for gpu_name, mig in (("a10g", None), ("a100-80gb", "1g.10gb")):
        assert not any("W board" in w for w in predictor.predict(EXAMPLE, gpu=gpu_name, mig=mig).warnings)


def test_rank_names_every_slowed_board_once(predictor):
    ranking = predictor.rank(EXAMPLE, gpus=["t4", "a10g", "p4", "a100-80gb/1g.10gb"])
    notes = [w for w in ranking.warnings if "low-power boards" in w]
    assert len(notes) == 1
    assert "t4 (70 W)" in notes[0] and "p4 (75 W)" in notes[0] and "a10g" not in notes[0] and "a100" not in notes[0]
    assert not any("low-power" in w for w in predictor.rank(EXAMPLE, gpus=["a10g", "h100-sxm"]).warnings)
