"""Capacity plans: per device, the batch with the most throughput whose 90 % upper bound meets a latency SLO.

For every GPU and MIG slice (or the listed ones) and every batch size, the model is predicted with
its interval (:class:`lilou.api.Predictor`); the graph is built and grouped into kernels once per
batch, then priced on every device at once. Batches go up in size; a device whose upper bound passes the
SLO (or whose memory is exceeded) is not predicted at larger batches. A device's plan is, of its batches priced whose
upper bound is within the SLO and whose weights and activations at their peak fit its memory, the one with the most
throughput at the upper bound (ties: the larger; the largest of them is its ``max_batch``), with the throughput
that batch gives (``batch / latency``, at the estimate and at the upper bound), the Kubernetes resource
that requests the device and, with prices, the dollars per million inferences at the upper bound's
throughput (the rate the plan can promise). Entries are sorted by that cost, cheapest first (devices
without a price after the priced ones), or by throughput, highest first, when no price is given. Given no
batches, a plan searches each device's largest batch within its SLOs exactly instead (:mod:`lilou.plan.batch_search`;
an ONNX plan its first :data:`EXACT_DEVICES` rows, each batch built once for all the devices that ask for it).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING, Any

from lilou.caveats import LAUNCH_BOUND_WORK_SHARE, ambiguity_notes
from lilou.errors import LilouInputError
from lilou.hardware import Device
from lilou.latency.kernel_model.precision import compute_capability
from lilou.plan.batch_search import SEARCH_LADDER, Limit, drive, largest_batch
from lilou.plan.kubernetes import resource_name
from lilou.plan.prices import checked_prices, device_price

if TYPE_CHECKING:
    from lilou.api import PreparedModel
    from lilou.llm.config import LLMConfig

#: Which TTFT an LLM plan shows and holds to --ttft-slo-ms: lilou llm's ttft_ms, the prefill of `batch` prompts that
#: arrive together (a burst at the planned concurrency), when the last of them gets its first token; a request
#: arriving into a running server has its prompt chunked into the steps and waits less.
TTFT_KIND = "burst"

#: Batch sizes an ONNX plan tries when none are given and the model cannot be read at every batch of the search's
#: ladder (its batch fixed in the file).
DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
#: The ladder an ONNX plan's search starts from (its rungs priced on every device): the old ladder and 256, so that a
#: device not searched to the end is planned at least as well as the old ladder planned it (the LLM plan's rungs x4
#: apart, SEARCH_LADDER, left a V100 at 16 where 32 met the SLO).
ONNX_LADDER: tuple[int, ...] = (*DEFAULT_BATCHES, 256)
#: An ONNX plan's devices whose batch is searched exactly, the plan's first (the others' is the largest of the ladder
#: within the SLO): each batch searched costs a rung's graph work (the graph derived, grouped and priced: about 0.1 s
#: for ResNet-50), and searching all 115 devices asked for 73 batches (13 s against 2 s for the old ladder's 8), the
#: first 8 for 18 (plan / infer 3.5x, over the 3x target), the first 4 for 9 (2.7x; 2.9x for the old ladder); from
#: ONNX_LADDER, 15 (3.1-3.4x: its 9 rungs, so that no device is planned below the old ladder).
EXACT_DEVICES = 4


@dataclass(frozen=True)
class PlanPoint:
    """One device at one batch."""

    batch: int
    latency_ms: float
    interval_ms: tuple[float, float]
    memory_gb: float       # weights + activations at their peak (GiB)
    fits: bool             # ... within the device's memory
    extrapolated_share: float = 0.0
    # LLM plans: output tokens per second at the estimate and at the upper bounds (None: batch / latency)
    rate_per_s: float | None = None
    rate_per_s_at_upper: float | None = None
    precision: str | None = None   # what the model computes in on this device (the prediction's path)
    gpu_work_ms: float | None = None  # the kernels' time alone (ONNX plans): below half the latency, the host's
    #                                   launches set it (plan_launch_note)
    # LLM plans: time to first token of `batch` prompts arriving together (lilou llm's ttft_ms) and its 90 % interval
    ttft_ms: float | None = None
    ttft_interval_ms: tuple[float, float] | None = None
    # LLM plans: lilou llm's warnings for this device at this batch (gathered into the plan's by plan_warnings)
    notes: tuple[str, ...] = field(default=(), compare=False)
    # LLM plans: which inter-token latency latency_ms is: "steady_state" (vLLM: lilou llm's steady_state.itl_ms, a
    # server keeping `batch` requests running) or "static_batch" (HF eager: lilou llm's itl_ms); None for ONNX plans
    itl_kind: str | None = None
    # ONNX plans: what runs the precision on this device (rank's precision_path: native | weight_only | emulated |
    # no_runtime) and why where not native; a device where no runtime runs it meets no SLO (_assemble)
    precision_path: str | None = None
    precision_note: str = ""


@dataclass
class PlanEntry:
    """The plan of one device: its largest batch within the SLO."""

    device: Device
    point: PlanPoint
    usd_per_hour: float | None = None   # of the whole replica: ``gpus`` devices
    price_source: str | None = None
    gpus: int = 1                       # devices per replica (an LLM's tensor-parallel group)
    curve: str | None = None            # its key in CapacityPlan.curves where not the device's name (a --tp sweep)
    # batch_search "exact": whether max_batch was searched to the end (else the largest of the ladder that meets)
    exact: bool | None = None
    max_batch: int | None = None        # the largest batch priced that meets the SLO(s) and fits

    @property
    def throughput_per_s(self) -> float:
        if self.point.rate_per_s is not None:
            return self.point.rate_per_s
        return 1000.0 * self.point.batch / self.point.latency_ms if self.point.latency_ms else 0.0

    @property
    def throughput_per_s_at_upper(self) -> float:
        return rate_at_upper(self.point)

    @property
    def usd_per_million(self) -> float | None:
        if self.usd_per_hour is None or not self.throughput_per_s_at_upper:
            return None
        cost = self.usd_per_hour / (3600.0 * self.throughput_per_s_at_upper) * 1e6
        return cost if math.isfinite(cost) else None  # never Infinity in the JSON

    def to_json(self) -> dict[str, Any]:
        cost = self.usd_per_million
        return {"device": self.device.name, "gpu": self.device.gpu, "mig": self.device.mig,
                "resource": resource_name(self.device), "gpus": self.gpus, "batch": self.point.batch,
                "precision": self.point.precision, "precision_path": self.point.precision_path,
                "precision_note": self.point.precision_note,
                "latency_ms": self.point.latency_ms, "itl_kind": self.point.itl_kind,
                "interval_ms": list(self.point.interval_ms),
                "throughput_per_s": round(self.throughput_per_s, 3),
                "throughput_per_s_at_upper": round(self.throughput_per_s_at_upper, 3),
                "memory_gb": round(self.point.memory_gb, 4), "device_memory_gb": round(self.device.memory_gib, 4),
                "fits": self.point.fits, "extrapolated_share": self.point.extrapolated_share,
                "ttft_ms": self.point.ttft_ms, "ttft_kind": None if self.point.ttft_ms is None else TTFT_KIND,
                "ttft_interval_ms": None if self.point.ttft_interval_ms is None else list(self.point.ttft_interval_ms),
                "usd_per_hour": None if self.usd_per_hour is None else usd(self.usd_per_hour),
                "price_source": self.price_source,
                "usd_per_million": None if cost is None else usd(cost), "max_batch": self.max_batch,
                "batch_exact": self.exact}


def rate_at_upper(point: PlanPoint) -> float:
    """A point's throughput at its upper bound(s): inferences (or output tokens) per second."""
    if point.rate_per_s_at_upper is not None:
        return point.rate_per_s_at_upper
    upper = point.interval_ms[1]
    return 1000.0 * point.batch / upper if upper else 0.0


def usd(value: float) -> float:
    """Dollars for the JSON: 6 decimals, or 4 significant digits below a cent (a slice of a GPU priced at
    0.000001 USD an hour was 0.0)."""
    return round(value, 6) if value >= 0.01 else float(f"{value:.4g}")


@dataclass
class CapacityPlan:
    """Devices that meet the SLO, best first, and every (device, batch) point priced on the way."""

    model: str
    slo_ms: float
    batches: list[int]
    sort: str                     # "cost" or "throughput"
    entries: list[PlanEntry]
    curves: dict[str, list[PlanPoint]]  # device name -> points in batch order (for the plot)
    devices: list[Device]
    unmet: list[dict[str, Any]] = field(default_factory=list)  # devices without a plan, and why
    warnings: list[str] = field(default_factory=list)
    kind: str = "model"           # "model" (ONNX) or "llm" (lilou.llm, ITL SLO)
    tp: int = 1                   # LLM plans: tensor-parallel GPUs per replica
    backend: str | None = None    # ONNX plans: the runtime whose kernels were predicted (eager, tvm); LLM plans: None
    empty_because: str | None = None  # the message of a plan left empty before any latency (an LLM no device holds)
    ttft_slo_ms: float | None = None  # LLM plans: the TTFT SLO, met by the TTFT's 90 % upper bound at the planned batch
    tps: list[int] | None = None  # LLM plans over several --tp degrees (a sweep): them, and curves keyed "device xN"
    # "listed": only `batches` were tried; "exact" (no --batches): each device's batch is the largest that meets the
    # SLO(s) and fits, searched from the ladder `batches` (lilou.plan.batch_search; an ONNX plan's first
    # EXACT_DEVICES devices, the others' entries marked exact False: the largest of the ladder)
    batch_search: str = "listed"

    def curve_devices(self) -> dict[str, Device]:
        """The device behind each key of :attr:`curves`."""
        return {curve_key(d, t, self.tps is not None): d for d in self.devices for t in (self.tps or [self.tp])}

    @property
    def message(self) -> str | None:
        """The line to print when no device meets the SLO (None otherwise)."""
        if self.entries:
            return None
        if self.empty_because:
            return self.empty_because
        excluded = {item["device"] for item in self.unmet if item.get("precision_path") == "no_runtime"}
        curves = {name: points for name, points in self.curves.items() if name not in excluded}
        if excluded and not curves:
            first = next(item for item in self.unmet if item["device"] in excluded)
            return (f"no device meets the SLO of {self.slo_ms:g} ms: no known runtime runs the precision on any of the "
                    f"{len(excluded)} device(s) (first: {first['reason'].removeprefix('precision: ')})")
        best = min(((p.interval_ms[1], name, p.batch) for name, points in curves.items() for p in points),
                   default=None)
        what = "ITL SLO" if self.kind == "llm" else "SLO"
        if best is None:
            return f"no device meets the {what} of {self.slo_ms:g} ms: nothing could be predicted"
        within = [(p.memory_gb, name) for name, points in curves.items() for p in points
                  if p.interval_ms[1] <= self.slo_ms]
        fitting = [(ttft_upper(p), name, p.batch) for name, points in curves.items() for p in points
                   if p.interval_ms[1] <= self.slo_ms and p.fits]
        if self.ttft_slo_ms is not None and fitting:  # the ITL SLO is met, the first token comes too late
            lowest = min(fitting)
            return (f"no device meets the TTFT SLO of {self.ttft_slo_ms:g} ms within the {what} of {self.slo_ms:g} ms: "
                    f"the lowest 90 % upper bound of TTFT there is {lowest[0]:.1f} ms ({lowest[1]}, batch {lowest[2]})")
        if within:  # the SLO is met, but not with the model in memory: the lowest bound would contradict it
            memory = {name: d.memory_gib for name, d in self.curve_devices().items()}
            largest = max({name for _, name in within}, key=lambda name: (memory[name], name))
            context = " less 0.5 GiB of CUDA context" if self.kind == "model" else ""
            count = len({name for _, name in within})
            return (f"no device meets the {what} of {self.slo_ms:g} ms with the model in memory: the {count} "
                    f"device(s) within the {what} cannot hold it (it needs at least {min(within)[0]:.2f} GiB there; "
                    f"the largest, {largest}, has {round(memory[largest], 2):g} GiB{context})")
        return (f"no device meets the {what} of {self.slo_ms:g} ms at any batch: the lowest 90 % upper bound is "
                f"{best[0]:.3f} ms ({best[1]}, batch {best[2]})")

    @property
    def left_out(self) -> str | None:
        """One line on the devices without a plan (:attr:`unmet`), by reason, a few named; None when there are none."""
        if not self.unmet:
            return None
        groups: dict[str, list[str]] = {}
        for item in self.unmet:
            # an LLM that does not fit the device at batch 1 was counted "not predicted", as a device lilou llm refuses
            why = "memory" if item["reason"].startswith("not predicted: does not fit") else item["reason"].split(":")[0]
            label = {"memory": "for memory", "latency": f"for the {'ITL ' if self.kind == 'llm' else ''}SLO",
                     "ttft": "for the TTFT SLO", "precision": "for the precision (no runtime runs it there)"
                     }.get(why, "not predicted")
            groups.setdefault(label, []).append(item["device"] if "tp" not in item else f"{item['device']} x{item['tp']}")
        parts = [f"{len(names)} {label} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                 for label, names in groups.items()]
        if self.tps:
            return (f"{len(self.unmet)} of {len(self.devices) * len(self.tps)} configurations (device x TP) left out: "
                    f"{'; '.join(parts)}")
        return f"{len(self.unmet)} of {len(self.devices)} devices left out: {'; '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        """What ``lilou plan --format json`` prints."""
        precisions = sorted({p.precision for points in self.curves.values() for p in points if p.precision})
        return {"model": self.model, "kind": self.kind, "backend": self.backend,
                "tp": list(self.tps) if self.tps else self.tp, "slo_ms": self.slo_ms,
                "ttft_slo_ms": self.ttft_slo_ms,
                "batches": list(self.batches), "batch_search": self.batch_search,
                "unit": "output_token" if self.kind == "llm" else "inference",
                "precision": precisions[0] if len(precisions) == 1 else precisions or None,
                "sort": self.sort, "devices": len(self.devices), "plan": [e.to_json() for e in self.entries],
                "unmet": list(self.unmet), "message": self.message, "warnings": list(self.warnings)}


def curve_key(device: Device, tp: int, sweep: bool) -> str:
    """A device's key in a plan's curves: its name, or in a --tp sweep its name and the degree (``h100-sxm x4``)."""
    return f"{device.name} x{tp}" if sweep else device.name


def check_tps(tp: int | Iterable[int]) -> list[int]:
    """``--tp``: one degree, or several (an LLM plan compares each device at each), sorted; each a positive integer."""
    listed = list(tp) if isinstance(tp, Iterable) and not isinstance(tp, str | bytes) else [tp]
    for value in listed:
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise LilouInputError(f"--tp must be a positive integer, not {value!r:.40}")
    if not listed:
        raise LilouInputError("--tp: list one or more tensor-parallel degrees, e.g. --tp 2,4,8")
    return sorted(set(int(value) for value in listed))


def parse_tps(text: str | None) -> int | list[int] | None:
    """``"4"`` -> 4, ``"2,4,8"`` -> [2, 4, 8]; a bad list is a one-line input error."""
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise LilouInputError(f"--tp: {text!r} is not an integer or a comma-separated list of integers") from None
    return values[0] if len(values) == 1 else values


def ttft_upper(point: PlanPoint) -> float:
    """The TTFT a plan holds to its SLO: the 90 % upper bound, or the estimate where no interval is calibrated."""
    if point.ttft_interval_ms is not None:
        return point.ttft_interval_ms[1]
    return point.ttft_ms if point.ttft_ms is not None else 0.0


def check_slo(slo_ms: float, what: str = "--slo-ms") -> float:
    if isinstance(slo_ms, bool):  # True was taken as 1 ms
        raise LilouInputError(f"{what} must be a number of milliseconds, not {slo_ms!r}")
    try:
        value = float(slo_ms)
    except (TypeError, ValueError):
        raise LilouInputError(f"{what} must be a number of milliseconds, not {slo_ms!r:.40}") from None
    except OverflowError:  # an int past float's range (10**400), infinite as a float: an OverflowError (audit ua46)
        value = float("inf")
    if not value > 0 or value == float("inf"):
        raise LilouInputError(f"{what} must be a positive number of milliseconds, not {slo_ms!r:.40}")
    return value


def check_batches(batches: Iterable[int] | None) -> list[int]:
    """The batch sizes to try, sorted: positive integers in any iterable but a string, a numpy array's included
    (2.9, "4" or True were taken as 2, 4 and 1)."""
    if batches is None:
        return list(DEFAULT_BATCHES)
    listed = list(batches) if isinstance(batches, Iterable) and not isinstance(batches, str | bytes) else None
    if listed is None or not all(isinstance(b, Integral) and not isinstance(b, bool) for b in listed):
        raise LilouInputError(f"--batches: list positive integer batch sizes, e.g. [1, 2, 4, 8], not {batches!r:.80}")
    values = sorted(set(int(b) for b in listed))
    if not values or values[0] < 1:
        raise LilouInputError("--batches: list positive batch sizes, e.g. --batches 1,2,4,8")
    if values[-1] > 65536:
        raise LilouInputError(f"--batches: batch {values[-1]} is larger than 65536")
    return values


def parse_batches(text: str | None) -> list[int] | None:
    """``"1,2,4"`` -> [1, 2, 4]; a bad list is a one-line input error."""
    if text is None:
        return None
    try:
        return check_batches([int(part) for part in text.split(",") if part.strip()])
    except ValueError:
        raise LilouInputError(f"--batches: {text!r} is not a comma-separated list of integers") from None


def plan_model(model: str | os.PathLike[str], slo_ms: float, *, gpus: str | Iterable[str] | None = None,
               batches: Iterable[int] | None = None, prices: Mapping[str, float] | None = None, predictor=None,
               shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
               tf32: str | None = None,
               prepare: Callable[[int, dict[str, tuple[int, ...]] | None], PreparedModel] | None = None,
               values: Mapping[str, Sequence[bool | int | float]] | None = None) -> CapacityPlan:
    """The capacity plan of an ONNX model for a latency SLO (ms) over devices and batch sizes.

    By default the file is read at the first two batches and the largest, and the others' graphs derived from
    those reads (:class:`lilou.graph.batch_series.BatchSeries`; a file whose shapes do not scale with the batch is
    read at every batch), and grouped into kernels at the first and reused at the others where grouping the largest
    anew gives the same groups (fusion mostly follows op patterns, not sizes; else, or where another batch's graph
    differs, each batch is grouped anew). ``prepare(batch, shapes)``, when
    given, returns that batch's :class:`lilou.api.PreparedModel` (of ``predictor``'s backend) instead: the
    service passes its cache's, so a second plan of the same bytes skips the graph work. ``values``: run-time
    inputs' values, as :meth:`lilou.api.Predictor.predict` takes them (``prepare`` applies its own).

    ``batches`` None: each device's largest batch whose upper bound meets the SLO and that fits its memory (its
    ``max_batch``) is searched from :data:`ONNX_LADDER` (``batch_search`` "exact") for the plan's first
    :data:`EXACT_DEVICES` rows, the others' the largest of the ladder that does (their entries' ``exact`` False); a
    model that cannot be read at every batch of the ladder (its batch fixed in the file) tries :data:`DEFAULT_BATCHES`
    as listed. Each entry's batch is the one priced with the most throughput at the upper bound of those."""
    from lilou.api import Predictor, PreparedModel, gpu_list, rank_devices
    from lilou.graph.batch_series import BatchSeries
    from lilou.graph.input_values import check_input_values
    from lilou.graph.guarded_inference import meanwhile
    from lilou.plan.batch_pricer import BatchPricer

    if isinstance(model, PreparedModel):  # prepared at one batch, and a plan reads the model at each it tries
        raise LilouInputError(f"{model.name}: plan_model takes the ONNX file's path, not a prepared model: it reads "
                              "the model at each batch it tries")
    if not isinstance(model, str | os.PathLike):
        raise LilouInputError(f"model must be an ONNX file's path, not {type(model).__name__}")
    slo = check_slo(slo_ms)
    search = batches is None  # no --batches: each device's largest batch within the SLO and its memory, exactly
    sizes = list(ONNX_LADDER) if search else check_batches(batches)
    prices = checked_prices(prices)
    if predictor is not None and not isinstance(predictor, Predictor):
        raise LilouInputError(f"predictor must be a lilou.Predictor, not {type(predictor).__name__}")
    gpus = None if gpus is None else gpu_list(gpus)  # a numpy array or a generator, read once
    values = check_input_values(values) or None
    if shapes is not None:
        from lilou.graph.shapes import checked_shapes

        checked_shapes(shapes)  # shapes="x" was an AttributeError (audit ua46)
    devices = rank_devices(gpus)
    predictor = predictor or Predictor()
    series = None if prepare is not None else BatchSeries(model, largest=sizes[-1], values=values, backend=predictor.backend)
    pricer = BatchPricer(predictor, prepare or series.graph, _pins_at_batch(model, shapes), series, sizes, sizes[-1],
                         precision, tf32)
    # A batch's size ladder holds the larger batches' kernels; the grouping's models load during the first read.
    with predictor.reusing_kernel_rows(), meanwhile(predictor.load_fusion_model), \
            contextlib.closing(series) if series is not None else contextlib.nullcontext():
        searched = _search_model(pricer, devices, slo, sizes, prices) if search else None
        if searched is None:  # --batches, or a model the ladder cannot read at every batch (its batch fixed in the file)
            search, exact = False, set()
            found = _listed_model(pricer, devices, slo, sizes if batches is not None else list(DEFAULT_BATCHES))
        else:
            found, exact = searched
    tried, curves, skipped = found
    warnings: list[str] = ambiguity_notes(gpus) + (pricer.warnings or []) + _skipped_lines(skipped)
    if not tried:
        raise LilouInputError(f"{model}: no batch size could be predicted ({'; '.join(warnings)})")
    curves = {name: monotone_bounds(points) for name, points in curves.items()}
    plan = _assemble(str(os.fspath(model)), slo, sizes if search else tried, devices, curves, prices, warnings, "model")
    plan.backend = predictor.backend
    plan.batch_search = "exact" if search else "listed"
    for entry in plan.entries:
        entry.exact = entry.device.name in exact if search else None
    plan.warnings += plan_launch_note(plan.entries, predictor.model.overhead.gap_ms, predictor.launch_gap_given)
    if not predictor.launch_gap_given:
        plan.warnings += launch_range_note(plan, predictor.model.overhead.gap_ms)
    return plan


Found = tuple[list[int], dict[str, list[PlanPoint]], list[tuple[int, str]]]  # batches priced, curves, skipped (why)


def _listed_model(pricer, devices: Sequence[Device], slo: float, sizes: Sequence[int]) -> Found:
    """Each of ``sizes`` in turn on the devices still within the SLO and memory; a batch the model cannot be read at
    is skipped (but the last, when none was priced before it: its error is the plan's)."""
    from lilou.plan.batch_pricer import BatchRefused

    curves: dict[str, list[PlanPoint]] = {d.name: [] for d in devices}
    skipped: list[tuple[int, str]] = []
    tried: list[int] = []
    active = list(devices)  # devices still within the SLO and memory at the last batch tried
    for batch in sizes:
        if not active:
            break
        try:
            points = pricer.price(batch, active)
        except BatchRefused as error:
            if not tried and batch == sizes[-1]:
                raise error.__cause__ from None
            skipped.append((batch, str(error)))
            continue
        for device in active:
            curves[device.name].append(points[device.name])
        # A device whose estimate is past the SLO, or out of memory, at this batch is past them at every larger one
        # (the kernel model is monotone in size by construction, memory grows with the batch): it is not predicted
        # again. Its bounds are made monotone only once the ladder is done (monotone_bounds), so a miss of the
        # bound alone does not drop it here.
        active = [d for d in active if curves[d.name][-1].latency_ms <= slo and curves[d.name][-1].fits]
        tried.append(batch)
    return tried, curves, skipped


def _search_model(pricer, devices: Sequence[Device], slo: float, ladder: Sequence[int],
                  prices: Mapping[str, float] | None) -> tuple[Found, set[str]] | None:
    """Each device's largest batch whose upper bound meets the SLO and that fits its memory, searched exactly
    (:func:`lilou.plan.batch_search.largest_batch`) for the plan's first :data:`EXACT_DEVICES` rows, and the
    largest of the ``ladder`` within them for the others (see :func:`_leading_devices`); every device's search runs at
    once, so that a batch is built once for all the devices that ask for it. Returns the points and the devices
    searched to the end; None where the model cannot be read at a batch of the ``ladder`` (a batch fixed in the
    file): the plan then tries the default batches as listed, as before. A batch above the ladder the model cannot be
    read at misses, and is said skipped."""
    from lilou.graph.memory import usable_gib
    from lilou.plan.batch_pricer import BatchRefused
    from lilou.plan.batch_search import drive_all

    curves: dict[str, list[PlanPoint]] = {d.name: [] for d in devices}
    skipped: list[tuple[int, str]] = []
    tried: set[int] = set()
    by_name = {d.name: d for d in devices}

    def price(batch: int, names: list[str]) -> dict[str, PlanPoint]:
        try:
            points = pricer.price(batch, [by_name[name] for name in names])
        except BatchRefused as error:
            if batch <= ladder[-1]:
                raise
            skipped.append((batch, str(error)))
            return {}
        for name in names:
            curves[name].append(points[name])
        tried.add(batch)
        return points

    searches = {d.name: largest_batch(ladder, [(lambda p: p.interval_ms[1], slo), _memory_limit(usable_gib(d))])
                for d in devices}
    try:
        paused = drive_all(searches, price, allowed=set(ladder).__contains__)
        while True:
            leading = [name for name in _leading_devices(devices, curves, slo, prices) if name in paused]
            if not leading:
                break
            drive_all({name: searches[name] for name in leading}, price, asked={name: paused.pop(name) for name in leading})
    except BatchRefused:
        return None
    return (sorted(tried), curves, sorted(skipped)), set(by_name) - set(paused)


def _leading_devices(devices: Sequence[Device], curves: Mapping[str, Sequence[PlanPoint]], slo: float,
                     prices: Mapping[str, float] | None) -> list[str]:
    """The plan's first :data:`EXACT_DEVICES` devices as the plan would list them now, each device at its points
    priced so far (a device whose search is paused: at its ladder's rungs, as its row shows it unsearched)."""
    plan = _assemble("", slo, [], list(devices), {name: monotone_bounds(points) for name, points in curves.items()},
                     prices, [], "model")
    return [entry.device.name for entry in plan.entries[:EXACT_DEVICES]]


def _memory_limit(usable: float) -> Limit:
    """Memory as a limit of the search: a point's memory (GiB) against what the device's tensors can use, on the side
    of it its ``fits`` says (memory_gb is rounded), so that the search interpolates towards the largest batch that
    fits."""
    def need(point: PlanPoint) -> float:
        return min(point.memory_gb, usable) if point.fits else max(point.memory_gb, math.nextafter(usable, math.inf))

    return need, usable


def monotone_bounds(points: Sequence[PlanPoint]) -> list[PlanPoint]:
    """A device's points along the batch with each bound at least the bound of every smaller batch. A larger batch
    runs at least the smaller one's work, so its latency's quantiles are at least the smaller one's: a band that
    narrows as kernels grow into the measured range (the MLP on an M40: an upper bound of 1.61 ms at batch 4, 1.21 at
    batch 8) does not make the larger batch the safer one. The estimates are monotone already."""
    ordered = sorted(points, key=lambda p: p.batch)
    out: list[PlanPoint] = []
    low = high = 0.0
    for point in ordered:
        low, high = max(low, point.interval_ms[0]), max(high, point.interval_ms[1])
        out.append(point if (low, high) == tuple(point.interval_ms) else
                   dataclasses.replace(point, interval_ms=(min(low, point.latency_ms), high)))
    return out


def plan_launch_note(entries: Sequence[PlanEntry], gap_ms: float, given: bool) -> list[str]:
    """Say which planned devices wait on the host's kernel launches at their planned batch (their GPU busy less than
    half the time): their throughput is the host's, and a server that replays CUDA graphs (or TensorRT) gets more
    from them. A plan of BERT-base in FP8 priced an H100 within 1 % of an A100 (6.29 and 6.37 ms at batch 32), both
    set by 208 launches of 30 us, with nothing said (rank's note on launch-bound devices is left out of plans)."""
    bound = [e for e in entries if e.point.gpu_work_ms is not None and e.point.latency_ms > 0
             and e.point.gpu_work_ms <= LAUNCH_BOUND_WORK_SHARE * e.point.latency_ms]
    if not bound or gap_ms <= 0:
        return []
    names = ", ".join(e.device.name for e in bound[:4]) + (f" and {len(bound) - 4} more" if len(bound) > 4 else "")
    busy = [100 * e.point.gpu_work_ms / e.point.latency_ms for e in bound]
    span = f"{min(busy):.0f} %" if round(min(busy)) == round(max(busy)) else f"{min(busy):.0f}-{max(busy):.0f} %"
    origin = "as given" if given else "NeuSight's 2023 hosts', `lilou profile ops` measures yours"
    return [f"{names}: at the planned batch the host's kernel launches ({1000 * gap_ms:.0f} us each, {origin}) set "
            f"the latency, the GPU busy {span} of it; a server replaying CUDA graphs (or TensorRT) serves more per "
            "device: plan again with --launch-gap-us 0"]


def launch_range_note(plan: CapacityPlan, gap_ms: float) -> list[str]:
    """Say so where devices meet the SLO at the estimate but not at the 90 % upper bound, the host's kernel launches
    most of their latency, and no launch gap was given: the bound then prices every launch at the slowest of
    NeuSight's five 2023 hosts (:data:`lilou.latency.composition.overhead.LAUNCH_GAP_RANGE`), a given gap over one
    host's spread. A user audit found BERT-base's plan under 10 ms empty on every device (upper bound 12.0 ms at
    batch 1, estimates near 6), and with ``--launch-gap-us 30``, the shipped gap typed out, H100 batch 84."""
    from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE

    planned = {entry.device.name for entry in plan.entries}
    missed = sorted((p.interval_ms[1], name, p) for name, points in plan.curves.items() if name not in planned
                    for p in points if p.fits and p.latency_ms <= plan.slo_ms < p.interval_ms[1]
                    and p.gpu_work_ms is not None and p.gpu_work_ms <= LAUNCH_BOUND_WORK_SHARE * p.latency_ms)
    if not missed:
        return []
    devices = sorted({name for _, name, _ in missed})
    bound, name, point = missed[0]
    names = ", ".join(devices[:4]) + (f" and {len(devices) - 4} more" if len(devices) > 4 else "")
    return [f"{names}: within the SLO at the estimate but not at the 90 % upper bound ({name} at batch {point.batch}: "
            f"{point.latency_ms:.3g} ms, bound {bound:.3g}), which prices each kernel launch at up to "
            f"{1000 * gap_ms * LAUNCH_GAP_RANGE[1]:.1f} us, the slowest of NeuSight's five 2023 hosts, as no launch gap "
            "was given: measure your host's with `lilou profile ops` and plan with --launch-gap-us (a gap given, the "
            "shipped 30 us included, is priced over one host's call-to-call spread instead)"]


def _skipped_lines(skipped: Sequence[tuple[int, str]]) -> list[str]:
    """One line per reason the batches were skipped for: a file with its batch baked in fails every batch but its
    own with one message whose sizes follow the batch, said once for them all (it was a line per batch)."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for batch, why in skipped:
        groups.setdefault(re.sub(r"\d+", "#", why), []).append((batch, why))
    lines = []
    for members in groups.values():
        batches = [str(batch) for batch, _ in members]
        if len(members) == 1:
            lines.append(f"batch {batches[0]} skipped: {members[0][1]}")
        else:
            listed = f"{', '.join(batches[:-1])} and {batches[-1]}"
            lines.append(f"batches {listed} skipped: {members[0][1]} (at batch {batches[0]}; the others fail the same "
                         "way at their own sizes)")
    return lines


def _pins_at_batch(model: str | os.PathLike[str], shapes: Mapping[str, Sequence[int]] | None
                   ) -> Callable[[int], dict[str, tuple[int, ...]] | None]:
    """``--shape`` at each batch of a plan: an input's whole shape has its batch dimension follow the batch
    tried; a named dimension (``sequence_length=512``) keeps its size (before session 32 it was set to the batch)."""
    if not shapes:
        return lambda batch: None
    from lilou.graph.loading import load_onnx
    from lilou.graph.shapes import runtime_inputs

    from lilou.graph.batch_axis import onnx_batch_axes, onnx_unbatched_inputs
    from lilou.graph.names import protobuf_text

    loaded = load_onnx(model)
    runtime = runtime_inputs(loaded)
    inputs = {value.name for value in runtime} - onnx_unbatched_inputs(loaded.graph, runtime)  # not a weight fed as input
    axes = onnx_batch_axes(loaded.graph)
    # A named dimension that is a batched input's batch axis would pin the batch the plan varies: every batch but
    # that one was skipped with "--batch 1 and --shape batch=4 disagree", an option plan does not have.
    batch_names = {protobuf_text(dims[axes.get(value.name, 0)].dim_param) for value in runtime if value.name in inputs
                   for dims in [value.type.tensor_type.shape.dim] if len(dims) > axes.get(value.name, 0)}
    for name, dims in shapes.items():
        if name in batch_names and name not in inputs:
            size = "x".join(map(str, dims))
            raise LilouInputError(f"--shape {name}={size} sets the batch dimension, which a plan varies; drop it, or "
                                  f"plan that batch alone with --batches {size}")

    def at(name: str, dims: Sequence[int], batch: int) -> tuple[int, ...]:
        axis = axes.get(name, 0)  # the second of a time-major recurrent layer's inputs
        dims = tuple(dims)
        return (*dims[:axis], batch, *dims[axis + 1:]) if name in inputs and len(dims) > axis else dims

    return lambda batch: {name: at(name, dims, batch) for name, dims in shapes.items()}


def _tie(value: float) -> float:
    """``value`` to 9 significant digits: a sort key under which a slice priced at its GPU's price x 7/7
    (6.9799999999999995 for 6.98) ties with the GPU."""
    return float(f"{value:.9g}")


def _whole_first(entry: PlanEntry) -> tuple:
    """Ties (the same cost and throughput) go to the least fragmented resource: a whole GPU before its full-size
    MIG slice (h100-sxm/7g.80gb was ranked above h100-sxm), a larger slice (more memory) before a smaller one,
    then by name."""
    return entry.device.mig is not None, -entry.device.memory_gib, entry.device.name, entry.gpus


def plan_order(entry: PlanEntry, priced: bool) -> tuple:
    """An entry's place in a plan: by $ per million at the upper bound's throughput, cheapest first (unpriced last,
    by that throughput), with prices; by that throughput, highest first, without. Unpriced devices went by the
    estimate's throughput, in another order than the plan without prices and the table's first throughput column."""
    if priced:
        return (entry.usd_per_million is None, _tie(entry.usd_per_million or 0.0),
                -_tie(entry.throughput_per_s_at_upper), *_whole_first(entry))
    return (-_tie(entry.throughput_per_s_at_upper), *_whole_first(entry))


def _assemble(model: str, slo: float, batches: list[int], devices: list[Device], curves: dict[str, list[PlanPoint]],
              prices: Mapping[str, float] | None, warnings: list[str], kind: str, tp: int = 1,
              ttft_slo: float | None = None, tps: list[int] | None = None) -> CapacityPlan:
    entries, unmet = [], []
    for device, degree in [(d, t) for d in devices for t in (tps or [tp])]:
        key = curve_key(device, degree, tps is not None)
        points = curves[key]
        unsupported = next((p for p in points if p.precision_path == "no_runtime"), None)
        if unsupported is not None:  # its latency is a lower bound of a run no runtime makes: it meets no SLO
            unmet.append({"device": device.name, **({"tp": degree} if tps else {}),
                          "reason": f"precision: {unsupported.precision_note}", "precision_path": "no_runtime"})
            continue
        meeting = [p for p in points if p.interval_ms[1] <= slo]
        fitting = [p for p in meeting if p.fits]
        timely = [p for p in fitting if ttft_slo is None or ttft_upper(p) <= ttft_slo]
        if not timely:
            lowest = min(points, key=lambda p: p.interval_ms[1], default=None)
            first = min(fitting, key=ttft_upper, default=None)
            reason = (f"ttft: upper bound {ttft_upper(first):.1f} ms at batch {first.batch}" if first is not None else
                      "memory: no batch within the SLO fits" if meeting else
                      f"latency: upper bound {lowest.interval_ms[1]:.3f} ms at batch {lowest.batch}"
                      if lowest is not None else "not predicted")
            unmet.append({"device": device.name, **({"tp": degree} if tps else {}), "reason": reason})
            continue
        # the most throughput at the bound (ties: the larger batch); the largest batch beside it, as max_batch
        best = max(timely, key=lambda p: (rate_at_upper(p), p.batch))
        price, source = device_price(device, prices or {})
        if price is not None and degree > 1:  # a replica is ``degree`` of the device
            price, source = price * degree, f"{source} x {degree} GPUs (TP)"
        entries.append(PlanEntry(device, best, price, source, gpus=degree, curve=key if tps else None,
                                 max_batch=max(p.batch for p in timely)))
    sort = "cost" if prices else "throughput"
    entries.sort(key=lambda e: plan_order(e, bool(prices)))
    if prices:
        warnings = warnings + list(getattr(prices, "notes", []))
        unused = sorted(set(prices) - {d.name for d in devices} - {d.gpu for d in devices})
        if unused:
            warnings = warnings + [f"--prices names {len(unused)} device(s) not planned: {', '.join(unused[:5])}"
                                   + (" ..." if len(unused) > 5 else "")]
        unpriced = list(dict.fromkeys(e.device.name for e in entries if e.usd_per_million is None))
        if unpriced:
            warnings = warnings + [f"{len(unpriced)} device(s) of the plan have no price in --prices (neither their own "
                                   f"line nor, for a MIG slice, their GPU's): {', '.join(unpriced[:5])}"
                                   + (" ..." if len(unpriced) > 5 else "") + "; listed after the priced ones"]
    return CapacityPlan(model=model, slo_ms=slo, batches=batches, sort=sort, entries=entries, curves=curves,
                        devices=devices, unmet=unmet, warnings=warnings, kind=kind, tp=tp, ttft_slo_ms=ttft_slo,
                        tps=tps)


def plan_llm(model: str | os.PathLike[str], itl_slo_ms: float, *, input_len: int, output_len: int,
             gpus: Sequence[str] | None = None, batches: Sequence[int] | None = None,
             prices: Mapping[str, float] | None = None, dtype: str | None = None, engine: str = "vllm",
             llm_predictor=None, tp: int | Sequence[int] = 1, kv_dtype: str | None = None,
             ttft_slo_ms: float | None = None) -> CapacityPlan:
    """The capacity plan of a decoder LLM (:mod:`lilou.llm`) for an inter-token-latency SLO: per device the
    largest batch whose ITL upper bound meets it and whose weights and KV cache fit; throughput is output
    tokens per second (prefill included), so the cost is dollars per million output tokens. For vLLM the
    batch is the number of requests the server keeps running, judged on its steady-state step (see
    :func:`_llm_point`). ``tp``: each replica is a tensor-parallel group of that many of the device (a 70B
    model on 80 GB GPUs), priced as that many; several (``[2, 4, 8]``) plan each device at each degree, one entry
    per device and degree that meets the SLO, so that one plan compares GPU x TP by cost; ``kv_dtype`` as in
    ``lilou llm``. ``ttft_slo_ms``: a batch is kept only where the 90 % upper bound of its time to first token
    meets it too; that TTFT is ``lilou llm``'s at the batch, the prefill of ``batch`` prompts that arrive together
    (a wave of users at the planned concurrency: the worst case of a server that keeps them running; ``ttft_kind``
    "burst" in the JSON). ``batches`` None: each device's batch is the largest that meets the SLO(s) and fits,
    searched exactly (:meth:`_LLMCurve.search`; ``batch_search`` "exact"), not the largest of a ladder; given, the
    largest of them ("listed")."""
    from lilou.api import rank_devices
    from lilou.llm import LLMPredictor
    from lilou.llm.predictor import SLICE_POWER

    slo = check_slo(itl_slo_ms, "--itl-slo-ms")
    ttft_slo = None if ttft_slo_ms is None else check_slo(ttft_slo_ms, "--ttft-slo-ms")
    sizes = check_batches(batches) if batches is not None else list(SEARCH_LADDER)
    tps = check_tps(tp)
    from lilou.llm.config import load_config

    config = load_config(model)  # once: the checks and the plan's name read it
    for degree in tps:
        _check_llm_arguments(config, input_len, output_len, degree)
    _check_llm_choices(engine, dtype, kv_dtype)
    if llm_predictor is not None and not isinstance(llm_predictor, LLMPredictor):  # an AttributeError (audit ua46)
        raise LilouInputError(f"llm_predictor must be a lilou.LLMPredictor, not {type(llm_predictor).__name__}"
                              + (" (wrap it: LLMPredictor(predictor=p))" if type(llm_predictor).__name__ == "Predictor"
                                 else ""))
    sweep = len(tps) > 1
    prices = checked_prices(prices)
    devices = rank_devices(gpus)
    llm = llm_predictor or LLMPredictor()
    curves: dict[str, list[PlanPoint]] = {curve_key(d, t, sweep): [] for d in devices for t in tps}
    warnings: list[str] = ambiguity_notes(gpus)
    refused: dict[str, str] = {}
    short: dict[str, Any] = {}  # device -> lilou llm's MemoryFit, where the model fits it at no batch
    search = batches is None  # no --batches: each device's largest batch within the SLO(s), exactly
    limits = [(lambda p: p.interval_ms[1], slo), *([(ttft_upper, ttft_slo)] if ttft_slo is not None else [])]
    with llm.predictor.reusing_kernel_rows():  # batches share most rows of their size ladders
        for device, degree in [(d, t) for d in devices for t in tps]:
            key = curve_key(device, degree, sweep)

            def predict(batch: int, device: Device = device, degree: int = degree):
                return llm.predict(model, device.gpu, mig=device.mig, tp=degree, batch=batch, input_len=input_len,
                                   output_len=output_len, dtype=dtype, kv_dtype=kv_dtype, engine=engine)

            def point(result, batch: int) -> PlanPoint:
                # a slice's power share and the dtype default are left out: a plan shows no power, and its precision
                notes = tuple(w for w in result.warnings
                              if not w.startswith("no --dtype given") and not w.startswith(SLICE_POWER))
                return _llm_point(result, batch, input_len, output_len, notes)

            curve = _LLMCurve(predict, point)
            if search:
                curve.search(sizes, limits)
            else:
                curve.listed(sizes)
            curves[key] = curve.points
            if curve.refused is not None:
                refused[key] = curve.refused
            if curve.short is not None:
                short[key] = curve.short
    empty_because = None
    if len(refused) == len(curves):
        # Said of the device with the most memory among those the model does not fit, where any: the first device's
        # reason (an M40's lack of FP16) was not why a prompt of 10^8 tokens fits no GPU. In a sweep, at its largest TP.
        top = tps[-1]
        largest = max([d for d in devices if curve_key(d, top, sweep) in short] or devices,
                      key=lambda d: (d.memory_gib, compute_capability(d)))  # "10.0" after "8.6"
        chosen = curve_key(largest, top, sweep)
        if chosen not in short:
            raise LilouInputError(f"{os.fspath(model)}: no device can serve it ({len(devices)} tried); the largest, "
                                  f"{largest.name}{f' at --tp {top}' if sweep else ''}: {refused[chosen]}")
        # memory, as an ONNX model no device holds: an empty plan and one line (it was exit 2)
        empty_because = _fits_nowhere(model, largest, short[chosen], top, sizes[0])
    # named as lilou llm names it (the config's model id): the plan said "llama-3.1-8b" where llm said
    # "meta-llama/Llama-3.1-8B-Instruct", and the service's plan said the id (audit ua46)
    plan = _assemble(config.name, slo, sizes, devices, curves, prices, warnings, "llm", tp=tps[0],
                     ttft_slo=ttft_slo, tps=tps if sweep else None)
    plan.batch_search = "exact" if search else "listed"
    for entry in plan.entries:
        entry.exact = True if search else None
    # lilou llm's notes of the devices planned, at their planned batch (of every device priced when none is): the
    # plan copied the first device's, a "PCIe 4.0" link note over a plan of NVLink boards
    noted = [(e.curve or e.device.name, e.point.notes) for e in plan.entries] or \
        [(name, points[0].notes) for name, points in curves.items() if points]
    plan.warnings[len(warnings):len(warnings)] = plan_warnings(noted)
    keys = [u["device"] if "tp" not in u else f"{u['device']} x{u['tp']}" for u in plan.unmet]
    plan.unmet = [u if key not in refused else {**u, "reason": refused[key]} for u, key in zip(plan.unmet, keys)]
    plan.empty_because = empty_because
    return plan


class _LLMCurve:
    """One device's points of an LLM plan, and why it has none: ``refused`` (the reason) and ``short`` (lilou llm's
    MemoryFit, where the reason is memory). ``predict(batch)`` is lilou llm's prediction, ``point(result, batch)``
    its :class:`PlanPoint`."""

    def __init__(self, predict: Callable[[int], Any], point: Callable[[Any, int], PlanPoint]) -> None:
        self._predict, self._point = predict, point
        self._at: dict[int, PlanPoint] = {}
        self.refused: str | None = None
        self.short: Any = None
        self.most: int | None = None  # lilou llm's max_batch_fitting at these lengths, once one batch is predicted

    @property
    def points(self) -> list[PlanPoint]:
        return [self._at[batch] for batch in sorted(self._at)]

    def at(self, batch: int) -> PlanPoint | None:
        """The point at ``batch``; None where lilou llm refuses it or it does not fit (the first such, before any
        point, is why the device has none)."""
        try:
            result = self._predict(batch)
        except LilouInputError as error:
            if not self._at:
                self.refused = self.refused or str(error)
            return None
        self.most = result.max_batch_fitting
        if result.itl_ms is None or result.ttft_ms is None:  # out of memory: so is every larger batch
            if not self._at and self.refused is None:
                self.refused = "not predicted: " + (result.warnings[-1] if result.warnings else "no latency")
                self.short = result.memory
            return None
        self._at[batch] = self._point(result, batch)
        return self._at[batch]

    def listed(self, batches: Sequence[int]) -> None:
        """Each of ``batches`` (--batches), up to the first refused or out of memory."""
        for batch in batches:
            if self.at(batch) is None:
                return

    def search(self, ladder: Sequence[int], limits: Sequence[Limit]) -> None:
        """The largest batch whose upper bounds meet every ``(bound of a point, SLO)`` of ``limits`` and that fits,
        exactly (:func:`lilou.plan.batch_search.largest_batch`), memory's bound lilou llm's ``max_batch_fitting``."""
        drive(largest_batch(ladder, limits, lambda: self.most), self.at)


def _check_llm_arguments(config: LLMConfig, input_len: int, output_len: int, tp: int) -> None:
    """The lengths and ``--tp`` checked once, up front: lilou llm refused them on every device, and the plan said
    "no device can serve it (1 tried); the largest, h100-sxm: input length must be a positive integer"."""
    from lilou.llm.predictor import MAX_COUNT, _check_tp, shown_integer

    for option, value in (("--input-len", input_len), ("--output-len", output_len), ("--tp", tp)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise LilouInputError(f"{option} must be a positive integer, not {value!r:.40}")
        if option != "--tp" and value > MAX_COUNT:  # a 400-digit length was an OverflowError (audit ua46)
            raise LilouInputError(f"{option} {shown_integer(value)} is above 2^40, not a real length; use a realistic "
                                  "one")
    _check_tp(config, int(tp), None)


def _check_llm_choices(engine: str | None, dtype: str | None, kv_dtype: str | None) -> None:
    """The engine and dtypes checked once, up front, as lilou llm checks them: a typo was refused on every device, and
    the plan said "no device can serve it (1 tried); the largest, h100-sxm: unknown engine 'x'" (audit ua46)."""
    from lilou.llm.predictor import DTYPES, ENGINES, KV_ALIASES, KV_DTYPES, _choice

    _choice("engine", engine, ENGINES)
    _choice("dtype", dtype, DTYPES)
    if kv_dtype is not None:
        _choice("KV-cache dtype", KV_ALIASES.get(str(kv_dtype).strip().lower(), kv_dtype), KV_DTYPES)


def _fits_nowhere(model: str | os.PathLike[str], largest: Device, fit, tp: int, batch: int) -> str:
    """The line of an LLM plan no device holds: the need at the smallest batch, the largest device, and the
    smallest ``--tp`` that would hold the weights on it (none for a MIG slice: no TP across slices)."""
    from lilou.llm.config import load_config
    from lilou.llm.predictor import MAX_TP, _check_tp

    line = (f"no device listed holds {os.fspath(model)}: at batch {batch} it needs {fit.total_gb:.1f} GiB per GPU "
            f"(weights {fit.weights_gb:.1f}), more than the largest, {largest.name}, can use ({fit.budget_gb:.1f} GiB "
            f"of {round(fit.device_gb, 2):g})")
    if fit.weights_gb < fit.budget_gb:
        return f"{line}; its weights fit, its KV cache and activations do not: try smaller --batches, --input-len or --output-len"
    weights = fit.weights_gb * tp  # the whole model's
    config = load_config(model)
    for n in range(tp + 1, MAX_TP + 1):
        with contextlib.suppress(LilouInputError):
            _check_tp(config, n, largest.mig)
            if weights / n < fit.budget_gb:
                return f"{line}; try --tp {n} (its weights split over {n} of {largest.name})"
    return line


def plan_warnings(noted: Sequence[tuple[str, Sequence[str]]], named: int = 5) -> list[str]:
    """The distinct warnings of the devices in ``noted`` ((device, its warnings), in plan order), each once: as is
    where every device has it, else after the names of the devices it is about (the first ``named`` of them, in plan
    order), unless it names its one device itself."""
    holders: dict[str, list[str]] = {}
    for name, notes in noted:
        for note in dict.fromkeys(notes):
            holders.setdefault(note, []).append(name)
    lines = []
    for note, names in holders.items():
        if len(names) == len(noted) or (len(names) == 1 and re.search(rf"(?<![\w-]){re.escape(names[0])}(?![\w-])", note)):
            lines.append(note)
            continue
        more = f" and {len(names) - named} more" if len(names) > named else ""
        lines.append(f"{', '.join(names[:named])}{more}: {note}")
    return lines


def _llm_point(result, batch: int, input_len: int, output_len: int, notes: tuple[str, ...] = ()) -> PlanPoint:
    """One batch of an LLM plan. A vLLM server keeps ``batch`` requests running, so its point is the steady
    state (prompts chunked into the decode steps: ITL and output tokens/s of that step); HF eager serves one
    static batch (its mean decode step; tokens/s over TTFT + the decode steps)."""
    intervals = result.intervals or {}
    memory = float(result.memory.total_gb), bool(result.memory.fits)
    ttft = float(result.ttft_ms or 0.0)
    ttft_band = intervals.get("ttft_ms") or [ttft, ttft]
    band = intervals.get("ttft_ms")  # None where no calibration gives intervals
    first = {"ttft_ms": round(ttft, 4),
             "ttft_interval_ms": None if band is None else (round(float(band[0]), 4), round(float(band[1]), 4))}
    if result.steady_itl_ms is not None:
        itl = float(result.steady_itl_ms)
        lo, hi = result.steady_interval_ms or [itl, itl]
        return PlanPoint(batch, round(itl, 4), (round(float(lo), 4), round(float(hi), 4)), *memory, 0.0,
                         precision=result.dtype, notes=notes, **first, itl_kind="steady_state",
                         rate_per_s=batch * 1000.0 / itl, rate_per_s_at_upper=batch * 1000.0 / float(hi))
    itl = float(result.itl_ms or 0.0)
    itl_band = intervals.get("itl_ms") or [itl, itl]
    upper_e2e = float(ttft_band[1]) + (output_len - 1) * float(itl_band[1])
    return PlanPoint(batch, round(itl, 4), (round(float(itl_band[0]), 4), round(float(itl_band[1]), 4)), *memory, 0.0,
                     precision=result.dtype, notes=notes, **first, itl_kind="static_batch",
                     rate_per_s=float(result.tokens_per_s or 0.0),
                     rate_per_s_at_upper=batch * output_len / (upper_e2e / 1000) if upper_e2e > 0 else 0.0)
