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


def _counting_network(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows the kernel networks run on (every call of a member's slowdown head), in order."""
    counts: list[int] = []
    original = inference._Member._slowdown

    def counted(self, features):
        counts.append(len(features))
        return original(self, features)

    monkeypatch.setattr(inference._Member, "_slowdown", counted)
    return counts


def test_a_plan_runs_the_network_once_per_distinct_row_across_batches(monkeypatch: pytest.MonkeyPatch,
                                                                      zoo_onnx) -> None:
    """With the row memo a batch's rows already priced (batch 2's size ladder is batch 1's, less a rung) are not
    run again, and the prices are bit for bit those of the memo-less model; the memo is gone afterwards."""
    from lilou.api import Predictor

    path = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    predictor = Predictor()
    gpus = ["a10g", "t4", "a100-80gb", "a100-80gb/1g.10gb"]
    counts = _counting_network(monkeypatch)
    alone = []
    for batch in (1, 2):
        counts.clear()
        alone.append({(e.gpu, e.mig): e.latency_ms for e in predictor.rank(path, gpus=gpus, batch=batch)})
    alone_second = sum(counts)  # rows batch 2 runs by itself
    counts.clear()
    with predictor.reusing_kernel_rows():
        memo, runs = [], []
        for batch in (1, 2):
            memo.append({(e.gpu, e.mig): e.latency_ms for e in predictor.rank(path, gpus=gpus, batch=batch)})
            runs.append(len(counts))  # network calls so far
        first, second = sum(counts[:runs[0]]), sum(counts[runs[0]:])
    assert memo == alone
    # Batch 2 runs only the rungs batch 1 did not need (end_to_end.LADDER_BOUND_MARGIN): its own kernels at batch 2
    # (on the devices asked for and those priced beside them for the bounds' order: 53 % of its rows alone, 48 %
    # before session 39 priced those).
    assert 0 < second < alone_second * 0.6 and first > 0
    members = [*predictor.model.kernel_model._members, *predictor.model.tensor_model._members]
    assert all(member.memo is None for member in members)
    # the memo is the thread's that asked for it: a plan in one thread of the service left other threads' predictions
    # to its memo, whose missing rows ran in smaller float32 batches (their last digits changed)
    import threading

    seen = []
    with predictor.reusing_kernel_rows():
        other = threading.Thread(target=lambda: seen.append([m.memo for m in members]))
        other.start()
        other.join()
        assert all(member.memo is not None for member in members)
    assert seen == [[None] * len(members)]


def test_the_memo_finds_rows_whole_not_by_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows whose keys collide are told apart by their values (a row behind another's key is priced again, never
    given the other's value); a full memo stores no more."""
    monkeypatch.setattr(inference, "_ROW_HASH", np.zeros(256, dtype=np.uint64))
    memo = inference._RowMemo(limit=3)
    first = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    memo.store(first, np.array([10.0, 20.0], dtype=np.float32), memo.lookup(first)[2])
    values, found, _ = memo.lookup(np.array([[3.0, 4.0], [5.0, 6.0], [1.0, 2.0]], dtype=np.float32))
    assert found.tolist() == [False, False, True] and values[2] == 10.0  # [3, 4] is behind [1, 2]'s key
    more = np.array([[5.0, 6.0], [7.0, 8.0]], dtype=np.float32)
    memo.store(more, np.array([30.0, 40.0], dtype=np.float32), memo.lookup(more)[2])
    assert len(memo) == 2


def test_the_memo_finds_every_row_stored_over_several_calls() -> None:
    """Rows stored in several calls (merged into one sorted run) are all found, each with its own value."""
    rng = np.random.default_rng(0)
    memo = inference._RowMemo()
    parts = [rng.standard_normal((n, 35)).astype(np.float32) for n in (500, 3, 1200)]
    for i, rows in enumerate(parts):
        _, found, keys = memo.lookup(rows)
        assert not found.any()
        memo.store(rows, np.arange(len(rows), dtype=np.float32) + 10_000 * i, keys)
    values, found, _ = memo.lookup(np.concatenate(parts))
    expected = np.concatenate([np.arange(len(rows)) + 10_000 * i for i, rows in enumerate(parts)])
    assert found.all() and np.array_equal(values, expected) and len(memo) == 1703


def test_the_network_in_chunks_gives_every_row_what_it_gives_them_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank over every device runs thousands of feature rows through the networks CHUNK_ROWS at a time (less memory
    to touch): the same latencies and kernel types, bit for bit, as in one piece."""
    from pathlib import Path

    from lilou.api import Predictor

    example = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"
    predictor = Predictor()
    counts = _counting_network(monkeypatch)
    monkeypatch.setattr(inference, "CHUNK_ROWS", 256)
    chunked = [(e.gpu, e.mig, e.latency_ms, e.interval_ms) for e in predictor.rank(example)]
    assert max(counts) > 3 * inference.CHUNK_ROWS  # ResNet-18: about 900 distinct tensor-core rows in one call
    monkeypatch.setattr(inference, "CHUNK_ROWS", 10**9)
    whole = [(e.gpu, e.mig, e.latency_ms, e.interval_ms) for e in predictor.rank(example)]
    assert whole == chunked


def test_neither_kernel_model_prices_below_the_strict_roofline(datasets_dir) -> None:
    """The bound that lets a TF32 price skip its strict-FP32 cap (end_to_end.strict_floor_ms): real FP32 rows of
    every family on low-power and Winograd-capable GPUs, both shipped models, never under it."""
    from lilou.checkpoints import KERNEL_LATENCY, KERNEL_LATENCY_TENSOR, checkpoint_path
    from lilou.data.neusight import load_kernels
    from lilou.latency.composition.end_to_end import STRICT_BOUND_MARGIN, strict_floor_ms
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.kernel_model.inference import KernelModel

    rows = build_dataset(load_kernels("train", ops=["linear", "conv", "add", "softmax", "ln"],
                                      devices=["Tesla P4", "Tesla T4", "Tesla V100-PCIE-32GB"],
                                      data_dir=datasets_dir, limit_per_file=400))
    assert {"conv", "gemm", "elementwise"} <= set(rows.family)
    bound = strict_floor_ms(rows.kernels, rows.devices)
    for name in (KERNEL_LATENCY, KERNEL_LATENCY_TENSOR):
        work = KernelModel.load(checkpoint_path(name)).predict_work(rows.kernels, rows.devices)[0]
        assert np.all(work >= STRICT_BOUND_MARGIN * bound), name
        assert np.median(work / bound) > 1.05  # a bound, not the price


def test_pricing_only_the_rungs_that_can_win_changes_no_price(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rung of the size ladder whose roofline is above the kernel's own price is not priced
    (end_to_end.LADDER_BOUND_MARGIN): every kernel's work and type on every device is what pricing every rung gives,
    up to float32 rounding, from a fraction of the network's rows."""
    from pathlib import Path

    from lilou.api import Predictor, _GraphPrecision, _leading_dim, rank_devices
    from lilou.latency.composition import end_to_end

    example = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"
    predictor = Predictor()
    prepared = predictor.prepare(example)
    devices = rank_devices(None)
    path = _GraphPrecision.of(prepared.graph, None, None).path
    counts = _counting_network(monkeypatch)

    def work() -> tuple[np.ndarray, np.ndarray, int]:
        counts.clear()
        result = predictor.model.kernel_work(prepared.kernels, devices, _leading_dim(prepared.graph), path)
        return result.work_ms, result.kernel_type, sum(counts)

    pruned, pruned_types, pruned_rows = work()
    monkeypatch.setattr(end_to_end, "LADDER_BOUND_MARGIN", 0.0)  # every rung's bound is under the price
    every, every_types, every_rows = work()
    assert np.allclose(pruned, every, rtol=1e-6, atol=0.0)
    assert np.array_equal(pruned_types, every_types)
    assert pruned_rows < every_rows / 2


def test_each_family_has_its_own_types() -> None:
    """Every kernel family names the types it can be, and each type a family names is a type of the head."""
    from lilou.latency.kernel_model.kernel import FAMILIES
    from lilou.latency.kernel_model.kernel_types import FAMILY_TYPES, KERNEL_TYPES, family_type_mask

    assert set(FAMILY_TYPES) == set(FAMILIES)
    mask = family_type_mask(FAMILIES)
    for row, family in enumerate(FAMILIES):
        assert [KERNEL_TYPES[i] for i in np.flatnonzero(mask[row])] == \
            [t for t in KERNEL_TYPES if t in FAMILY_TYPES[family]]
    assert family_type_mask(["not a family"]).all()


@pytest.mark.parametrize("shape", [(4, 256, 48), (1, 3136, 48)])
def test_a_layer_norm_is_typed_layernorm(tmp_path, shape) -> None:
    """The type head's argmax over every type named MobileViT's layer norms over 48 channels (4 x 256 tokens at
    batch 1) and Swin-T's first stage's (3136 tokens) ``softmax_warp`` on an A10G, while their category said
    layernorm: the argmax runs over the family's types. The type is display only: the latency is the same."""
    import onnx
    from onnx import helper

    from lilou.api import Predictor
    from lilou.latency.kernel_model.kernel_types import FAMILY_TYPES, KERNEL_TYPES
    from tests.onnx_builders import make_model, tensor, weight

    channels = shape[-1]
    norm = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="norm", axis=-1, epsilon=1e-5)
    path = tmp_path / "norm.onnx"
    onnx.save(make_model([norm], [tensor("x", list(shape))], [tensor("y", list(shape))],
                         [weight("scale", [channels]), weight("bias", [channels])], opset=17), path)
    (kernel,) = Predictor().predict(path, gpu="a10g").kernels
    assert (kernel.type, kernel.category, kernel.ops) == ("layernorm", "layernorm", ("LayerNormalization",))
    with pytest.MonkeyPatch.context() as patch:  # every type allowed: the head's own argmax, as before
        patch.setitem(FAMILY_TYPES, "layernorm", KERNEL_TYPES)
        patch.setattr(inference, "_FAMILY_TYPE_MASK", inference.family_type_mask(inference.FAMILIES))
        (unmasked,) = Predictor().predict(path, gpu="a10g").kernels
    assert unmasked.type == "softmax_warp" and unmasked.latency_ms == kernel.latency_ms
