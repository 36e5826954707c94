"""An ONNX plan's points: the model at one batch priced on a set of devices, its graph work done once per batch.

A batch's graph is read (or derived, :class:`lilou.graph.batch_series.BatchSeries`) and grouped into kernels the
first time any device asks for it and kept, so that a plan whose devices ask for a batch at different times (the
exact search, :mod:`lilou.plan.batch_search`) builds it once. The first batch's kernel groups are reused at the
others where grouping the largest batch anew gives the same groups (:func:`groups_at_largest`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lilou.errors import LilouInputError
from lilou.hardware import Device

if TYPE_CHECKING:
    from lilou.api import PreparedModel
    from lilou.plan.planner import PlanPoint


class BatchRefused(Exception):
    """The model could not be read at a batch (a batch dimension fixed in the file): the plan skips that batch. An
    error grouping or pricing a graph that was read is the plan's, as in rank."""


class BatchPricer:
    """``price(batch, devices)``: each device's :class:`lilou.plan.planner.PlanPoint` at ``batch``. ``load(batch,
    pins)`` gives the batch's graph (or, from the service, its prepared model); ``series``, where the graphs come from
    one, is asked to read ``second`` and ``largest`` ahead once ``first`` is read. The first rank's warnings (but
    memory's and launch-bound devices') are kept in :attr:`warnings`."""

    def __init__(self, predictor, load: Callable, pins: Callable, series, batches: Sequence[int], largest: int,
                 precision: str | None, tf32: str | None) -> None:
        self.predictor, self.load, self.pins, self.series = predictor, load, pins, series
        self.first, self.second = batches[0], batches[1] if len(batches) > 1 else None
        self.largest, self.precision, self.tf32 = largest, precision, tf32
        self.like: PreparedModel | None = None     # the first batch: the others reuse its kernel groups (same nodes) ...
        self.checked: dict[int, PreparedModel] = {}  # ... if grouping the largest batch anew gives the same groups
        self.verified = False
        self.prepared: dict[int, PreparedModel] = {}  # each batch built, for devices that ask for it later
        self.warnings: list[str] | None = None

    def price(self, batch: int, devices: Sequence[Device]) -> dict[str, PlanPoint]:
        """Each device's point at ``batch``; :class:`BatchRefused` where the model cannot be read at it."""
        from lilou.caveats import LAUNCH_BOUND
        from lilou.plan.planner import PlanPoint

        prepared = self.prepared.get(batch) or self._prepare(batch)
        # Totals only (Predictor.rank): the plan needs no per-kernel estimates of 100+ devices x 8 batches. rank
        # stores the model in --precision per device (weight-only FP8 where a GPU has no FP8 tensor cores).
        ranking = self.predictor.rank(prepared, gpus=[d.name for d in devices], precision=self.precision, tf32=self.tf32)
        if self.warnings is None:
            # memory is each device's own column; launch-bound devices explain a ranking's order, not a plan's
            self.warnings = [w for w in ranking.warnings
                             if not w.startswith("the model does not fit") and LAUNCH_BOUND not in w]
        by_device = {(e.gpu, e.mig): e for e in ranking}
        points = {}
        for device in devices:  # memory as rank stored the model on the device (weight-only FP8 on an A100)
            entry = by_device[(device.gpu, device.mig)]
            points[device.name] = PlanPoint(batch, entry.latency_ms, tuple(entry.interval_ms), entry.memory_gb,
                                            entry.fits, entry.extrapolated_share, precision=entry.precision,
                                            gpu_work_ms=entry.gpu_work_ms, precision_path=entry.precision_path,
                                            precision_note=entry.precision_note)
        return points

    def _prepare(self, batch: int) -> PreparedModel:
        from lilou.api import PreparedModel

        try:
            loaded = self.checked.pop(batch, None) or self.load(batch, self.pins(batch))
            if self.like is not None and not self.verified and not isinstance(loaded, PreparedModel):
                self.verified = True  # the second batch read: check the groups at the largest first
                self.like, self.checked = groups_at_largest(self.predictor, self.like, self.load, self.pins,
                                                            self.largest, loaded if batch == self.largest else None)
                loaded = self.checked.pop(batch, loaded)
        except LilouInputError as error:
            raise BatchRefused(str(error)) from error
        if batch == self.first and self.series is not None and self.second is not None:
            self.series.prefetch(self.second, self.pins(self.second))  # the file shapes the reads after the first
            self.series.prefetch(self.largest, self.pins(self.largest))  # (the second, the check at the largest):
            #                                                              they run in their children beside its work
        # A graph read here is grouped as is: a graph without kernels fails the plan, as in rank.
        prepared = loaded if isinstance(loaded, PreparedModel) else self.predictor.prepare(loaded, like=self.like)
        if not self.prepared and not self.verified:
            self.like = prepared
        self.prepared[batch] = prepared
        return prepared


def groups_at_largest(predictor, first: PreparedModel, load, pins, largest: int, graph=None
                      ) -> tuple[PreparedModel | None, dict[int, PreparedModel]]:
    """Whether the first batch's kernel groups are the fusion model's at the largest batch too (``graph``: that
    batch's, when already read): the GNN reads sizes, and grouped a decoder step's rotary and cache ops differently
    at batch 1 and 4 (``llama-past.onnx``: 87 and 93 kernels, until session 33 kept aten calls whole). Returns
    ``first`` to reuse at every batch when they agree, None (every batch grouped anew, as `infer` groups it) when
    they differ, and the largest batch prepared, for the plan to take when it gets there."""
    if graph is None:
        try:
            graph = load(largest, pins(largest))
        except LilouInputError:
            return first, {}  # that batch will say why when the plan asks for it
    fresh = predictor.prepare(graph)
    same = first.graph.same_structure(fresh.graph) and \
        [g.nodes for g in fresh.partition.groups] == [g.nodes for g in first.partition.groups]
    return (first if same else None), {largest: fresh}
