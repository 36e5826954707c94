"""How measured kernels scale between two GPUs (lilou.latency.evaluation.cross_gpu): pairing rules on hand rows,
and what Vidur's real A100 / A40 rows show (docs/kernel_model.md, "Session 25")."""
from __future__ import annotations

import pytest

from lilou.latency.evaluation.cross_gpu import op_scalings, paired_times, peak_shares, spec_ratios, table_rows


def test_pairs_join_op_family_and_shape_and_keep_the_first_repeat():
    a = [("add", "elementwise", "s1", 1.0), ("add", "elementwise", "s1", 9.0), ("add", "elementwise", "s2", 2.0),
         ("rope", "elementwise", "s1", 4.0)]
    b = [("add", "elementwise", "s1", 3.0), ("add", "elementwise", "s1", 7.0), ("add", "elementwise", "s3", 5.0),
         ("rope", "norm", "s1", 8.0)]
    assert paired_times(a, b) == {("add", "elementwise"): [(1.0, 3.0)]}


def test_scalings_drop_short_pairs_and_thin_ops():
    pairs = {("add", "elementwise"): [(0.1, 0.3)] * 19 + [(0.2, 0.8), (0.01, 5.0)],
             ("rope", "elementwise"): [(0.1, 0.2)] * 5}
    (only,) = op_scalings(pairs, min_ms=0.05, min_pairs=20)
    assert (only.op, only.pairs) == ("add", 20)
    assert only.median_ratio == pytest.approx(3.0)
    assert op_scalings(pairs, min_ms=0.05, min_pairs=21) == []


def test_spec_ratios_of_a100_over_a40():
    ratios = spec_ratios("a100-sxm4-80gb", "a40")
    assert ratios["bandwidth"] == pytest.approx(2039 / 696)
    assert ratios["sm_throughput"] == pytest.approx(108 * 1410 / (84 * 1740))


def test_vidur_custom_kernels_scale_below_bandwidth(datasets_dir):
    """PyTorch's residual add moves from the A100 to the A40 by the bandwidth ratio (2.93); vLLM/sarathi's RMSNorm,
    rotary embedding and SiLU-and-mul kernels by 1.6-1.8x only: they are not bandwidth-bound on the A100."""
    families = ("elementwise", "norm")
    pairs = paired_times(table_rows("vidur", "a100-sxm4-80gb", families, data_dir=str(datasets_dir)),
                         table_rows("vidur", "a40", families, data_dir=str(datasets_dir)))
    scaling = {s.op: s.median_ratio for s in op_scalings(pairs)}
    bandwidth = spec_ratios("a100-sxm4-80gb", "a40")["bandwidth"]
    assert scaling["add"] == pytest.approx(bandwidth, rel=0.1)
    for op in ("attn_rope", "input_layernorm", "post_attention_layernorm", "mlp_act"):
        assert 1.4 < scaling[op] < 2.0, op


def test_large_bf16_gemms_reach_different_shares_of_their_spec_peak(datasets_dir):
    """AIConfigurator's BF16 GEMMs with M, N, K >= 4096 reach 0.56 (L40S) to 0.84 (RTX PRO 6000) of the spec
    peak; priced at the other GPUs' mean share, the L40S is 21.4 % off: a spec-peak model's floor on these rows."""
    shares = {s.gpu: s for s in peak_shares("aiconfigurator", "bf16", "bf16_tensor", data_dir=str(datasets_dir))}
    assert set(shares) == {"a100-sxm4-80gb", "b200", "b300", "gb200", "gb300", "h200", "l40s",
                           "rtx-pro-6000-blackwell-server"}
    assert shares["b200"].rows == 2061
    assert shares["l40s"].median_share == pytest.approx(0.5556, abs=5e-4)
    assert shares["rtx-pro-6000-blackwell-server"].median_share == pytest.approx(0.8431, abs=5e-4)
    assert shares["l40s"].others_mean_share == pytest.approx(
        sum(s.median_share for g, s in shares.items() if g != "l40s") / 7)
    assert shares["l40s"].mape_at_others_share == pytest.approx(21.37, abs=0.01)
