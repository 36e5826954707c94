"""Each of ``predict_many``'s predictions carries its own device's warnings, as ``predict`` on that device alone
says them (session 42's audit: a V100 with 0.1 % launch wait priced beside a B200 was told "up to 85 % of the
estimate is waiting for the host's kernel launches", the B200's share, and GPUs priced beside FP8 ones were told
their "fp8" kernels had no held-out measurements; 66 of 72 predictions differed from ``predict``)."""
from __future__ import annotations

import pytest

from lilou.api import Predictor

DEVICES = ["v100-sxm2-16gb", "b200", "h100-sxm", "t4", "a100-80gb/1g.10gb"]


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def electra(zoo_onnx) -> str:
    return str(zoo_onnx("electra-small", batch=2, seq=32, dynamic_batch=True))


@pytest.mark.parametrize("batch, precision", [(32, "bf16"), (8, "fp8"), (1, None)])
def test_predict_many_warnings_are_each_device_s_own(predictor, electra, batch, precision):
    many = predictor.predict_many(electra, DEVICES, batch=batch, precision=precision)
    for name, got in zip(DEVICES, many):
        gpu, _, mig = name.partition("/")
        alone = predictor.predict(electra, gpu, mig=mig or None, batch=batch, precision=precision)
        assert got.warnings == alone.warnings, name
        assert got.latency_ms == alone.latency_ms and got.interval_ms == alone.interval_ms


def test_launch_wait_note_is_the_device_s_own_share(predictor, electra):
    """ELECTRA-small at batch 128 in BF16 waits on the host's launches 96 % of the time on a B200, 4 % on a V100:
    the V100 gets no launch-wait note; a ranking of both still says the largest share once."""
    v100, b200 = predictor.predict_many(electra, ["v100-sxm2-16gb", "b200"], batch=128, precision="bf16")
    assert v100.host_wait_share < 0.1 < b200.host_wait_share
    note = "waiting for the host's kernel launches"
    assert not [w for w in v100.warnings if note in w]
    b200_notes = [w for w in b200.warnings if note in w]
    assert len(b200_notes) == 1 and b200_notes[0].startswith(f"up to {b200.host_wait_share * 100:.0f} %")
    ranking = predictor.rank(electra, ["v100-sxm2-16gb", "b200"], batch=128, precision="bf16")
    assert [w for w in ranking.warnings if note in w] == b200_notes
