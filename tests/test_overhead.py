"""The launch queue, its fit, and the low-power compute term: formula, shipped model, what `infer` reports."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from lilou.api import Predictor
from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import load_graph
from lilou.hardware import resolve_device
from lilou.latency.composition.end_to_end import describe_kernels
from lilou.latency.kernel_model.features import (REFERENCE_POWER_W, DeviceColumns, KernelBatch, low_power_exponent, power_factor,
                                   roofline_ms)
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.composition.overhead import (E2E_OVERHEAD, OverheadModel, _best_scale, fit_overhead, queue_envelope,
                                                queue_shares, queue_total)
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


def test_queue_shares_add_up_to_the_step_by_step_queue():
    gpu = np.array([0.01, 0.01, 1.0, 0.001, 0.001, 0.001, 2.0])
    shares = queue_shares(gpu, 0.03)
    # Host-bound start (each kernel waits for its issue), then the 1 ms kernel lets the host run ahead.
    np.testing.assert_allclose(shares, [0.04, 0.03, 1.02, 0.001, 0.001, 0.001, 2.0])
    both = queue_shares(np.stack([gpu, 10 * gpu], axis=1), 0.03)
    np.testing.assert_allclose(both[:, 0], shares)
    assert both[:, 1].sum() == pytest.approx(0.03 + 10 * gpu.sum())  # GPU-bound from the first kernel on


def test_a_host_wait_drains_the_queue():
    """The host waits for the GPU after kernel 1 (nonzero's count copied to the host): the host had run ahead of the
    3 ms kernel, and issues kernel 2 only a gap after that kernel ends, at 6 ms instead of 3."""
    gpu = np.array([0.5, 3.0, 0.5, 0.5])
    waits = np.array([False, True, False, False])
    np.testing.assert_allclose(queue_shares(gpu, 1.0), [1.5, 3.5, 0.5, 0.5])  # end 6: the host ran ahead
    np.testing.assert_allclose(queue_shares(gpu, 1.0, waits), [1.5, 3.5, 1.5, 1.0])  # end 7.5
    both = queue_shares(np.stack([gpu, 2 * gpu], axis=1), 1.0, waits)
    np.testing.assert_allclose(both[:, 1], queue_shares(2 * gpu, 1.0, waits))
    np.testing.assert_allclose(queue_shares(gpu, 1.0, np.array([False, False, False, True])), [1.5, 3.5, 0.5, 0.5])


def _launch_by_launch(gpu: np.ndarray, gap: float, launches: np.ndarray, waits: np.ndarray) -> np.ndarray:
    """Each kernel's share from the queue of its launches one by one: kernel k is ``launches[k]`` launches of
    ``gpu[k] / launches[k]``, each issued ``gap`` after the one before, or after the GPU's end where the host waited."""
    shares, end, issued = np.zeros(len(gpu)), 0.0, 0.0
    for k, (g, count) in enumerate(zip(gpu, launches)):
        before = end
        for _ in range(int(count)):
            issued += gap
            end = max(end, issued) + g / count
        shares[k] = end - before
        if waits[k]:
            issued = end
    return shares


def test_a_kernel_of_many_launches_is_queued_launch_by_launch():
    """A Loop or Scan eager launches once per iteration is L back-to-back launches of w / L each: the closed form
    (the first or the last launch of each kernel sets the queue) is the queue run launch by launch."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        gpu = rng.choice([0.001, 0.02, 0.5, 3.0], n) * rng.uniform(0.5, 2.0, n)
        launches = rng.choice([1, 1, 2, 5, 40], n)
        waits = rng.random(n) < 0.2
        expected = _launch_by_launch(gpu, 0.03, launches, waits)
        np.testing.assert_allclose(queue_shares(gpu, 0.03, waits, launches), expected, rtol=1e-12, atol=1e-12)
        both = queue_shares(np.stack([gpu, 7 * gpu], axis=1), 0.03, waits, launches)
        np.testing.assert_allclose(both[:, 1], _launch_by_launch(7 * gpu, 0.03, launches, waits), rtol=1e-12,
                                   atol=1e-12)
    # 10,000 launches of a tiny body: the host's gap each, not one launch (0.03 ms for the whole loop before)
    assert queue_shares(np.array([0.5]), 0.03, launches=np.array([10_000])).sum() == pytest.approx(300 + 0.5 / 10_000)
    # a long body per iteration: the GPU's work, the host ahead of it after the first launch
    assert queue_shares(np.array([500.0]), 0.03, launches=np.array([10_000])).sum() == pytest.approx(500.03)


def _todays_queue(gpu: np.ndarray, gap: float) -> np.ndarray:
    """queue_shares before launch counts (one launch per kernel), for comparing to the bit."""
    issued = (np.arange(1, len(gpu) + 1, dtype=np.float64) * gap).reshape((-1,) + (1,) * (gpu.ndim - 1))
    done = np.cumsum(gpu, axis=0)
    end = done + np.maximum.accumulate(issued - (done - gpu), axis=0)
    return np.diff(end, axis=0, prepend=np.zeros((1,) + gpu.shape[1:]))


def test_one_launch_per_kernel_is_todays_queue_to_the_bit(predictor, example_work):
    """ResNet-18's kernels (one launch each) and NonZero's, whose host waits split the queue: the same floats."""
    assert not np.any(example_work.launches != 1)
    gpu, gap = predictor.model.overhead.gpu_ms(example_work.work_ms), predictor.model.overhead.gap_ms
    for g in (gpu, gpu[:, 0]):
        assert np.array_equal(queue_shares(g, gap, launches=np.ones(len(g))), _todays_queue(g, gap))
        assert np.array_equal(queue_shares(g, gap), _todays_queue(g, gap))
    assert np.array_equal(predictor.model.compose(example_work), _todays_queue(gpu, gap))
    graph = load_graph(REPO / "tests" / "data" / "eager_calls" / "nonzero-ts.onnx")
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    work = predictor.model.kernel_work(kernels, [resolve_device("a10g")], 1)
    assert work.host_waits.any() and not np.any(work.launches != 1)
    cuts = np.flatnonzero(work.host_waits[:-1]) + 1
    gpu = predictor.model.overhead.gpu_ms(work.work_ms)
    today = np.concatenate([_todays_queue(part, gap) for part in np.split(gpu, cuts)])
    assert np.array_equal(predictor.model.compose(work), today)


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


def test_fit_recovers_the_scale_of_a_known_overhead(example_work):
    """Targets computed from a known OverheadModel (not measurements): the fit must find it again."""
    truth = OverheadModel(scale=0.9, gap_ms=SHIPPED["gap_ms"])
    work = [example_work.work_ms[:, j] * size for j in range(3) for size in (1.0, 8.0)]
    fitted = fit_overhead(work, [truth.total_ms(w) for w in work], truth.gap_ms)
    assert fitted.scale == pytest.approx(0.9, rel=0.005) and fitted.gap_ms == truth.gap_ms


def test_power_factor_is_one_at_or_above_the_reference():
    assert float(power_factor(70.0, 0.75)) == pytest.approx((150 / 70) ** 0.75)
    np.testing.assert_array_equal(power_factor(np.array([REFERENCE_POWER_W, 250.0, 700.0]), 1.3), np.ones(3))
    assert float(power_factor(70.0, 0.0)) == 1.0


def test_low_power_exponent_grows_with_kernel_duration():
    assert low_power_exponent(5.0, 0.4) == pytest.approx(0.4)  # no duration term
    exponents = low_power_exponent(np.array([1e-3, 0.5, 1.0, 100.0]), 0.4, 0.1, np.log(0.5))
    assert exponents[0] == pytest.approx(0.4 + 0.1 * np.log1p(1e-3 / 0.5))
    assert exponents[1] == pytest.approx(0.4 + 0.1 * np.log(2.0))  # softplus(0) at the learned time
    assert exponents[3] == pytest.approx(0.4 + 0.1 * np.log1p(200.0))
    assert np.all(np.diff(exponents) > 0)


def test_the_shipped_kernel_model_computes_below_peak_only_on_low_power_boards():
    """The same T4, told it is a 250 W board, differs only in the power input: compute-bound work scales by
    the factor for its duration, memory-bound work does not move."""
    model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    assert 0.2 < model.power_exponent < 2.0 and 0 < model.duration_exponent < 1.0
    graph = load_graph(EXAMPLE)
    kernels = KernelBatch.from_specs(describe_kernels(graph, predict_partition(graph, "eager")).unique)
    t4 = resolve_device("t4")
    low = DeviceColumns.from_devices([t4] * len(kernels))
    high = DeviceColumns.from_devices([dataclasses.replace(t4, board_power_w=250.0)] * len(kernels))
    ratio = model.predict(kernels, low).work_ms / model.predict(kernels, high).work_ms
    compute, memory = roofline_ms(kernels, low)
    f = power_factor(70.0, model.low_power_exponent(compute))
    np.testing.assert_allclose(ratio[compute >= memory], f[compute >= memory], rtol=1e-4)
    np.testing.assert_allclose(ratio[f * compute <= memory], 1.0, rtol=1e-6)
    assert (compute >= memory).any() and (f * compute <= memory).any()
    assert len(set(np.round(f[compute >= memory], 4))) > 1  # longer kernels, larger factor


def test_infer_and_rank_say_when_a_board_computes_below_peak(predictor):
    short, long = predictor.model.kernel_model.low_power_exponent(np.array([0.1, 100.0]))
    low, high = float(power_factor(70.0, short)), float(power_factor(70.0, long))
    notes = [w for w in predictor.predict(EXAMPLE, gpu="t4").warnings if "70 W board" in w]
    assert len(notes) == 1 and f"{low:.2f}x (kernels of 0.1 ms at peak) to {high:.2f}x (100 ms) slower" in notes[0]
    assert 1.0 < low < high
    for gpu, mig in (("a10g", None), ("a100-80gb", "1g.10gb")):
        assert not any("W board" in w for w in predictor.predict(EXAMPLE, gpu=gpu, mig=mig).warnings)
    ranking = predictor.rank(EXAMPLE, gpus=["t4", "a10g", "p4", "a100-80gb/1g.10gb"])
    notes = [w for w in ranking.warnings if "low-power boards" in w]
    assert len(notes) == 1
    assert "t4 (70 W)" in notes[0] and "p4 (75 W)" in notes[0] and "a10g" not in notes[0] and "a100" not in notes[0]
    assert not any("low-power" in w for w in predictor.rank(EXAMPLE, gpus=["a10g", "h100-sxm"]).warnings)


def test_queue_envelope_gives_the_queue_total_at_any_issue_time_and_scale(predictor):
    """The few envelope vertices reproduce the full queue's total for every host time and GPU-time scale, on the
    kernels of a real graph."""
    graph = load_graph(EXAMPLE)
    kernels = describe_kernels(graph, predict_partition(graph, backend="eager"))
    device = resolve_device("a10g")
    work = predictor.model.kernel_work(kernels, [device]).work_ms[:, 0]
    envelope = queue_envelope(work)
    assert len(envelope) < len(work) / 2
    for gap in (0.0, 0.005, 0.02, 0.1):
        for scale in (0.5, 1.0, 2.0):
            assert queue_total(envelope, gap, scale) == pytest.approx(queue_shares(scale * work, gap).sum(), rel=1e-12)
