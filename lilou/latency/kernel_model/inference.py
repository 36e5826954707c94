"""Torch-free inference of the shipped per-kernel model (numpy only).

``lilou infer`` must answer in well under two seconds in a fresh process, and
importing torch alone takes about 1.5 s on a small CPU. The network is a few
dense layers (:class:`lilou.latency.kernel_model.model.KernelLatencyNet`), so its forward pass
is re-done here in numpy from the same ``model.safetensors`` and ``config.json``.
``tests/test_end_to_end.py`` checks that both give the same numbers.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from lilou.blas import blas_section
from lilou.latency.kernel_model.checkpoint import read_kernel_checkpoint
from lilou.latency.kernel_model.features import (DeviceColumns, KernelBatch, floor_index, floor_units_of, kernel_features,
                                                 low_power_exponent, roofline_inputs, roofline_ms)
from lilou.latency.kernel_model.kernel import FAMILIES
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES, family_type_mask

#: Which types each family's kernels can be, rows in :data:`FAMILIES` order (the features' family index).
_FAMILY_TYPE_MASK = family_type_mask(FAMILIES)


@dataclass(frozen=True)
class KernelTimes:
    """Per (kernel, device) row; the same fields as ``predictor.KernelPrediction``."""

    latency_ms: np.ndarray     # floor + work: the kernel timed alone, as in the training data
    work_ms: np.ndarray        # GPU time of the kernel alone
    floor_ms: np.ndarray       # per-launch floor of its family
    kernel_type: np.ndarray    # str per kernel
    compute_bound: np.ndarray  # FLOPs / peak above bytes / bandwidth


Layers = list[tuple[np.ndarray, np.ndarray]]


def _linear_layers(state: dict[str, np.ndarray], prefix: str) -> Layers:
    """(weight, bias) of every ``prefix<i>.weight`` in index order (Sequential of Linear, SiLU[, Dropout])."""
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)\.weight$")
    indices = sorted(int(m[1]) for key in state if (m := pattern.match(key)))
    return [(state[f"{prefix}{i}.weight"].T.copy(), state[f"{prefix}{i}.bias"]) for i in indices]


def _silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) as 0.5 x (1 + tanh(x / 2)), without overflow; in place on one temporary (``rank`` runs
    it on tens of thousands of kernel x device rows, where the temporaries cost as much as the matmuls)."""
    t = np.multiply(x, 0.5)
    np.tanh(t, out=t)
    t += 1.0
    t *= 0.5
    t *= x
    return t


#: Odd 64-bit multipliers of the row hash in :func:`_distinct_rows` (fixed: the same rows, the same order).
_ROW_HASH = np.random.default_rng(20261202).integers(1, 2**63, size=256, dtype=np.uint64) | np.uint64(1)


def _row_keys(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each float32 row's bits (equal rows, equal keys; rows must be checked equal after)."""
    with np.errstate(over="ignore"):
        return rows.view(np.uint32).astype(np.uint64) @ _ROW_HASH[:rows.shape[1]]


def _distinct_rows(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row among them).

    The features are normalised by the device, so the same kernel on GPUs with the same SM count (and on each
    rung of the size ladder that lands on the same waves) is one row for the network: ``rank`` of ResNet-50 over
    every GPU and MIG slice hands it 14,800 rows of which 4,300 differ. Rows are grouped by a 64-bit hash of their bits
    (``np.unique(axis=0)`` costs more than the network it saves) and checked equal after, falling back to the
    exact grouping on a collision."""
    rows = np.ascontiguousarray(features, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[1] > len(_ROW_HASH):
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        return distinct, inverse.reshape(-1)
    _, first, inverse = np.unique(_row_keys(rows), return_index=True, return_inverse=True)
    distinct = rows[first]
    if not np.array_equal(distinct[inverse], rows):
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    return distinct, inverse.reshape(-1)


class _RowMemo:
    """Network outputs of feature rows already seen, kept while a caller asks for it
    (:meth:`KernelModel.reusing_rows`).

    A capacity plan prices the same kernels at eight batch sizes, and each batch up to 16 carries a ladder of
    the same kernel at every larger batch up to 64 (:mod:`lilou.latency.composition.monotone`): most rows the
    network sees at batch 2 it saw at batch 1, bit for bit. Rows are found by their 64-bit key and compared
    whole; at most ``limit`` rows are kept."""

    def __init__(self, limit: int = 1 << 18) -> None:
        self.limit = limit
        # (sorted keys, float32 rows in key order, values): replaced whole, never changed in place, so that a
        # lookup in another thread (the service shares one Predictor) never pairs one state's keys with another's.
        self._state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return 0 if self._state is None else len(self._state[0])

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(values, found, keys) for ``rows``; values of rows not found are undefined; ``keys`` (None for rows too
        wide to hash) are for :meth:`store`."""
        if rows.shape[1] > len(_ROW_HASH):
            return np.empty(len(rows), dtype=np.float32), np.zeros(len(rows), dtype=bool), None
        wanted = _row_keys(rows)
        state = self._state
        if state is None or state[1].shape[1] != rows.shape[1]:
            return np.empty(len(rows), dtype=np.float32), np.zeros(len(rows), dtype=bool), wanted
        keys, stored, values = state
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        found = (keys[at] == wanted) & (stored[at] == rows).all(axis=1)
        return values[at], found, wanted

    def store(self, rows: np.ndarray, values: np.ndarray, keys: np.ndarray) -> None:
        """Keep ``rows`` (with their ``keys`` from :meth:`lookup`) and their network ``values``."""
        state = self._state
        if len(self) + len(rows) > self.limit or (state is not None and state[1].shape[1] != rows.shape[1]):
            return
        order = np.argsort(keys, kind="stable")
        keys, rows, values = keys[order], rows[order], values[order].astype(np.float32)
        if state is not None:  # merge two sorted runs: insert the new rows where their keys fall
            at = np.searchsorted(state[0], keys)
            keys, rows, values = (np.insert(state[0], at, keys), np.insert(state[1], at, rows, axis=0),
                                  np.insert(state[2], at, values))
        self._state = (keys, rows, values)


#: Rows of the feature matrix run through the network at a time (see :func:`_in_chunks`).
CHUNK_ROWS = 4096


def _mlp(x: np.ndarray, layers: Layers) -> np.ndarray:
    for weight, bias in layers:
        x = x @ weight
        x += bias
        x = _silu(x)
    return x


def _in_chunks(rows: np.ndarray, head: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``head`` (a row-wise network) applied to ``rows`` CHUNK_ROWS at a time, the results stacked.

    A ``rank`` of a large graph can hand the network tens of thousands of rows (ResNet-50 over every device did,
    28,000, before the size ladder priced only the rungs that can win): whole, every layer is a fresh 29 MB array,
    and on machines where page faults are expensive (VMs, sandboxes) touching new memory cost more than the
    layer's arithmetic (170 ms for the first SiLU, 13 ms for the next of the same size). In chunks the same few
    megabytes are reused and stay in cache; each row's arithmetic is unchanged."""
    with blas_section():  # lilou.blas: OpenBLAS hangs under calls from several threads
        if len(rows) <= CHUNK_ROWS:
            return head(rows)
        return np.concatenate([head(rows[start:start + CHUNK_ROWS]) for start in range(0, len(rows), CHUNK_ROWS)])


class _Member:
    """One trained net's weights (an ensemble checkpoint holds several, under ``members.<i>.``)."""

    def __init__(self, state: dict[str, np.ndarray]) -> None:
        self.mean, self.std = state["feature_mean"], state["feature_std"]
        self.type_mean, self.type_std = state["type_feature_mean"], state["type_feature_std"]
        self.trunk = _linear_layers(state, "trunk.")
        self.slowdown = (state["slowdown.weight"].T.copy(), state["slowdown.bias"])
        self.type_trunk = _linear_layers(state, "type_head.0.")
        self.type_out = (state["type_head.1.weight"].T.copy(), state["type_head.1.bias"])
        self.log_floor = state["log_floor"].astype(np.float64)
        # Learned power exponent (model.power_limited); checkpoints without it have none.
        self.power_exponent = float(np.logaddexp(0.0, state["power_raw"])) if "power_raw" in state else 0.0
        # Learned duration term (model.power_duration); 0 without it.
        self.duration_exponent = float(np.logaddexp(0.0, state["duration_raw"])) if "duration_raw" in state else 0.0
        self.log_duration_ms = float(state["log_duration_ms"]) if "log_duration_ms" in state else 0.0
        # set while KernelModel.reusing_rows() is active, in that caller's context (thread) only
        self._memo: contextvars.ContextVar[_RowMemo | None] = contextvars.ContextVar(f"lilou-memo-{id(self)}",
                                                                                      default=None)

    def __getstate__(self) -> dict[str, object]:  # a context variable does not pickle; a copy starts without a memo
        state = dict(self.__dict__)
        del state["_memo"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._memo = contextvars.ContextVar(f"lilou-memo-{id(self)}", default=None)

    @property
    def memo(self) -> _RowMemo | None:
        return self._memo.get()

    def low_power_exponent(self, compute_ms: np.ndarray | float) -> np.ndarray:
        return low_power_exponent(compute_ms, self.power_exponent, self.duration_exponent, self.log_duration_ms)

    def log_work(self, roofline: np.ndarray, compute_ms: np.ndarray, features: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Log GPU work (ms) per row from the roofline inputs and the distinct feature rows (``rows`` maps back)."""
        exponent = self.low_power_exponent(compute_ms).astype(np.float32)
        log_roofline = np.maximum(roofline[:, 0] + exponent * roofline[:, 2], roofline[:, 1])
        slowdown = self.slowdown_of(features)[rows]
        return (log_roofline + np.logaddexp(0.0, slowdown)).astype(np.float64)  # softplus

    def slowdown_of(self, features: np.ndarray) -> np.ndarray:
        """The slowdown head's output per distinct feature row, from the memo where it has the row."""
        memo = self.memo
        if memo is None:
            return self._slowdown(features)
        values, found, keys = memo.lookup(features)
        missing = np.flatnonzero(~found)
        if len(missing):
            computed = self._slowdown(features[missing])
            values[missing] = computed
            if keys is not None:
                memo.store(features[missing], computed, keys[missing])
        return values

    def _slowdown(self, features: np.ndarray) -> np.ndarray:
        return _in_chunks(features, self._slowdown_head)

    def _slowdown_head(self, features: np.ndarray) -> np.ndarray:
        hidden = _mlp((features - self.mean) / self.std, self.trunk)
        return (hidden @ self.slowdown[0] + self.slowdown[1])[:, 0]

    def type_logits(self, type_features: np.ndarray) -> np.ndarray:
        return _in_chunks(type_features, self._type_head)

    def _type_head(self, type_features: np.ndarray) -> np.ndarray:
        hidden = _mlp((type_features - self.type_mean) / self.type_std, self.type_trunk)
        return hidden @ self.type_out[0] + self.type_out[1]


def _member_states(state: dict[str, np.ndarray], size: int) -> list[dict[str, np.ndarray]]:
    """The state of each member: the whole state for one net, the ``members.<i>.`` keys of an ensemble."""
    if size == 1:
        return [state]
    return [{key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
            for prefix in (f"members.{i}." for i in range(size))]


class KernelModel:
    """The per-kernel latency and kernel-type model, loaded without torch. An ensemble checkpoint (``ensemble``
    in its config) averages its members' log times and type logits, as the torch runtime does."""

    def __init__(self, state: dict[str, np.ndarray], config: dict[str, Any]) -> None:
        self.config = config
        self.feature_groups = tuple(config["feature_groups"])
        self.type_feature_groups = tuple(config["type_feature_groups"])
        self._members = [_Member(member) for member in _member_states(state, int(config.get("ensemble", 1)))]
        self.log_floor = np.mean([m.log_floor for m in self._members], axis=0)
        self.floor_units = int(config.get("floor_units", 1))  # one floor per compute unit (model.floor_per_unit)
        first = self._members[0]
        # The low-power term of the first member, for the notes that quote it (each member prices with its own).
        self.power_exponent, self.duration_exponent = first.power_exponent, first.duration_exponent
        self.log_duration_ms = first.log_duration_ms
        # Winograd convolutions priced at their own FLOPs (data.winograd_roofline); older checkpoints were not.
        self.winograd = bool(config.get("winograd_roofline", False))

    @contextlib.contextmanager
    def reusing_rows(self) -> Iterator[None]:
        """While active, the network is run once per distinct feature row across calls (:class:`_RowMemo`):
        for a caller that prices the same kernels again, e.g. a plan over batch sizes. The memo is the caller's
        context's (its thread's), shared by nested users: the network evaluates only a memo's missing rows, whose
        float32 products round a little differently in a smaller batch, and a plan in one thread of the service
        changed the last digits of other threads' predictions (before session 37 every thread shared it)."""
        if self._members[0].memo is not None:  # nested: the outer user's memo
            yield
            return
        tokens = [(member, member._memo.set(_RowMemo())) for member in self._members]
        try:
            yield
        finally:
            for member, token in tokens:
                member._memo.reset(token)

    @classmethod
    def load(cls, folder: str | os.PathLike[str], kind: str | None = None) -> KernelModel:
        """``kind``: the model this must be (:func:`~lilou.latency.kernel_model.checkpoint.read_kernel_checkpoint`)."""
        from safetensors.numpy import load_file

        config, weights = read_kernel_checkpoint(folder, kind)
        state = load_file(weights)
        return cls(state, config)

    @property
    def uses_units(self) -> bool:
        """Whether the model learned the compute units of the kernel table (BF16 tensor cores ...); the shipped
        NeuSight-only model did not, and every kernel keeps the FP32 peak it was trained with."""
        return "precision" in self.feature_groups

    def low_power_exponent(self, compute_ms: np.ndarray | float) -> np.ndarray:
        """Exponent of the low-power slowdown for kernels of this compute time at peak (see model.py)."""
        return low_power_exponent(compute_ms, self.power_exponent, self.duration_exponent, self.log_duration_ms)

    def predict(self, kernels: KernelBatch, devices: DeviceColumns) -> KernelTimes:
        work, compute_bound = self.predict_work(kernels, devices)
        unit = floor_units_of(devices, len(kernels)) if self.floor_units > 1 else None
        floor = np.exp(self.log_floor[floor_index(kernels.family, None, unit, self.floor_units)])
        return KernelTimes(latency_ms=floor + work, work_ms=work, floor_ms=floor,
                           kernel_type=self.predict_types(kernels, devices), compute_bound=compute_bound)

    def predict_work(self, kernels: KernelBatch, devices: DeviceColumns) -> tuple[np.ndarray, np.ndarray]:
        """(GPU work in ms, compute-bound) per row, without the kernel-type head."""
        compute, memory = roofline_ms(kernels, devices, self.winograd)
        roofline = roofline_inputs(kernels, devices, self.winograd)
        features, rows = _distinct_rows(kernel_features(kernels, devices, self.feature_groups))
        log_work = np.mean([m.log_work(roofline, compute, features, rows) for m in self._members], axis=0)
        work = np.exp(log_work)
        return work, np.broadcast_to(compute >= memory, work.shape).copy()

    def predict_types(self, kernels: KernelBatch, devices: DeviceColumns) -> np.ndarray:
        """The kernel-type head's class name per row (object array of str), among the types of the row's family
        (:data:`~lilou.latency.kernel_model.kernel_types.FAMILY_TYPES`): the head's argmax over every type called
        layer norms ``softmax_warp``. Display only: the price does not read the type."""
        type_features, rows = _distinct_rows(kernel_features(kernels, devices, self.type_feature_groups))
        logits = np.mean([m.type_logits(type_features) for m in self._members], axis=0)[rows]
        allowed = _FAMILY_TYPE_MASK[np.asarray(kernels.family, dtype=np.int64)]
        return np.asarray(KERNEL_TYPES, dtype=object)[np.where(allowed, logits, -np.inf).argmax(axis=1)]
