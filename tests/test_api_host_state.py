"""A library leaves its host's process state alone (audit ua43c, finding 2): constant folding wrapped itself in
``warnings.catch_warnings()`` + ``simplefilter("ignore")``, which swap the process-wide filter list, so under a
thread pool one call restored another's "ignore" and the host's own warnings were dropped for good (5 of 6 runs).
Races do not show on demand, so these tests check the mechanism: no warnings filter is touched on the way."""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from lilou.api import Predictor
from lilou.graph.shape_completion import complete_shapes
from tests.conftest import REPO
from tests.onnx_builders import make_model, tensor


@contextlib.contextmanager
def filters_watched(monkeypatch) -> Iterator[list[str]]:
    """Within the block, every change to the process-wide warnings filters is listed (``catch_warnings``,
    ``simplefilter`` and ``filterwarnings`` all go through ``warnings._filters_mutated``); after it, the filter list
    must be the very list it was, holding what it held."""
    changes: list[str] = []
    mutated = warnings._filters_mutated
    before, contents = warnings.filters, list(warnings.filters)
    monkeypatch.setattr(warnings, "_filters_mutated", lambda: changes.append("mutated") or mutated())
    try:
        yield changes
    finally:
        monkeypatch.undo()
    assert warnings.filters is before and warnings.filters == contents


def _log_of_zero() -> object:
    """``x + Cast(Log(0), int64)``: folding it computes log(0) = -inf and casts -inf to an integer, which numpy warns
    about unless told not to."""
    nodes = [helper.make_node("Log", ["zero"], ["log"], name="log"),
             helper.make_node("Cast", ["log"], ["as_int"], to=TensorProto.INT64, name="cast"),
             helper.make_node("Cast", ["as_int"], ["back"], to=TensorProto.FLOAT, name="back"),
             helper.make_node("Add", ["x", "back"], ["y"], name="add")]
    zero = numpy_helper.from_array(np.zeros([1], dtype=np.float32), "zero")
    return make_model(nodes, [tensor("x", [1])], [tensor("y", None)], [zero])


def test_constant_folding_touches_no_warnings_filter_and_lets_no_numpy_warning_out(monkeypatch):
    model = _log_of_zero()
    with filters_watched(monkeypatch) as changes, np.errstate(all="raise"):  # a numpy warning would raise here
        complete_shapes(model)
        assert np.geterr()["divide"] == "raise"  # the host's numpy settings are its own again
    assert changes == []
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    assert shapes["log"] == [1] and shapes["as_int"] == [1]  # it did fold


def test_a_prediction_in_a_threaded_host_touches_no_warnings_filter(monkeypatch):
    """With another thread alive the file is shaped in this process (a forked child would hide the filters)."""
    predictor = Predictor()
    predictor.load_fusion_model()
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    try:
        with filters_watched(monkeypatch) as changes:
            prediction = predictor.predict(str(REPO / "tests" / "data" / "kv_cache" / "llama-past.onnx"), gpu="t4",
                                        shapes={"past_sequence_length": [8], "sequence_length": [1],
                                                "batch_size": [1]})
    finally:
        done.set()
        other.join()
    assert changes == [] and prediction.latency_ms > 0
