"""The torch-free kernel network groups repeated feature rows: the same answer, computed once per distinct row."""
from __future__ import annotations

import numpy as np
import pytest

from lilou.latency.kernel_model import inference
from lilou.latency.kernel_model.inference import _distinct_rows


def test_distinct_rows_rebuild_every_row_exactly() -> None:
    rows = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [0.5, 2.0], [3.0, 4.0]], dtype=np.float32)
    distinct, index = _distinct_rows(rows)
    assert len(distinct) == 3 and np.array_equal(distinct[index], rows)


def test_a_hash_collision_falls_back_to_exact_grouping(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every row hashes to 0: grouping by hash alone would merge different rows.
    monkeypatch.setattr(inference, "_ROW_HASH", np.zeros(256, dtype=np.uint64))
    rows = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]], dtype=np.float32)
    distinct, index = _distinct_rows(rows)
    assert len(distinct) == 2 and np.array_equal(distinct[index], rows)


def test_rank_prices_each_device_as_predict_does() -> None:
    """rank over many devices (most rows shared between them) gives each device what predict gives it alone."""
    from pathlib import Path

    from lilou.api import Predictor

    example = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"
    predictor = Predictor()
    gpus = ["a100-sxm4-80gb", "a100-sxm4-80gb/1g.10gb", "a10g", "t4", "h100-sxm", "l4"]
    ranked = {(e.gpu, e.mig): e.latency_ms for e in predictor.rank(example, gpus=gpus)}
    for name in gpus:
        gpu, _, mig = name.partition("/")
        alone = predictor.predict(example, gpu=gpu, mig=mig or None)
        assert ranked[(alone.gpu, alone.mig)] == alone.latency_ms
