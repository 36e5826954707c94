"""Calibrated 90 % intervals: conformal bounds and coverage on real rows, the shipped calibration's lookups,
extrapolation flags, and the intervals infer/rank carry."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lilou.cli import main
from lilou.hardware import resolve_device
from lilou.plan.calibration import Band, Calibration
from lilou.plan.conformal import (conformal_bounds, coverage, covered, group_weights, log_residuals, median_width,
                                  symmetric_bounds, two_level_bounds)
from lilou.plan.extrapolation import RANGE_FEATURES, outside, range_key
from lilou.plan.intervals import device_tier
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


@pytest.fixture(scope="module")
def t4_linear_rows(datasets_dir):
    """The first 100 real NeuSight T4 linear rows of the test split, predicted by the shipped kernel model."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.data.neusight import load_kernels
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.kernel_model.inference import KernelModel

    data = build_dataset(load_kernels("test", ops=["linear"], devices=["t4"], data_dir=datasets_dir,
                                      limit_per_file=100))
    predicted = KernelModel.load(checkpoint_path(KERNEL_LATENCY)).predict(data.kernels, data.devices).latency_ms
    return predicted, data.latency_ms


def test_conformal_ranks_are_exact():
    # n = 20, alpha = 0.1: the ceil(21 * 0.05) = 2nd and ceil(21 * 0.95) = 20th smallest.
    assert conformal_bounds(np.arange(1.0, 21.0)) == (2.0, 20.0)
    # n = 100: the 6th and 96th smallest, whatever the order given.
    values = np.random.default_rng(0).permutation(np.arange(100.0))
    assert conformal_bounds(values) == (5.0, 95.0)
    with pytest.raises(ValueError, match="too few"):
        conformal_bounds(np.arange(18.0))  # ceil(19 * 0.95) = 19 > 18: unbounded


def test_symmetric_ranks_are_exact_and_cover_both_sides():
    # n = 20, coverage 0.9: the ceil(21 * 0.9) = 19th smallest |r|, on both sides of the estimate.
    residuals = np.r_[np.arange(1.0, 11.0), -np.arange(1.0, 11.0)]
    assert symmetric_bounds(residuals) == (-10.0, 10.0)
    assert symmetric_bounds(np.arange(1.0, 21.0)) == (-19.0, 19.0)
    with pytest.raises(ValueError, match="too few"):
        symmetric_bounds(np.arange(8.0))  # ceil(9 * 0.9) = 9 > 8
    # Four GPUs biased one way and a fifth the other: the one-sided bounds of the four miss the fifth entirely,
    # the symmetric band of the four covers it.
    four = np.r_[np.full(10, 0.1), np.full(10, 0.15), np.full(10, 0.05), np.full(10, 0.12)]
    fifth = np.full(10, -0.12)
    groups = np.repeat(["a", "b", "c", "d"], 10)
    lo, hi = conformal_bounds(four, weights=group_weights(groups))
    assert not ((fifth >= lo) & (fifth <= hi)).any()
    lo, hi = symmetric_bounds(four, weights=group_weights(groups))
    assert (lo, hi) == (-0.15, 0.15) and ((fifth >= lo) & (fifth <= hi)).all()


def test_two_level_bounds_pair_every_bias_with_every_spread():
    # GPU a: no bias, rows spread -1..1; GPU b: biased +2, no spread. Pooled |r| (symmetric, each GPU once) reaches
    # 2.0, b's bias. Two levels pair b's bias with a's spread too, the GPU a third GPU may be: 40 pairs of weight
    # 1/40 each, and the ceil(41 * 0.9) = 37th smallest |bias + spread| is 2 + 0.5 (of 3, 3, 2.5, 2.5 at the top).
    a = np.tile([-1.0, -0.5, 0.0, 0.5, 1.0], 2)
    residuals, groups = np.r_[a, np.full(10, 2.0)], np.repeat(["a", "b"], 10)
    assert symmetric_bounds(residuals, weights=group_weights(groups)) == (-2.0, 2.0)
    assert two_level_bounds(residuals, groups) == (-2.5, 2.5)
    # one GPU: its bias plus its own spread is its residuals, the symmetric band
    assert two_level_bounds(a, ["a"] * 10) == symmetric_bounds(a) == (-1.0, 1.0)
    with pytest.raises(ValueError, match="one group per residual"):
        two_level_bounds(a, ["a"] * 9)


def test_equal_weights_give_the_unweighted_bounds_and_groups_count_once():
    values = np.random.default_rng(1).normal(size=200)
    assert conformal_bounds(values, weights=np.full(200, 3.0)) == conformal_bounds(values)
    assert group_weights(["t4", "t4", "t4", "p4"]).tolist() == [1 / 3, 1 / 3, 1 / 3, 1.0]
    # One group of 190 rows at 0 and one of 10 rows at 5: weighted by group, the upper bound is in the small group.
    residuals = np.r_[np.zeros(190), np.full(10, 5.0)]
    groups = ["a"] * 190 + ["b"] * 10
    assert conformal_bounds(residuals)[1] == 5.0 and conformal_bounds(residuals, weights=group_weights(groups)) == (0, 5)


def test_coverage_on_real_rows_is_what_the_ranks_promise(t4_linear_rows):
    predicted, measured = t4_linear_rows
    assert len(measured) == 100
    residuals = log_residuals(predicted, measured)
    assert len(set(residuals.tolist())) == 100  # no ties: ranks 6..96 are exactly 91 rows
    lo, hi = conformal_bounds(residuals)
    assert coverage(predicted, measured, lo, hi) == pytest.approx(0.91, abs=1e-12)
    inside = covered(predicted, measured, lo, hi)
    assert inside.sum() == 91
    # The 9 rows outside are the 5 lowest and 4 highest residuals.
    order = np.argsort(residuals)
    assert set(np.flatnonzero(~inside)) == set(order[:5]) | set(order[-4:])
    # A band of [0, 0] covers only exact predictions: none of 100 real rows.
    assert coverage(predicted, measured, 0.0, 0.0) == 0.0
    assert median_width(lo, hi) == pytest.approx(math.exp(hi) - math.exp(lo))


SMALL = {"coverage": 0.9, "ranges": {"GA10x|fp32|gemm": {name: [0.0, 10.0] for name in RANGE_FEATURES}},
         "kernel": {"gemm|fp32|trained": {"lo": -0.1, "hi": 0.1}, "gemm|fp32|any": {"lo": -0.3, "hi": 0.2},
                    "gemm|fp32|arch_unseen": {"lo": -0.5, "hi": 0.4}, "elementwise|fp32|any": {"lo": -0.2, "hi": 0.2},
                    "gemm|bf16|any": {"lo": -1.0, "hi": 2.0}},
         "extrapolated": {"gemm": {"lo": -0.6, "hi": 0.9}}, "e2e": {"lo": -0.1, "hi": 0.15},
         "kernel_model": {"fingerprint": "x", "trained_on": ["t4"]}}


def test_lookup_falls_back_from_tier_to_pool_and_widens_when_extrapolated():
    calibration = Calibration(SMALL)
    assert calibration.kernel_band("gemm", "fp32", "trained") == Band(-0.1, 0.1)
    assert calibration.kernel_band("gemm", "fp32", "arch_seen") == Band(-0.3, 0.2)   # no arch_seen pool: any
    assert calibration.kernel_band("gemm", "fp32", "arch_unseen") == Band(-0.5, 0.4)
    assert calibration.kernel_band("gemm", "fp32", "trained", extrapolated=True) == Band(-0.6, 0.9)
    # No FP8 GEMM residual at all: the widest GEMM band, marked uncalibrated.
    assert calibration.kernel_band("gemm", "fp8", "arch_seen") == Band(-1.0, 2.0, calibrated=False)
    # Kernel kinds without bands (the fallback's) use the elementwise family.
    assert calibration.kernel_band("memory", "fp32", "arch_seen") == Band(-0.2, 0.2)


def test_an_extrapolated_band_is_at_least_the_widest_of_its_family_and_dtype():
    """The shipped extrapolated pools come from two folds and are narrower than the in-range bands (softmax +-0.068
    against the arch_seen +-0.599): the hull with the pool left an extrapolated FP32 softmax, elementwise or layer
    norm kernel at its in-range band, and a convolution with no pool at it too. An extrapolated band is now at least
    the widest band of its family and dtype over every tier, and the pool's where it is wider."""
    narrow = dict(SMALL, extrapolated={"gemm": {"lo": -0.05, "hi": 0.05}})
    calibration = Calibration(narrow)
    assert calibration.kernel_band("gemm", "fp32", "trained", extrapolated=True) == Band(-0.5, 0.4)
    assert calibration.kernel_band("gemm", "fp32", "trained", extrapolated=False) == Band(-0.1, 0.1)
    shipped = Calibration.shipped()
    for family in ("softmax", "elementwise", "layernorm", "gemm", "conv"):
        widest = shipped.widest(family, "fp32")
        for tier in ("trained", "arch_seen", "arch_unseen"):
            band = shipped.kernel_band(family, "fp32", tier, extrapolated=True)
            assert band.lo <= widest.lo and band.hi >= widest.hi
    assert shipped.kernel_band("softmax", "fp32", "trained", extrapolated=True) == \
        Band(shipped.data["kernel"]["softmax|fp32|arch_seen"]["lo"], shipped.data["kernel"]["softmax|fp32|arch_seen"]["hi"])


def test_transposed_convolutions_have_their_own_band_or_the_convolutions_one():
    """A calibration with residuals of transposed convolutions gives them their band; an older file without any
    gives them the convolutions' band, not the elementwise fallback's."""
    conv = {"conv|fp32|arch_unseen": {"lo": -0.5, "hi": 0.5}, "conv|fp32|any": {"lo": -0.5, "hi": 0.5}}
    older = Calibration(dict(SMALL, kernel={**SMALL["kernel"], **conv}))
    assert older.kernel_band("conv_transposed", "fp32", "arch_seen") == Band(-0.5, 0.5)
    assert older.pooled_band("conv_transposed", "fp32") == Band(-0.5, 0.5)
    own = {"conv_transposed|fp32|arch_unseen": {"lo": -0.8, "hi": 0.8}, "conv_transposed|fp32|any": {"lo": -0.8, "hi": 0.8}}
    shipped = Calibration(dict(SMALL, kernel={**SMALL["kernel"], **conv, **own}))
    assert shipped.kernel_band("conv_transposed", "fp32", "trained") == Band(-0.8, 0.8)
    assert shipped.kernel_band("conv", "fp32", "trained") == Band(-0.5, 0.5)
    # FP16 transposed convolutions: no residual of their own, the family's widest band, uncalibrated
    assert shipped.kernel_band("conv_transposed", "fp16", "arch_unseen") == Band(-0.8, 0.8, calibrated=False)


def test_sparse_dtype_falls_back_to_its_single_gpu_and_memory_bound_pools():
    """A family and dtype with one held-out GPU (no ``any`` pool) takes the hull of its one-GPU band and its dtype's
    memory-bound pool, calibrated; with neither, the family's widest band, uncalibrated."""
    data = dict(SMALL, kernel={**SMALL["kernel"], "layernorm|fp16|one_gpu": {"lo": -1.5, "hi": 1.5},
                               "layernorm|fp32|any": {"lo": -0.3, "hi": 0.3}, "softmax|fp32|any": {"lo": -0.2, "hi": 0.3},
                               "memory-bound|fp16|any": {"lo": -1.6, "hi": 1.2},
                               "memory-bound|bf16|any": {"lo": -1.7, "hi": 1.7}})
    calibration = Calibration(data)
    assert calibration.kernel_band("layernorm", "fp16", "arch_unseen") == Band(-1.6, 1.5)
    assert calibration.kernel_band("softmax", "bf16", "arch_seen") == Band(-1.7, 1.7)  # softmax: class pool alone
    assert calibration.kernel_band("layernorm", "fp8", "arch_seen") == Band(-1.5, 1.5, calibrated=False)


def _pool(family: str, dtype: str, gpus: list[str], residuals: list[float]):
    from lilou.plan.fit import Residuals

    n = len(residuals)

    def col(value):
        return np.array(value if isinstance(value, list) else [value] * n, dtype=object)

    return Residuals(residual=np.asarray(residuals, dtype=float), predicted_ms=np.ones(n), measured_ms=np.exp(residuals),
                     family=col(family), dtype=col(dtype), tier=col("arch_unseen"), group=col(gpus), gpu=col(gpus),
                     source=col("test"), extrapolated=np.zeros(n, dtype=bool))


def test_kernel_bands_build_one_gpu_and_memory_bound_pools():
    from lilou.plan.fit import Residuals, kernel_bands

    ramp = np.linspace(-1.0, 1.0, 60).tolist()
    pools = Residuals.concat([_pool("layernorm", "fp16", ["a40"] * 60, ramp),
                              _pool("elementwise", "fp16", ["a100"] * 60, [0.5 * r for r in ramp]),
                              _pool("gemm", "fp16", ["a40"] * 60, ramp)])
    bands = kernel_bands(pools)
    # one GPU each: no ``any`` band, a one-GPU band of at least 50 rows instead
    assert "layernorm|fp16|any" not in bands and bands["layernorm|fp16|one_gpu"]["groups"] == ["a40"]
    assert bands["elementwise|fp16|one_gpu"]["hi"] == pytest.approx(0.5 * bands["layernorm|fp16|one_gpu"]["hi"])
    # the memory-bound families of FP16 pooled: two GPUs, 120 rows; GEMMs are not memory-bound
    assert bands["memory-bound|fp16|any"]["groups"] == ["a100", "a40"] and bands["memory-bound|fp16|any"]["n"] == 120
    assert not any(key.startswith("compute") for key in bands) and "gemm|fp16|one_gpu" in bands


def test_band_method_is_selectable_and_recorded():
    from lilou.plan.fit import Residuals, band

    a = np.tile(np.linspace(-1.0, 1.0, 5), 6).tolist()
    pool = Residuals.concat([_pool("gemm", "fp16", ["a"] * 30, a), _pool("gemm", "fp16", ["b"] * 30, [2.0] * 30)])
    assert (band(pool)["lo"], band(pool)["hi"]) == (-2.0, 2.0)
    assert (band(pool, method="two_level")["lo"], band(pool, method="two_level")["hi"]) == (-2.5, 2.5)
    with pytest.raises(ValueError, match="not one of symmetric, two_level"):
        band(pool, method="sum")


def test_extrapolation_flags_against_measured_ranges():
    features = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 11.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0]])
    flags = outside(features, ["gemm", "gemm", "conv"], "GA10x", "fp32", SMALL["ranges"])
    assert flags.tolist() == [False, True, True]  # inside; bytes above the range; no GA10x FP32 conv row at all
    assert outside(features[:1], ["gemm"], "Ada", "fp32", SMALL["ranges"]).tolist() == [True]
    assert range_key("Ada", "bf16", "gemm") == "Ada|bf16|gemm"


def test_tiers_of_devices():
    trained = ["a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb"]
    assert device_tier(resolve_device("t4"), trained) == "trained"
    # no source measured a slice: the farthest tier, also for a slice of a trained GPU (session 41; was arch_seen)
    assert device_tier(resolve_device("a100-80gb", "1g.10gb"), trained) == "arch_unseen"
    assert device_tier(resolve_device("a100-pcie-40gb", "1g.5gb"), trained) == "arch_unseen"
    assert device_tier(resolve_device("a100-sxm4-80gb"), trained) == "arch_seen"
    assert device_tier(resolve_device("l40s"), trained) == "arch_unseen"
    assert device_tier(resolve_device("h100-sxm"), trained) == "arch_unseen"


def test_shipped_calibration_is_for_the_shipped_model():
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.plan.calibration import checkpoint_fingerprint

    calibration = Calibration.load()
    assert calibration.coverage == 0.9
    assert calibration.fingerprint == checkpoint_fingerprint(str(checkpoint_path(KERNEL_LATENCY)))
    assert calibration.e2e.lo < 0 < calibration.e2e.hi
    for family in ("gemm", "conv", "elementwise", "layernorm", "softmax"):
        assert calibration.kernel_band(family, "fp32", "arch_unseen").width >= \
            calibration.kernel_band(family, "fp32", "trained").width > 0


def infer_json(capsys, *argv):
    assert main(["infer", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_infer_carries_intervals_and_extrapolation(capsys):
    t4 = infer_json(capsys, EXAMPLE, "--gpu", "t4")
    lo, hi = t4["interval_ms"]
    assert 0 < lo < t4["latency_ms"] < hi
    assert all(k["interval_ms"][0] <= k["interval_ms"][1] and isinstance(k["extrapolated"], bool) for k in t4["kernels"])
    fallback = [k for k in t4["kernels"] if k["type"] == "memory_fallback"]
    assert fallback and all(k["extrapolated"] for k in fallback)  # no measured kind: always extrapolated
    share = sum(k["latency_ms"] for k in t4["kernels"] if k["extrapolated"]) / t4["latency_ms"]
    assert t4["extrapolated_share"] == pytest.approx(share, abs=1e-3)
    # An architecture with no measured GPU gets an interval at least as wide, relative to its estimate (here the
    # end-to-end band's: the L40S waits for the host's launches, and its kernels' wider bands do not reach the total).
    l40s = infer_json(capsys, EXAMPLE, "--gpu", "l40s")
    assert (l40s["interval_ms"][1] - l40s["interval_ms"][0]) / l40s["latency_ms"] >= \
        (hi - lo) / t4["latency_ms"] - 1e-3


def test_a_launch_bound_device_is_bounded_by_its_launches_not_by_its_kernels_bands():
    """ResNet-18 in FP8 at batch 1: the whole A100 and H100 wait for the host's launches (GPU work 0.1-0.3 ms of
    2.05). Each extrapolated kernel's band (about 5x wide) was put on its share, mostly the launch wait, giving
    [0.45, 10.03] ms on the A100, an upper bound above that of its 1g.10gb slice (9.77): a plan then chose the
    slice over the whole GPU. The bands are put on the GPU work and the queue run again, so the launches hold the
    bound: since session 41 at the launch gap's range (it was the end-to-end band around the total), and a slice's
    bound is never below its whole GPU's."""
    from lilou.api import Predictor
    from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE

    gpus = ["a100-sxm4-80gb", "a100-sxm4-80gb/1g.10gb", "h100-sxm", "h100-sxm/1g.10gb"]
    entries = {e.device: e for e in Predictor().rank(EXAMPLE, gpus=gpus, precision="fp8")}
    for whole in ("a100-sxm4-80gb", "h100-sxm"):
        entry = entries[whole]
        assert entry.gpu_work_ms < 0.2 * entry.latency_ms
        assert LAUNCH_GAP_RANGE[0] * 0.95 * entry.latency_ms <= entry.interval_ms[0]
        assert entry.interval_ms[1] <= 1.05 * LAUNCH_GAP_RANGE[1] * entry.latency_ms
        assert entry.interval_ms[1] <= entries[f"{whole}/1g.10gb"].interval_ms[1]


def test_launch_waits_carry_the_launch_gaps_range_and_never_fall_below_the_launch_floor(zoo_onnx):
    """ResNet-50 in FP16 at batch 32 on an H100: 174 launches at 30.2 us, 5.26 ms, with GPU work of 2 ms. Its interval
    was the end-to-end band around the estimate, [4.35, 6.35] ms, narrower than a measured A100's, while a host 33 %
    slower gives 6.97 ms: the launch gap (NeuSight's hosts, one fitted constant) carried no uncertainty, and the lower
    bound fell below the model's own launch floor (174 x 30.2 us = 5.25 ms). The waits now take the gap's range
    (the spread of the five hosts measured), so the bounds are the queue's at its ends; a gap given takes one host's
    call-to-call spread, and a warning says so."""
    from lilou.api import Predictor
    from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE, LAUNCH_GAP_RANGE_GIVEN

    model = zoo_onnx("resnet50", batch=32)
    predictor = Predictor()
    gap = predictor.model.overhead.gap_ms
    h100 = predictor.predict(model, "h100-sxm", precision="fp16")
    launches = len(h100.kernels)
    assert launches == 174 and sum(k.host_wait_ms for k in h100.kernels) > 0.5 * h100.latency_ms
    lo, hi = h100.interval_ms
    assert lo >= launches * gap * LAUNCH_GAP_RANGE[0] - 1e-3    # the launch floor at the fastest host of the range
    assert hi >= launches * gap * LAUNCH_GAP_RANGE[1] - 1e-3    # ... and at the slowest: 10.03 ms
    assert hi / h100.latency_ms > 1.8
    assert any("waiting for the host's kernel launches: its 90 % interval prices the launch gap from 25.4 to 57.6 us"
               in w for w in h100.warnings)
    given = Predictor(launch_gap_ms=0.040).predict(model, "h100-sxm", precision="fp16")
    low, high = LAUNCH_GAP_RANGE_GIVEN
    assert given.interval_ms[0] >= launches * 0.040 * low - 1e-3       # never below its launch floor at the range's end
    assert given.interval_ms[1] >= launches * 0.040 * high - 1e-3      # (a given gap held exact collapsed it: 6.96-6.96)
    assert any(w.startswith("the launch gap given (40 us per kernel) is priced from 26.2 to 50.9 us in the 90 % intervals")
               for w in given.warnings)
    assert not any("prices the launch gap from" in w for w in given.warnings)


def test_a_kernels_interval_puts_its_band_on_its_gpu_work_not_on_its_launch_wait(zoo_onnx):
    """DARTS at batch 64 on an M40 waits for the host's launches; a convolution of 0.054 ms, 0.030 of it waiting,
    had the interval 0.054 x e^+-0.559, the wait scaled with the convolution's band (the kernels' upper bounds
    added up to 6.22 ms against the model's 4.26). A kernel's interval is now its wait at the launch gap's range
    plus its GPU work at its band, as end to end."""
    from lilou.api import Predictor
    from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE

    prediction = Predictor().predict(zoo_onnx("darts-0", batch=64), "m40-24gb")
    waiting = [k for k in prediction.kernels if k.host_wait_ms >= 0.5 * k.latency_ms]
    assert waiting
    for k in prediction.kernels:
        assert k.interval_ms[0] >= k.host_wait_ms * LAUNCH_GAP_RANGE[0] - 1e-5
        assert k.interval_ms[1] >= k.host_wait_ms * LAUNCH_GAP_RANGE[1] - 1e-5
    for k in waiting:  # the GPU work's band (>= e^0.559 wide either way for these extrapolated kernels) on the rest
        work = k.latency_ms - k.host_wait_ms
        assert k.interval_ms[0] <= k.host_wait_ms * LAUNCH_GAP_RANGE[0] + work * math.exp(-0.559) + 1e-5
        assert k.interval_ms[0] > k.latency_ms * math.exp(-0.559)


def test_bounds_keep_the_order_of_boards_and_slices_whatever_was_asked_for(zoo_onnx):
    """ResNet-50 at batch 1 waits for the host's launches on both 40 GB A100 boards (5.27 ms each), but the
    SXM4 board's kernel bands (an architecture seen, this board not measured) are wider than the measured PCIe
    board's: its upper bound was 7.09 ms against 6.37, and a plan by upper bound chose the board with fewer
    resources. A device's upper bound is now at most that of every device it dominates and its lower bound at
    least that of every device dominating it, and does not depend on which other devices were asked for."""
    from itertools import permutations

    from lilou.api import Predictor
    from lilou.latency.composition.monotone import dominates

    model = zoo_onnx("resnet50", batch=1)
    predictor = Predictor()
    sxm, pcie = predictor.predict_many(model, ["a100-sxm4-40gb", "a100-pcie-40gb"])
    assert sxm.latency_ms == pytest.approx(pcie.latency_ms, rel=1e-6)
    assert sxm.interval_ms[1] <= pcie.interval_ms[1] and sxm.interval_ms[0] <= pcie.interval_ms[0]
    alone = predictor.predict(model, "a100-sxm4-40gb")
    ranking = {entry.device: entry for entry in predictor.rank(model)}
    assert alone.interval_ms == sxm.interval_ms == ranking["a100-sxm4-40gb"].interval_ms
    devices = [resolve_device(name) for name in ranking]
    inverted = [(big.name, small.name) for big, small in permutations(devices, 2) if dominates(big, small)
                and (ranking[big.name].interval_ms[1] > ranking[small.name].interval_ms[1]
                     or ranking[big.name].interval_ms[0] > ranking[small.name].interval_ms[0])]
    assert inverted == []


def test_rank_table_shows_intervals(capsys):
    assert main(["rank", EXAMPLE, "--gpus", "t4,l40s"]) == 0
    out = capsys.readouterr().out
    assert "90 % interval" in out and "extrapolated" in out


def test_infer_table_prints_the_extrapolated_share(capsys):
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "90 % interval" in out and "% of the predicted time" in out.split("extrapolated:")[1]


def _grouped_convolutions(path) -> dict[str, int]:
    """{node: input channels per group} of every convolution with more than one group."""
    from lilou.graph.dag import load_graph

    dag = load_graph(path).dag
    return {n: dag.nodes[n]["inputs"][1].shape[1] for n in dag.nodes
            if dag.nodes[n]["op"] == "Conv" and dag.nodes[n]["attributes"].get("group", 1) > 1}


def test_depthwise_convolutions_go_to_the_memory_bound_fallback(zoo_onnx, capsys):
    """No source measured a grouped convolution, and a depthwise one is memory-bound where every measured one is
    compute-bound: MobileNetV2's 17 depthwise convolutions are priced as memory passes, flagged and named."""
    path = zoo_onnx("mobilenetv2", batch=1)
    grouped = _grouped_convolutions(path)
    assert len(grouped) == 17 and set(grouped.values()) == {1}  # one input channel per group: depthwise
    result = infer_json(capsys, str(path), "--gpu", "t4")
    depthwise = [k for k in result["kernels"] if set(k["nodes"]) & set(grouped)]
    assert len(depthwise) == 17
    assert all(k["extrapolated"] and k["type"] == "memory_fallback" for k in depthwise)
    warning = next(w for w in result["warnings"] if "memory-bound fallback" in w)
    assert "Conv (depthwise)" in warning
    assert not any("grouped convolutions" in w for w in result["warnings"])
    # priced as a pass over its bytes at the bandwidth elementwise kernels reach, never faster than DRAM
    t4_bandwidth_gbs = 320.0
    for k in depthwise:
        dram_ms = k["bytes"] / (t4_bandwidth_gbs * 1e6)
        assert dram_ms < k["latency_ms"] < 1.5 * dram_ms + 0.05


def test_grouped_convolutions_are_flagged_and_warned(zoo_onnx, capsys):
    """RegNetY-400MF's 16 grouped convolutions (8 input channels per group) stay on the convolution model,
    beyond its data: flagged extrapolated, and the warning gives their share of the time."""
    path = zoo_onnx("regnety-400mf", batch=1)
    grouped = _grouped_convolutions(path)
    assert len(grouped) == 16 and set(grouped.values()) == {8}
    result = infer_json(capsys, str(path), "--gpu", "t4")
    kernels = [k for k in result["kernels"] if set(k["nodes"]) & set(grouped)]
    assert len(kernels) == 16
    assert all(k["extrapolated"] and k["type"] != "memory_fallback" for k in kernels)
    share = 100 * sum(k["latency_ms"] for k in kernels) / result["latency_ms"]
    warning = next(w for w in result["warnings"] if "grouped convolutions" in w)
    assert warning.startswith("16 grouped convolutions: no source measured one")
    assert float(warning.split(": ")[-1].split(" %")[0]) == pytest.approx(share, abs=0.06)
    plain = infer_json(capsys, EXAMPLE, "--gpu", "t4")  # ResNet-18: every convolution has one group
    assert not any("grouped convolutions" in w or "depthwise" in w for w in plain["warnings"])


def test_the_benchmark_and_the_calibration_pool_the_same_residuals():
    """make calibrate and make bench-intervals pool through one function: with the tensor-core model shipped, its
    folds' residuals stand for every convolution and the non-FP32 GEMMs, the NeuSight-only model's convolutions
    and the table's FP32 rows are left out (the benchmark kept the NeuSight convolutions too before session 33)."""
    from lilou.plan.fit import _residuals, pooled_kernel_residuals

    def rows(source, pairs):
        family, dtype = zip(*pairs)
        return _residuals([1.0] * len(pairs), [1.1] * len(pairs), list(family), list(dtype), "arch_unseen", "g", "g",
                          source, False)

    neusight = rows("neusight", [("gemm", "fp32"), ("conv", "fp32"), ("softmax", "fp32")])
    table = rows("table", [("gemm", "fp32"), ("gemm", "bf16"), ("conv", "int8"), ("layernorm", "fp16")])
    tensor = rows("tensor", [("gemm", "bf16"), ("conv", "fp32"), ("conv", "int8")])
    pooled = pooled_kernel_residuals(neusight, table, tensor)
    assert sorted(zip(pooled.source, pooled.family, pooled.dtype)) == [
        ("neusight", "gemm", "fp32"), ("neusight", "softmax", "fp32"), ("table", "layernorm", "fp16"),
        ("tensor", "conv", "fp32"), ("tensor", "conv", "int8"), ("tensor", "gemm", "bf16")]
    alone = pooled_kernel_residuals(neusight, table, None)
    assert sorted(zip(alone.source, alone.family, alone.dtype)) == [
        ("neusight", "conv", "fp32"), ("neusight", "gemm", "fp32"), ("neusight", "softmax", "fp32"),
        ("table", "conv", "int8"), ("table", "gemm", "bf16"), ("table", "layernorm", "fp16")]


def test_a_device_on_which_every_kernel_is_extrapolated_says_so(zoo_onnx):
    """H100 rows are held back from the kernel table: BERT-base in strict FP32 there is extrapolated kernel by
    kernel (share 1.0), and only the widened interval said so in the JSON."""
    from lilou.api import Predictor

    path = zoo_onnx("bert-base", batch=8, seq=128)
    predictor = Predictor()
    line = ("h100-sxm: every kernel of this model is extrapolated (no measured kernel of its kinds lies in range on "
            "GPUs of that class, dtype and family): the prediction rests on other GPUs' measurements, and its 90 % "
            "interval is widened for it")
    hopper = predictor.predict(path, gpu="h100-sxm", precision="fp32", tf32="off")
    assert hopper.extrapolated_share == 1.0 and line in hopper.warnings
    measured = predictor.predict(path, gpu="a100-pcie-40gb", precision="fp32", tf32="off")
    assert measured.extrapolated_share < 1.0 and not any("every kernel of this model" in w for w in measured.warnings)
    ranked = predictor.rank(path, gpus=["h100-sxm", "a100-pcie-40gb"], precision="fp32", tf32="off")
    assert line in ranked.warnings


def test_the_extrapolated_warning_says_widened_only_where_the_interval_was(zoo_onnx):
    """ResNet-50 in FP32 at batch 8 on an H100-SXM: every kernel is extrapolated, and the GPU waits for the host
    most of the time. The warning said "its 90 % interval is widened for it" on every such device, also where the
    wider kernel bands went on GPU work hidden behind the launches and the interval was the in-range one
    (ResNet-50 FP16 at batch 32 on an H100: [4.35, 6.35] ms, the narrowest band Lilou gives). It says what happened."""
    from lilou.caveats import extrapolated_warning

    devices = [resolve_device("h100-sxm"), resolve_device("m40-24gb")]
    lines = extrapolated_warning(devices, [1.0, 1.0], widened=np.array([False, True]), wait_shares=np.array([0.62, 0.1]))
    head = ("every kernel of this model is extrapolated (no measured kernel of its kinds lies in range on GPUs of that "
            "class, dtype and family): the prediction rests on other GPUs' measurements")
    assert lines == [f"m40-24gb: {head}, and its 90 % interval is widened for it",
                     f"h100-sxm: {head}; its kernels' 90 % intervals are widened for it, the model's is not: the wider "
                     "bands go on the GPU work only, which the host's kernel launches hide (62 % of the estimate is "
                     "waiting for them; the interval carries the launch gap's range instead), or they are no wider than "
                     "the in-range bands (docs/intervals.md)"]
    from lilou.api import Predictor

    predictor = Predictor()
    prediction = predictor.predict(zoo_onnx("resnet50", batch=8), "h100-sxm", precision="fp16")
    whole = [w for w in prediction.warnings if "every kernel of this model is extrapolated" in w]
    assert prediction.extrapolated_share == 1.0 and len(whole) == 1



def test_the_every_kernel_warning_needs_every_kernel_extrapolated(zoo_onnx):
    """ResNet-50 in FP8 at batch 64 on an H100-SXM's 1g.10gb slice: 120 of its 121 kernels are extrapolated, its
    classifier GEMM is in range (share 0.9996). The warning said "every kernel of this model is extrapolated" from a
    share of 0.9995 on; now from the whole share, as on the P4 beside it (no FP8 runtime: every kernel)."""
    from lilou.api import Predictor

    predictor = Predictor()
    path = zoo_onnx("resnet50", batch=64)
    prediction = predictor.predict(path, "h100-sxm/1g.10gb", precision="fp8")
    in_range = [k.ops for k in prediction.kernels if not k.extrapolated]
    assert (len(prediction.kernels), in_range, prediction.extrapolated_share) == (121, [("Reshape", "Gemm")], 0.9996)
    assert not any("every kernel of this model is extrapolated" in w for w in prediction.warnings)
    ranked = predictor.rank(path, gpus=["h100-sxm/1g.10gb", "p4"], precision="fp8")
    assert [(e.device, e.extrapolated_share) for e in ranked] == [("h100-sxm/1g.10gb", 0.9996), ("p4", 1.0)]
    assert [w for w in ranked.warnings if "every kernel of this model is extrapolated" in w] == [
        "p4: every kernel of this model is extrapolated (no measured kernel of its kinds lies in range on GPUs of that "
        "class, dtype and family): the prediction rests on other GPUs' measurements, and its 90 % interval is widened "
        "for it"]

def test_the_launch_gaps_range_is_the_training_hosts_spread(datasets_dir):
    """LAUNCH_GAP_RANGE is read from the rows the gap is: per training host, the 5th and 95th percentiles of the
    floor-bound elementwise calls' times; their hull over the shipped gap. LAUNCH_GAP_RANGE_GIVEN: the same
    percentiles over each host's median, hulled."""
    from lilou.latency.composition.calibrate import OPS, table_costs
    from lilou.data.neusight import load_kernels
    from lilou.latency.composition.overhead import (FLOOR_BOUND_MS, LAUNCH_GAP_PERCENTILES, LAUNCH_GAP_RANGE,
                                                    LAUNCH_GAP_RANGE_GIVEN)
    from lilou.api import Predictor

    table = load_kernels("train", ops=[op for op, (family, _) in OPS.items() if family == "elementwise"],
                         devices=Predictor().model.kernel_model.config["trained_on"], data_dir=datasets_dir)
    bandwidth = np.array([resolve_device(g).memory_bandwidth_gbs for g in table.gpu])
    costs = table_costs(table)
    floor_bound = (costs[:, 1] + costs[:, 2]).astype(np.float64) / (bandwidth * 1e6) < FLOOR_BOUND_MS
    spans = np.array([np.percentile(table.latency_ms[floor_bound & (table.gpu == g)], LAUNCH_GAP_PERCENTILES)
                      for g in np.unique(table.gpu)])
    gap = Predictor().model.overhead.gap_ms
    assert len(spans) == 5
    assert pytest.approx((spans[:, 0].min() / gap, spans[:, 1].max() / gap), rel=1e-6) == LAUNCH_GAP_RANGE
    medians = np.array([np.median(table.latency_ms[floor_bound & (table.gpu == g)]) for g in np.unique(table.gpu)])
    assert pytest.approx(((spans[:, 0] / medians).min(), (spans[:, 1] / medians).max()), rel=1e-6) == \
        LAUNCH_GAP_RANGE_GIVEN


def test_kernels_priced_as_fp16_take_the_fp16_band(zoo_onnx):
    """ResNet-50 in FP8 on an A100: its convolutions are priced as FP16 kernels (no FP8 tensor cores, no runtime runs
    weight-only convolutions), and a warning says so, but their band was the format's: no FP8 convolution residual,
    so the widest convolution band (INT8's, +-1.23 against FP16's +-0.83), and a second warning said "no held-out
    measurements of conv fp8". The band follows the path priced; on an H100 (FP8 tensor cores) it stays FP8's."""
    from lilou.api import Predictor
    from lilou.latency.kernel_model.precision import band_precisions, kernel_precisions, precision_path

    predictor = Predictor()
    model = zoo_onnx("resnet50", batch=32)
    a100 = predictor.predict(model, "a100-pcie-40gb", precision="fp8")
    assert any("priced as FP16 kernels" in w and "does not cover the upcast's cost" in w for w in a100.warnings)
    assert not any("no held-out measurements of conv fp8" in w for w in a100.warnings)
    kernels = predictor._prepared(model, None, None).kernels
    devices = [resolve_device("a100-pcie-40gb"), resolve_device("h100-sxm"), resolve_device("t4")]
    paths = [precision_path("fp32", d, "fp8") for d in devices]
    bands = band_precisions(kernel_precisions(kernels.unique, paths), kernels.unique, devices)
    conv = np.array([spec.family == "conv" for spec in kernels.unique])
    assert set(bands[conv, 0]) == {"fp16"} and set(bands[conv, 1]) == {"fp8"} and set(bands[conv, 2]) == {"fp16"}


def test_a_mig_slice_gets_the_farthest_tiers_band_and_a_warning(zoo_onnx):
    """BERT-base at batch 64 on a 1g.5gb slice of the measured A100-PCIE-40GB: 753 ms with [600, 945] ms (+-25 %),
    the band of whole Pascal boards held out from each other, and no warning, though no source measured a slice."""
    from lilou.api import Predictor

    model = zoo_onnx("bert-base", batch=64, seq=128)
    predictor = Predictor()
    sliced = predictor.predict(model, "a100-pcie-40gb", mig="1g.5gb")
    line = ("a100-pcie-40gb/1g.5gb: no source measured a MIG slice; the 90 % interval takes the band of an architecture "
            "with no measured GPU (the widest tier) and is not validated against any slice's measurements "
            "(docs/intervals.md)")
    assert line in sliced.warnings
    whole = predictor.predict(model, "a100-pcie-40gb")
    assert not any("MIG slice" in w for w in whole.warnings)
    assert sliced.interval_ms[1] / sliced.latency_ms > whole.interval_ms[1] / whole.latency_ms
