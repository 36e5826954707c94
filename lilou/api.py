"""The Python API: ``Predictor`` loads the checkpoints once and predicts any model on any device.

>>> from lilou import Predictor
>>> p = Predictor(backend="eager")
>>> result = p.predict("examples/resnet18.onnx", gpu="a10g")   # doctest: +SKIP
>>> result.latency_ms, len(result.kernels), result.warnings     # doctest: +SKIP
>>> [(r.gpu, r.mig, r.latency_ms) for r in p.rank("examples/resnet18.onnx")][:3]   # doctest: +SKIP

``result.to_json()`` is exactly what ``lilou infer --format json`` prints and
``p.rank(...).to_json()`` what ``lilou rank --format json`` prints; the CLI is a
thin layer over this module. The graph is parsed, grouped into kernels and
described once per call, whatever the number of devices.

Grouping is most of a prediction (the fusion GNN and the kernel descriptions: about 85 % for
ResNet-18), so a caller that predicts one model many times prepares it once:

>>> prepared = p.prepare("examples/resnet18.onnx")                # doctest: +SKIP
>>> p.predict(prepared, gpu="t4"), p.rank(prepared, gpus=["a10g", "l4"])   # doctest: +SKIP

``predict``, ``predict_many`` and ``rank`` of a path or a graph are ``prepare`` followed by the same
code, so a prepared model gives exactly the results its path gives. The objects they return are defined in
:mod:`lilou.results`, the warnings they attach in :mod:`lilou.caveats`.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import numbers
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from warnings import warn

import numpy as np

from lilou.caveats import (ambiguity_notes, calibration_notes, conv_form_warning, extrapolated_warning, fallback_warning,
                           fused_attention_warning, grouped_conv_warning, host_wait_warning, launch_bound_note,
                           launch_gap_interval_note, launch_wait_interval_note, memory_warning, mig_interval_warning,
                           power_note, transposed_conv_warning, unmeasured_kernels)
from lilou.checkpoints import (KERNEL_LATENCY, KERNEL_LATENCY_TENSOR, FusionCheckpoints, checkpoint_notes, checkpoint_path,
                               reading_checkpoints)
from lilou.docs import doc
from lilou.errors import LilouInputError
from lilou.graph.input_values import check_input_values
from lilou.graph.memory import fits_memory, memory_needed
from lilou.hardware import Device, resolve_device
from lilou.latency.composition.breakdown import kernel_category
from lilou.latency.composition.end_to_end import EndToEndModel, GraphKernels, KernelWork, describe_kernels
from lilou.latency.composition.fallback import FallbackModel
from lilou.latency.composition.overhead import (E2E_OVERHEAD, LAUNCH_GAP_RANGE, LAUNCH_GAP_RANGE_GIVEN, OverheadModel,
                                               StaleOverheadWarning, load_overhead, queue_shares, stale_kernel_note)
from lilou.latency.kernel_model.checkpoint import TENSOR_KIND
from lilou.latency.kernel_model.coverage import MeasuredCoverage
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.kernel_model.precision import (PrecisionPath, PrecisionSupport, band_precisions, check_precision,
                                                  check_precision_options, kernel_path, kernel_precisions,
                                                  precision_path, precision_support, precision_warnings, runs_tf32,
                                                  runs_weight_only, tf32_moot, tf32_unavailable)
from lilou.graph.precision import ModelPrecision, math_op_precisions, model_precision
from lilou.plan.calibration import Calibration
from lilou.plan.intervals import Intervals, compute_intervals, no_intervals, with_related_devices
from lilou.results import KernelEstimate, ModelInput, Prediction, PreparedModel, RankEntry, Ranking
# At run time, not under TYPE_CHECKING: typing.get_type_hints resolves the public signatures (ModelInput names them).
from lilou.fusion.partition import Partition
from lilou.graph.dag import ModelGraph
from lilou.graph.input_values import Value as InputValue
from lilou.graph.reading import GraphReading


def gpu_list(names: str | Iterable[str | Device]) -> list[str | Device]:
    """GPUs as a list of names and :class:`Device` objects: a string is a comma-separated list (``--gpus a10g,t4``),
    any other iterable (a list, a numpy array, a dict's keys, a generator) holds one name or device each."""
    from lilou.hardware.names import name_list

    if isinstance(names, bytes) or not isinstance(names, Iterable):
        raise LilouInputError(f"list GPUs by name, e.g. ['a10g', 'a100-80gb/1g.10gb'], not {names!r:.60}")
    listed = list(name_list(names))
    for item in listed:
        if not isinstance(item, str | Device):
            raise LilouInputError(f"GPUs are named by strings such as 'a10g' or 'a100-80gb/1g.10gb', not {item!r:.40}")
    return [str(item) if isinstance(item, str) else item for item in listed]


def rank_devices(names: str | Iterable[str | Device] | None = None) -> list[Device]:
    """Devices to rank: every GPU and MIG slice, or the named ones (:func:`gpu_list`).

    A name is a GPU (any alias: the whole GPU) or ``GPU/PROFILE`` for one MIG slice
    (``a100-80gb/1g.10gb``); a :class:`Device` is taken as it is; repeats are dropped.
    """
    if names is None:
        from lilou.hardware import all_devices

        return all_devices()
    devices: dict[str, Device] = {}
    for raw in gpu_list(names):
        if isinstance(raw, Device):
            devices.setdefault(raw.name, raw)
            continue
        name = raw.strip()
        if not name:
            continue
        device = resolve_device(name)
        devices.setdefault(device.name, device)
    if not devices:
        raise LilouInputError(NO_GPU_NAMED)
    return list(devices.values())


#: The error for a list of GPUs that names none (``--gpus ,,``, ``gpus=[]``).
NO_GPU_NAMED = "no GPU named; list GPUs like --gpus a10g,t4,a100-80gb/1g.10gb (see `lilou gpus`)"


class Predictor:
    """Loads the per-kernel and end-to-end checkpoints once; predicts any number of models."""

    def __init__(self, backend: str = "eager", kernel_checkpoint: str | os.PathLike[str] | None = None,
                 overhead_checkpoint: str | os.PathLike[str] | None = None, launch_gap_ms: float | None = None) -> None:
        """``launch_gap_ms``: the host's issue time per kernel, for a host measured with `lilou profile ops` (the
        median of its one-element calls); default: the checkpoint's, NeuSight's 2023 hosts (about 30 us)."""
        from lilou.fusion.backends import check_backend

        self.backend = check_backend(backend)
        gap = check_launch_gap(launch_gap_ms)
        kernel_folder = _checkpoint_folder("kernel_checkpoint", kernel_checkpoint) or checkpoint_path(KERNEL_LATENCY)
        overhead_folder = _checkpoint_folder("overhead_checkpoint", overhead_checkpoint) or checkpoint_path(E2E_OVERHEAD)
        # Without the tensor-core model (a checkpoint folder that lacks it), every kernel is priced at FP32
        # rates and the warnings say so.
        tensor_folder = checkpoint_path(KERNEL_LATENCY_TENSOR, required=False)
        #: the fusion GNN and rules this predictor groups kernels with, resolved now as the other checkpoints are
        self.fusion_checkpoints = FusionCheckpoints.current()
        has_tensor = tensor_folder.exists()
        with reading_checkpoints(kernel_folder, overhead_folder, *([tensor_folder] if has_tensor else [])):
            kernel_model = KernelModel.load(kernel_folder)
            params = load_overhead(overhead_folder)
            stale = stale_kernel_note(overhead_folder, kernel_folder)  # fitted on another kernel model's weights
            # The kind first: an FP32 model in the tensor-core folder is named as such, not as a missing coverage.json.
            tensor_model = KernelModel.load(tensor_folder, TENSOR_KIND) if has_tensor else None
            self.coverage = MeasuredCoverage.load(tensor_folder) if has_tensor else None
            self.model = EndToEndModel(kernel_model, FallbackModel(**params["fallback"]),
                                       OverheadModel(**params["overhead"]), tensor_model=tensor_model)
            self._interval_notes, self._tensor_interval_note = calibration_notes(kernel_folder, has_tensor)
        # A folder LILOU_CHECKPOINTS lacks is the shipped one: said with every prediction, not silently swapped. So are
        # end-to-end constants fitted on another kernel model: once a Python warning at construction only, which a
        # service's users never saw in the JSON (audit ua43c, finding 3); the warning stays for scripts.
        if stale:
            warn(stale, StaleOverheadWarning, stacklevel=2)
        self._interval_notes = [*checkpoint_notes(), *([stale] if stale else []), *self._interval_notes]
        self.launch_gap_given = False
        if gap is not None:
            self._use_launch_gap(gap)

    # ----------------------------------------------------------------- public

    def with_launch_gap(self, launch_gap_ms: float | None) -> Predictor:
        """This predictor with another host issue time per kernel (None: itself), sharing its loaded networks and
        fusion model: cheap enough for one per request (the service's ``launch_gap_us``)."""
        gap = check_launch_gap(launch_gap_ms)
        if gap is None:
            return self
        clone = copy.copy(self)
        clone.model = copy.copy(self.model)
        clone._use_launch_gap(gap)
        return clone

    def _use_launch_gap(self, gap_ms: float) -> None:
        """Compose with ``gap_ms`` per kernel (checked) instead of the checkpoint's gap; the fitted scale stays."""
        self.model.overhead = dataclasses.replace(self.model.overhead, gap_ms=gap_ms)
        self.launch_gap_given = True

    @contextlib.contextmanager
    def reusing_kernel_rows(self) -> Iterator[None]:
        """While active, the kernel networks run once per distinct feature row across this thread's predictions
        (:meth:`KernelModel.reusing_rows`): for callers that price the same kernels at several batch sizes."""
        with contextlib.ExitStack() as stack:
            for model in (self.model.kernel_model, self.model.tensor_model):
                if model is not None:
                    stack.enter_context(model.reusing_rows())
            yield

    def prepare(self, model: str | os.PathLike[str] | bytes | ModelGraph | GraphReading, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, like: PreparedModel | None = None,
                values: Mapping[str, Sequence[InputValue]] | None = None) -> PreparedModel:
        """Read ``model`` (an ONNX path, or the file's bytes or an ``onnx.ModelProto``, read from a private temporary
        copy: :mod:`lilou.graph.in_memory`; or, with ``batch``, ``shapes`` and ``values`` None, a loaded graph or a
        file being read, :func:`lilou.graph.reading.read_graph`) and group it into kernels for this predictor's
        backend, once, for any number of predictions.

        ``like``: the same model prepared at another batch size; its kernel groups are reused when the graph has
        the same nodes (fusion follows op patterns, not sizes: docs/intervals.md, "Capacity plans")."""
        if isinstance(model, PreparedModel):
            raise LilouInputError(f"{model.name}: already prepared; pass it to predict or rank as it is")
        if like is not None and not isinstance(like, PreparedModel):  # it was an AttributeError (audit ua46)
            raise LilouInputError(f"like must be the model prepared at another batch size (a PreparedModel), not "
                                  f"{type(like).__name__}")
        if batch is not None:
            from lilou.graph.shapes import check_batch

            check_batch(batch)
            batch = int(batch)  # a numpy integer (np.arange, pandas) would reach the JSON and json.dumps refuse it
        graph = self._graph(model, batch, shapes, check_input_values(values) or None)
        graph, folded_note = _as_quantized_runtimes_run(graph)
        reusable = like is not None and like.backend == self.backend and like.partition is not None \
            and like.graph.same_structure(graph)
        kernels, warnings, partition = self._kernels(graph, like.partition if reusable else None)
        warnings += folded_note
        from lilou.graph.reading import GraphReading  # onnx is loaded by now: a graph was read

        if isinstance(model, GraphReading):
            batch = model.batch
        return PreparedModel(name=_model_name(model), graph=graph, kernels=kernels, warnings=tuple(warnings),
                             backend=self.backend, batch=batch, partition=partition)

    def predict(self, model: ModelInput, gpu: str | Device, mig: str | None = None, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
                tf32: str | None = None, values: Mapping[str, Sequence[InputValue]] | None = None) -> Prediction:
        """End-to-end latency of ``model`` (an ONNX path, a loaded graph or a :class:`PreparedModel`) on one GPU
        or MIG slice.

        ``shapes`` sets whole inputs (``{"input_ids": (8, 512)}``) or named dynamic dimensions in every input
        (``{"sequence_length": (512,)}``; :func:`lilou.graph.shapes.apply_input_shapes`); ``values`` the value of a
        run-time input that picks the work (``{"use_cache_branch": [False]}``: :mod:`lilou.graph.input_values`).
        ``precision`` overrides what the ONNX tensor types say (fp32, tf32, fp16, bf16, fp8, int8, int4, fp4);
        ``tf32`` (off, conv, on) overrides PyTorch's default for FP32 on the device (lilou.latency.kernel_model.precision)."""
        if isinstance(gpu, Device) and mig is not None:
            raise LilouInputError(f"mig={mig!r} names a slice of a GPU named by a string; {gpu.name} is a device already")
        device = gpu if isinstance(gpu, Device) else resolve_device(gpu, mig)  # bad names fail before the model is read
        prediction = self.predict_many(model, [device], batch, shapes, precision, tf32, values=values)[0]
        prediction.warnings[:0] = ambiguity_notes([gpu])
        return prediction

    def predict_many(self, model: ModelInput, devices: Iterable[Device | str], batch: int | None = None,
                     shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
                     tf32: str | None = None, values: Mapping[str, Sequence[InputValue]] | None = None
                     ) -> list[Prediction]:
        """:meth:`predict` for several devices (:class:`Device` objects, or names as ``rank`` takes them: ``a10g``,
        ``a100-80gb/1g.10gb``) in any iterable but a string; the graph is read and grouped once."""
        precision, tf32 = check_precision_options(precision, tf32)
        if isinstance(devices, str):
            raise LilouInputError(f"predict_many takes a list of devices, got the string {devices[:80]!r}")
        if isinstance(devices, bytes) or not isinstance(devices, Iterable):
            raise LilouInputError(f"predict_many takes a list of devices, got {devices!r:.80}")
        wanted = list(devices)
        if any(not isinstance(d, str | Device) for d in wanted):
            raise LilouInputError("predict_many takes devices as names ('a10g', 'a100-80gb/1g.10gb') or Device objects")
        if not wanted:
            raise LilouInputError(NO_GPU_NAMED)
        resolved = [rank_devices([d])[0] for d in wanted]  # bad names before the file
        base = self._prepared(model, batch, shapes, values)
        predictions: list[Prediction | None] = [None] * len(resolved)
        for prepared, columns in self._in_precision_by_device(base, resolved, precision):
            group = self._predictions(prepared, [resolved[j] for j in columns], precision, tf32)
            for j, prediction in zip(columns, group):
                predictions[j] = prediction
        for asked, prediction in zip(wanted, predictions):  # a family's name says which GPU it took, as in predict
            if isinstance(asked, str):
                prediction.warnings[:0] = ambiguity_notes([asked])
        return predictions

    def rank(self, model: ModelInput, gpus: str | Iterable[str | Device] | None = None, batch: int | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
             tf32: str | None = None, values: Mapping[str, Sequence[InputValue]] | None = None) -> Ranking:
        """Predicted latency on every GPU and MIG slice (or the ``gpus`` named, :func:`gpu_list`), fastest first."""
        precision, tf32 = check_precision_options(precision, tf32)
        gpus = None if gpus is None else gpu_list(gpus)
        devices = rank_devices(gpus)
        base = self._prepared(model, batch, shapes, values)
        entries: list[RankEntry] = []
        groups: list[_PricedGroup] = []
        for prepared, columns in self._in_precision_by_device(base, devices, precision):
            ranked, group = self._ranked(prepared, [devices[j] for j in columns], precision, tf32)
            entries += ranked
            groups.append(group)
        before, after = self._rank_warnings(groups)
        # Devices the host's launches hold to one latency are told apart by their GPU work: the order a faster host
        # would see (alphabetical order before session 25).
        entries.sort(key=lambda e: (e.latency_ms, e.gpu_work_ms, e.gpu, e.mig or ""))
        return Ranking(model=base.name, backend=self.backend, entries=entries,
                       warnings=ambiguity_notes(gpus) + before + power_note(self.model.kernel_model, devices)
                       + launch_bound_note(entries, self.model.overhead.gap_ms, self.launch_gap_given) + after)

    def _ranked(self, prepared: PreparedModel, devices: list[Device], precision: str | None, tf32: str | None
                ) -> tuple[list[RankEntry], _PricedGroup]:
        """:meth:`rank`'s entries of ``devices`` (unsorted), all stored alike, and what their warnings are made of."""
        graph, kernels = prepared.graph, prepared.kernels
        reading = _GraphPrecision.of(graph, precision, tf32, self.backend)
        work, shares, paths, bounds = self._priced(kernels, devices, _leading_dim(graph), reading)
        totals = shares.sum(axis=0)
        gpu_work = self.model.overhead.gpu_ms(work.work_ms).sum(axis=0)
        need = memory_needed(graph)
        need_gb = round(sum(need) / 2**30, 4)
        entries = []
        for j, (d, t, path) in enumerate(zip(devices, totals, paths)):
            support = reading.support(path, d)
            entries.append(RankEntry(d.gpu, d.mig, round(float(t), 4), path.precision, path.tf32,
                                     _rounded(bounds.interval(j)), round(float(bounds.extrapolated_share[j]), 4),
                                     fits_memory(need, d), round(float(gpu_work[j]), 4), need_gb, self.backend,
                                     precision_path=support.path, precision_note=support.note,
                                     precision_warnings=tuple(reading.notes([path], [d], self.coverage))))
        return entries, _PricedGroup(prepared, reading, devices, shares, paths, bounds, need)

    def _rank_warnings(self, groups: Sequence[_PricedGroup]) -> tuple[list[str], list[str]]:
        """The warnings of a ranking, said before the power and launch-bound notes (which are about every device
        ranked) and after them. Devices priced in two storage groups (``--precision fp8``: native and weight-only)
        get one line per fact, its shares ranging and its counts running over every device ranked: a line per group
        said the same fact twice with two ranges, and "16 of 62 devices" of a ranking of 115."""
        devices = [d for g in groups for d in g.devices]
        before: list[str] = []
        for group in groups:
            before += list(group.prepared.warnings) + group.reading.notes(group.paths, group.devices, self.coverage)
        first = groups[0].prepared.kernels
        alike = all(_same_kernels(g.prepared.kernels, first) for g in groups)
        for kernels, shares, group_devices in ([(first, np.hstack([g.shares for g in groups]), devices)] if alike else
                                               [(g.prepared.kernels, g.shares, g.devices) for g in groups]):
            before += (fallback_warning(kernels, shares) + grouped_conv_warning(kernels, shares)
                       + conv_form_warning(kernels, shares) + transposed_conv_warning(kernels, shares, group_devices)
                       + fused_attention_warning(kernels, shares))
        after = (memory_warning(devices, [g.need for g in groups for _ in g.devices])
                 + extrapolated_warning(devices, np.concatenate([g.bounds.extrapolated_share for g in groups]),
                                        _joined([g.bounds.widened for g in groups]),
                                        _joined([g.bounds.wait_share for g in groups]))
                 + mig_interval_warning(devices))
        for group in groups:
            after += self._interval_warnings(group.bounds, launch_waits=False)
        after += self._launch_wait_notes(np.concatenate([g.bounds.wait_share for g in groups
                                                         if g.bounds.wait_share is not None] or [np.zeros(0)]))
        return list(dict.fromkeys(before)), list(dict.fromkeys(after))

    def _in_precision_by_device(self, prepared: PreparedModel, devices: Sequence[Device], precision: str | None
                                ) -> list[tuple[PreparedModel, list[int]]]:
        """``prepared`` in ``precision`` (:meth:`in_precision`) for each group of ``devices`` that stores it alike,
        with the group's indices: under ``--precision fp8`` (or fp4) a GPU without the format's tensor cores runs
        weight-only kernels (FP8 weights, 16-bit activations: vLLM's FP8 Marlin), whose activations move twice the
        bytes (BERT-large in FP8 on an A100 was 25 % faster than in FP16, from 1-byte activations alone)."""
        weight_only = [runs_weight_only(precision, device) for device in devices]
        native = [j for j, alone in enumerate(weight_only) if not alone]
        upcast = [j for j, alone in enumerate(weight_only) if alone]
        groups = [(self.in_precision(prepared, precision), native)] if native else []
        if upcast:
            groups.append((self.in_precision(prepared, precision, weight_only=True), upcast))
        return groups

    def in_precision(self, prepared: PreparedModel, precision: str | None, weight_only: bool = False) -> PreparedModel:
        """``prepared`` with its floating-point tensors stored as ``precision`` stores them (``--precision``: the
        bytes follow the compute path; :mod:`lilou.graph.retype`), its kernel groups kept, less the casts the
        retyping made casts to their own type (which launch nothing); itself when nothing changes. ``weight_only``:
        the weights so, the activations in FP16 (FP8 or FP4 on a GPU without their tensor cores: :meth:`rank` and
        :meth:`predict_many` choose per device).

        ``precision`` is the whole model's, a mixed-precision file's islands included: the precision its matmuls
        mostly compute in too (a ResNet-50 whose batch norms onnxconverter-common kept in FP32, asked in FP16, kept
        its FP32 tensors and 115 cast kernels, 51.45 ms on a T4 against 24.64 for the FP16 file)."""
        said = f"--precision {precision}:"
        if precision is None or any(w.startswith(said) for w in prepared.warnings):
            return prepared  # no option, or already retyped (a prepared model the caller retyped)
        from lilou.graph.retype import batch_norms_int8_runtimes_fold, retyped, without_batch_norms, without_redundant_casts

        stored = _stored_precision(prepared.graph)
        source, folded, written, warnings = prepared.graph, [], [], prepared.warnings
        if check_precision(precision) in ("int8", "fp8"):  # an INT8 (FP8) runtime folds the batch norms after convolutions
            folded, written = batch_norms_int8_runtimes_fold(source)
            source = without_batch_norms(source, [*folded, *written])
            if folded:
                warnings = tuple(w for w in warnings if not w.startswith(f"{len(folded)} BatchNormalization(s) that "
                                                                         "the exporter folded"))
        if weight_only:
            graph = retyped(source, check_precision(precision), activations="float16")
        else:
            graph = retyped(source, check_precision(precision))
        # TF32 is FP32 storage and FP32 compute but for the matmuls and convolutions, whose path (--tf32 on) says so
        computed = "fp32" if check_precision(precision) == "tf32" else precision
        if graph is prepared.graph and computed == model_precision(graph).precision:
            return prepared  # stored so already, computed so already
        graph, dropped = without_redundant_casts(source, graph)
        if graph is not prepared.graph and prepared.partition is not None:
            partition = prepared.partition
            if dropped or folded or written:  # the kernels they sat between may be one (a linear layer's matmul and bias add)
                from lilou.fusion.predict import predict_partition

                partition = predict_partition(graph, self.backend, checkpoints=self.fusion_checkpoints)
            prepared = dataclasses.replace(prepared, graph=graph, kernels=describe_kernels(graph, partition),
                                           partition=partition)
        if weight_only:
            note = (f"{said} the file's {stored} model is priced on the GPUs without {precision.upper()} tensor "
                    f"cores as their weight-only kernels run it: {precision.upper()} weights, FP16 activations, on the "
                    "FP16 tensor cores (such kernels exist from compute capability 8.0: older GPUs are warned apart)")
        else:
            quantized = prepared.graph.dag.graph.get("quantized") and precision not in ("int8", "fp8")
            run = ("FP32 (its matmuls and convolutions in TF32 on GPUs with TF32, compute capability 8.0 and newer)"
                   if computed == "fp32" and precision != "fp32" else precision.upper())
            note = (f"{said} the file's {stored} model is priced as run in {run}, its kernels on "
                    "that path and its floating-point tensors stored so ("
                    + ("its quantized tensors too: they hold floating-point values; " if quantized else "")
                    + "integer tensors keep their types)")
        if check_precision(precision) == "int4" and any(d["op"] in ("Conv", "ConvTranspose")
                                                        for _, d in graph.dag.nodes(data=True)):
            note += "; its convolutions as FP16 ones, weights included (no runtime runs INT4 convolutions)"
        if dropped:
            note += (f"; the {len(dropped)} Cast(s) between its precisions cast to their own type, and launch no "
                     "kernel, as in a file typed so")
        if folded:
            note += (f"; the {len(folded)} BatchNormalization(s) the exporter folded into the convolutions before them "
                     f"stay folded, as {precision.upper()} runtimes (TensorRT, onnxruntime) run them and as a file "
                     "quantized so has them")
        if written:
            note += f"; {_batch_norms_folded_note(len(written), precision.upper())}"
        return dataclasses.replace(prepared, warnings=(*warnings, note))

    # ---------------------------------------------------------------- helpers

    def _prepared(self, model: ModelInput, batch: int | None, shapes, values=None) -> PreparedModel:
        """``model`` prepared for this backend: as it is when it already is, checked."""
        values = check_input_values(values) or None  # a string or a list of pairs: one line, before the file is read
        if not isinstance(model, PreparedModel):
            return self.prepare(model, batch, shapes, values=values)
        if batch is not None or shapes or values:
            raise LilouInputError(f"{model.name}: batch, shapes and values apply when a model is prepared; pass them "
                                  "to Predictor.prepare instead")
        if model.backend != self.backend:
            raise LilouInputError(f"{model.name}: prepared for the {model.backend} backend, and this predictor "
                                  f"predicts {self.backend} kernels; prepare it with Predictor(backend="
                                  f"{self.backend!r})")
        return model

    def _graph(self, model: str | os.PathLike[str] | ModelGraph, batch: int | None, shapes, values=None) -> ModelGraph:
        from lilou.graph.dag import ModelGraph

        if isinstance(model, ModelGraph):
            if batch is not None or shapes or values:
                raise LilouInputError("batch, shapes and values apply when loading a file; pass them to load_graph "
                                      "instead")
            return model
        from lilou.graph.in_memory import in_memory, model_file
        from lilou.graph.reading import GraphReading, read_graph

        if in_memory(model):  # ONNX bytes or a ModelProto: read as the file they would be, from a private folder
            with model_file(model) as path:
                return self._graph(path, batch, shapes, values)
        if not isinstance(model, str | os.PathLike | GraphReading):
            raise LilouInputError(f"model must be an ONNX file's path, its bytes, an onnx.ModelProto or a prepared "
                                  f"model, not {type(model).__name__}")
        if isinstance(model, GraphReading):
            if batch is not None or shapes or values:
                raise LilouInputError("batch, shapes and values apply when a reading starts; pass them to read_graph "
                                      "instead")
            return model.graph(meanwhile=self.load_fusion_model)
        with read_graph(model, batch=batch, shapes=shapes, values=values, backend=self.backend) as reading:
            return reading.graph(meanwhile=self.load_fusion_model)

    def load_fusion_model(self) -> None:
        """Load what grouping a graph into kernels needs first (the fusion modules, networkx, the GNN's weights).
        Reading a file runs it while the file is shaped in its child process (:mod:`lilou.graph.reading`), which a
        fresh process would otherwise wait for idle."""
        from lilou.fusion.predict import shipped_gnn

        shipped_gnn(checkpoints=self.fusion_checkpoints)

    def _kernels(self, graph: ModelGraph, partition: Partition | None = None
                 ) -> tuple[GraphKernels, list[str], Partition]:
        from lilou.fusion.predict import predict_partition

        if partition is None:
            partition = predict_partition(graph, self.backend, checkpoints=self.fusion_checkpoints)
        kernels = describe_kernels(graph, partition)
        if len(kernels) == 0:
            raise LilouInputError(f"{graph.name}: no node of the graph launches a GPU kernel, so there is no "
                                  "latency to predict (is the graph empty, or only constants and reshapes?)")
        warnings = [*graph.warnings, *partition.warnings]
        unsupported = graph.unsupported_ops
        if unsupported:
            warnings.append(f"unsupported op(s) {', '.join(unsupported)}: their kernels are predicted with the "
                            "memory-bound fallback")
        if self.backend == "eager":
            from lilou.graph.weight_only import eager_recomputed_warning

            warnings += eager_recomputed_warning(graph) + host_wait_warning(kernels)
        if self.backend != "eager":
            warnings.append(f"the per-kernel model and the launch overhead were fitted on PyTorch eager "
                            f"measurements; {self.backend} kernels are predicted with them as they are")
        if self.backend == "tvm":
            warnings += tvm_import_blockers(graph)
        return kernels, warnings, partition

    def _predictions(self, prepared: PreparedModel, devices: list[Device], precision: str | None = None,
                     tf32: str | None = None) -> list[Prediction]:
        graph, kernels, name, batch = prepared.graph, prepared.kernels, prepared.name, prepared.batch
        warnings = list(prepared.warnings)
        reading = _GraphPrecision.of(graph, precision, tf32, self.backend)
        leading = _leading_dim(graph)  # a pass over the nodes (a time-major recurrent input's batch is its second axis)
        work, shares, paths, bounds = self._priced(kernels, devices, leading, reading)
        gpu = self.model.gpu_ms(work)  # the scaled work the launch queue ran
        waits = np.maximum(shares - gpu, 0.0)
        batch = batch if batch is not None else leading
        need = memory_needed(graph)  # once, not once per device
        supports = [reading.support(path, device) for path, device in zip(paths, devices)]
        return [Prediction(model=name, gpu=device.gpu, mig=device.mig, backend=self.backend, batch=batch,
                           latency_ms=round(float(shares[:, j].sum()), 4),
                           kernels=_estimates(kernels, work, gpu, shares, waits, j, bounds),
                           warnings=warnings + reading.notes([paths[j]], [device], self.coverage)
                           + fallback_warning(kernels, shares[:, [j]]) + grouped_conv_warning(kernels, shares[:, [j]])
                           + conv_form_warning(kernels, shares[:, [j]])
                           + transposed_conv_warning(kernels, shares[:, [j]], [device])
                           + fused_attention_warning(kernels, shares[:, [j]])
                           + power_note(self.model.kernel_model, [device]) + memory_warning([device], [need])
                           + extrapolated_warning([device], bounds.extrapolated_share[j:j + 1],
                                                  _at(bounds.widened, j), _at(bounds.wait_share, j))
                           + mig_interval_warning([device])
                           + self._interval_warnings(bounds, column=j),
                           precision=paths[j].precision, tf32=paths[j].tf32,
                           precision_path=supports[j].path, precision_note=supports[j].note,
                           interval_ms=_rounded(bounds.interval(j)),
                           extrapolated_share=round(float(bounds.extrapolated_share[j]), 4),
                           fits=fits_memory(need, device))
                for j, device in enumerate(devices)]

    def _priced(self, kernels: GraphKernels, devices: Sequence[Device], batch: int | None, reading: _GraphPrecision
                ) -> tuple[KernelWork, np.ndarray, list[PrecisionPath], Intervals]:
        """Work, shares, precision paths and intervals of ``kernels`` on ``devices``. The intervals are computed on
        the devices that dominate or are dominated by them too, and kept in their order
        (:meth:`Intervals.ordered_by_dominance`): a device's bounds do not depend on which others were asked for."""
        every = with_related_devices(devices)
        work = self.model.kernel_work(kernels, every, batch, reading.path)
        shares = self.model.compose(work)
        paths = [reading.path(d) for d in every]
        count = len(devices)
        check_sane_latency(kernels, shares[:, :count], devices)
        bounds = self._intervals(kernels, work, shares, every, paths).ordered_by_dominance(every)
        return work.first(count), shares[:, :count], paths[:count], bounds.first(count)

    def _intervals(self, kernels: GraphKernels, work: KernelWork, shares: np.ndarray, devices: Sequence[Device],
                   paths: Sequence[PrecisionPath]) -> Intervals:
        """90 % intervals and extrapolation flags (lilou.plan.intervals) of every kernel on every device.
        ``--precision tf32`` is FP32 with ``--tf32 on``: only its matmuls and convolutions run in TF32 (their unit
        says so), every other kernel is an FP32 one, with FP32's measured range and band."""
        paths = [dataclasses.replace(p, precision="fp32") if p.precision == "tf32" else p for p in paths]
        dtypes = [p.precision for p in paths]
        calibration = Calibration.shipped()
        if calibration is None:
            return no_intervals(shares, dtypes)
        overhead = self.model.overhead
        return compute_intervals(kernels, shares, devices, dtypes, calibration,
                                 self.model.kernel_model.config.get("trained_on", []),
                                 requeued=lambda factor, gap: queue_shares(overhead.gpu_ms(work.work_ms * factor),
                                                                           overhead.gap_ms * gap, work.host_waits,
                                                                           work.launches),
                                 unmeasured=unmeasured_kernels(kernels, devices, paths),
                                 kernel_dtypes=band_precisions(kernel_precisions(kernels.unique, paths), kernels.unique,
                                                               devices),
                                 gpu_ms=overhead.gpu_ms(work.work_ms),
                                 gap_range=LAUNCH_GAP_RANGE_GIVEN if self.launch_gap_given else LAUNCH_GAP_RANGE)

    def _launch_wait_notes(self, wait_shares: np.ndarray) -> list[str]:
        """The note on the launch gap's range the intervals price, at the shipped gap only."""
        if self.launch_gap_given:
            return []
        return launch_wait_interval_note(float(wait_shares.max(initial=0.0)), self.model.overhead.gap_ms,
                                         LAUNCH_GAP_RANGE)

    def _interval_warnings(self, bounds: Intervals, launch_waits: bool = True, column: int | None = None
                           ) -> list[str]:
        """The notes on ``bounds``' intervals, over all its devices or (``column``) one device's alone: a
        prediction made beside others was told the largest launch wait of the group, and the other devices' FP8
        kernels had no held-out measurements (session 42). ``launch_waits``: with the note on the launch gap's range
        (a ranking says it once over its groups)."""
        columns = slice(None) if column is None else slice(column, column + 1)
        notes = list(self._interval_notes)
        if launch_waits and bounds.wait_share is not None:
            notes += self._launch_wait_notes(bounds.wait_share[columns])
        if self.launch_gap_given:
            notes.append(launch_gap_interval_note(self.model.overhead.gap_ms, LAUNCH_GAP_RANGE_GIVEN))
        if self._tensor_interval_note and any(dtype != "fp32" for dtype in bounds.dtypes[columns]):
            notes.append(self._tensor_interval_note)
        uncalibrated = bounds.uncalibrated if column is None else bounds.uncalibrated_of(column)
        if uncalibrated:
            notes.append(f"no held-out measurements of {', '.join(uncalibrated)} kernels: their 90 % "
                         f"interval is the widest of their family ({doc('intervals.md')})")
        return notes


@dataclass(frozen=True)
class _PricedGroup:
    """One storage group of a ranking's devices, as priced: what its warnings are made of."""

    prepared: PreparedModel
    reading: _GraphPrecision
    devices: list[Device]
    shares: np.ndarray          # [kernels, devices] ms
    paths: list[PrecisionPath]
    bounds: Intervals
    need: tuple[int, int]       # memory_needed


#: A predicted forward pass above this (11.6 days) is refused, not printed: no inference runs that long, and such a
#: total comes from a count that is not one (a Loop's "no bound" trip count, INT64_MAX, priced a greedy decoder at
#: 7.2e15 ms before Lilou read it as no bound).
MAX_LATENCY_MS = 1e9


def check_sane_latency(kernels: GraphKernels, shares: np.ndarray, devices: Sequence[Device]) -> None:
    """Refuse (one line, exit status 2) a prediction whose total on some device is above :data:`MAX_LATENCY_MS` or not
    finite, naming the kernel that makes most of it."""
    if shares.size == 0:
        return
    totals = shares.sum(axis=0)
    bad = [j for j, total in enumerate(totals) if not math.isfinite(total) or total > MAX_LATENCY_MS]
    if not bad:
        return
    j = bad[0]
    column = np.nan_to_num(shares[:, j], nan=np.inf)
    worst = int(np.argmax(column))
    first = kernels.nodes[worst][0] if kernels.nodes[worst] else f"#{worst}"
    raise LilouInputError(f"the prediction on {devices[j].name} is {totals[j]:.3g} ms, more than the "
                          f"{MAX_LATENCY_MS:.0e} ms (11.6 days) no forward pass takes, most of it kernel {worst} (first "
                          f"node {first!r}, {'+'.join(kernels.specs[worst].ops)}): the file states a size or count "
                          "that is not what runs (a Loop's trip count, a shape); check it and --batch/--shape/--value")


def _at(values: np.ndarray | None, j: int) -> np.ndarray | None:
    return None if values is None else values[j:j + 1]


def _joined(parts: Sequence[np.ndarray | None]) -> np.ndarray | None:
    return None if any(p is None for p in parts) else np.concatenate(parts)


def _same_kernels(a: GraphKernels, b: GraphKernels) -> bool:
    """Whether two storage groups of one graph kept the same kernels (so one warning can range over both)."""
    return len(a) == len(b) and np.array_equal(a.index, b.index) and np.array_equal(a.fallback, b.fallback)


@dataclass(frozen=True)
class _GraphPrecision:
    """What a graph computes in and the options that override it, read once per call (not per device)."""

    detected: ModelPrecision
    precision: str | None   # --precision
    tf32: str | None        # --tf32
    has_conv: bool
    has_matmul: bool
    others: tuple[tuple[str, bool, bool], ...] = ()  # (precision, has_conv, has_matmul) of the math ops' other types
    backend: str = "eager"

    @classmethod
    def of(cls, graph: ModelGraph, precision: str | None, tf32: str | None, backend: str = "eager") -> _GraphPrecision:
        """``backend`` tvm: TVM's generated kernels do not read PyTorch's TF32 flags (cudnn.allow_tf32), so its
        default is strict FP32 (``--tf32 off``), not PyTorch eager's TF32 convolutions from compute capability 8.0."""
        if backend == "tvm" and tf32 is None:
            tf32 = "off"
        # ops priced by their cost formula: a convolution on the fallback (an op of an unknown domain, such as
        # onnxruntime's NCHWc layout) runs on no tensor core, and TF32 is not said of it
        ops = {graph.dag.nodes[n]["op"] for n in graph.runtime_nodes() if graph.dag.nodes[n].get("supported", True)}
        detected = model_precision(graph)
        read = math_op_precisions(graph) if precision is None else {}
        others = tuple((p, "conv" in read[p], "gemm" in read[p]) for p in sorted(read) if p != detected.precision)
        return cls(detected, precision, tf32, has_conv=bool(ops & {"Conv", "ConvTranspose"}),
                   has_matmul=bool(ops & {"MatMul", "Gemm", "Einsum"}), others=others, backend=backend)

    @property
    def computes_fp32(self) -> bool:
        """Whether any matmul or convolution is FP32 work, which TF32 could run (an FP32 file, a mixed file's FP32
        islands; under ``--precision`` that of the option)."""
        if self.precision is not None:
            return self.precision in ("fp32", "tf32")
        return self.detected.precision in ("fp32", "tf32") or any(p == "fp32" for p, _, _ in self.others)

    def path(self, device: Device) -> PrecisionPath:
        path = precision_path(self.detected.precision, device, self.precision, self.tf32)
        if path.tf32 != "off" and not self.computes_fp32:  # an FP16 file read "tf32": "on" under --tf32 on
            path = dataclasses.replace(path, tf32="off")
        return path

    def support(self, path: PrecisionPath, device: Device) -> PrecisionSupport:
        """What runs this model's precision(s) on ``device`` (:func:`precision_support`): its GEMMs' and convolutions'
        path, and a mixed file's other precisions' (as :meth:`notes` warns of them)."""
        families = [f for f, present in (("gemm", self.has_matmul), ("conv", self.has_conv)) if present]
        others = [(kernel_path(path, other), [f for f, present in (("gemm", has_matmul), ("conv", has_conv)) if present])
                  for other, has_conv, has_matmul in self.others]
        return precision_support(device, [(path, families), *others])

    def notes(self, paths: list[PrecisionPath], devices: list[Device],
              coverage: MeasuredCoverage | None) -> list[str]:
        """The warnings for what the kernel models cannot stand behind on these paths (one per device)."""
        lines = precision_warnings(paths, has_conv=self.has_conv, has_matmul=self.has_matmul,
                                   mixed=self.precision is None and self.detected.mixed,
                                   devices=devices, coverage=coverage, retyped=self.precision is not None)
        if any(p.precision in ("fp32", "tf32") for p in paths):
            lines += tf32_unavailable(self.tf32, self.precision, devices, self.has_conv, self.has_matmul)
        lines += tf32_moot(self.tf32, self.precision, None if self.computes_fp32 else self.detected.precision)
        if self.backend == "tvm" and any((self.has_conv and runs_tf32("conv", p)) or (self.has_matmul and
                                                                                    runs_tf32("gemm", p)) for p in paths):
            lines.append("--backend tvm with TF32: priced assuming TVM's schedules run the FP32 matmuls and convolutions "
                         "on the TF32 tensor cores; TVM's generated kernels do not read PyTorch's TF32 flags, and its "
                         "default here is strict FP32 (--tf32 off)")
        for other, has_conv, has_matmul in self.others:  # the kernels priced in another precision than the model's
            other_paths = [kernel_path(p, other) for p in paths]
            lines += [line for line in precision_warnings(other_paths, has_conv=has_conv, has_matmul=has_matmul,
                                                          mixed=False, devices=devices, coverage=coverage)
                      if line not in lines]
        return lines


#: ONNX ops TVM 0.27's Relax importer cannot import (docs/fusion.md: corpus graphs with them carry eager labels only).
TVM_UNIMPORTABLE_OPS = frozenset({"LSTM", "GRU", "RNN", "Celu", "SoftmaxCrossEntropyLoss"})


def tvm_import_blockers(graph: ModelGraph) -> list[str]:
    """A warning where the graph holds an op TVM's ONNX importer is known to refuse, read from the graph alone (TVM
    is not imported): the latency is then that of kernels TVM cannot build from the file as exported. The dtype
    mismatches TVM finds in RoBERTa's and TinyLlama's exports are not visible in their ONNX types (ONNX shape
    inference refuses a binary op reading two element types), so they are not caught here."""
    for name, data in sorted(graph.dag.nodes(data=True), key=lambda item: item[1]["order"]):
        if data["op"] in TVM_UNIMPORTABLE_OPS:
            return [f"--backend tvm: TVM cannot compile this model as exported: its ONNX importer cannot import "
                    f"{data['op']} (first: node {name!r}); the latency is that of kernels TVM would fuse, had it "
                    "imported the file (`lilou fuse --backend tvm --oracle` checks)"]
    return []


def _estimates(kernels: GraphKernels, work: KernelWork, gpu: np.ndarray, shares: np.ndarray, waits: np.ndarray,
               column: int, bounds: Intervals) -> list[KernelEstimate]:
    """``gpu``: each kernel's GPU time in the running model, the work the launch queue ran (``work`` times the fitted
    end-to-end scale): ``work_ms`` was the work before the scale until session 42, 8 % above the kernel's whole
    share of a GPU-bound model (the scale is 0.922), and its sum not rank's ``gpu_work_ms``."""
    return [KernelEstimate(nodes=tuple(nodes), ops=spec.ops, type=str(work.kernel_type[i, column]),
                           latency_ms=round(float(shares[i, column]), 6), work_ms=float(gpu[i, column]),
                           host_wait_ms=round(float(waits[i, column]), 6),
                           alone_ms=float(work.work_ms[i, column]),
                           flops=int(spec.flops), bytes=int(spec.bytes),
                           compute_bound=bool(work.compute_bound[i, column]), fallback=bool(work.fallback[i]),
                           category=kernel_category(spec, bool(work.fallback[i])),
                           interval_ms=(round(float(bounds.kernel_lo[i, column]), 6),
                                        round(float(bounds.kernel_hi[i, column]), 6)),
                           extrapolated=bool(bounds.extrapolated[i, column]), role=spec.role)
            for i, (nodes, spec) in enumerate(zip(kernels.nodes, kernels.specs))]


#: Largest host issue time per kernel accepted (ms): a Python loop per op on a slow host is under 0.2 ms.
MAX_LAUNCH_GAP_MS = 1.0


def _checkpoint_folder(option: str, folder: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """A checkpoint folder given to :class:`Predictor`, checked: an int or bytes was a TypeError and a NUL byte a
    ValueError out of the path functions."""
    if folder is None:
        return None
    text = os.fspath(folder) if isinstance(folder, str | os.PathLike) else None
    if not isinstance(text, str) or "\0" in text:
        raise LilouInputError(f"{option} must be a checkpoint folder's path (a str without NUL bytes), not "
                              f"{folder!r:.80}")
    return folder


def check_launch_gap(gap_ms: float | None) -> float | None:
    """A given launch gap, checked: 0 (CUDA-graph replay: no launches between kernels) up to 1 ms."""
    if gap_ms is None:
        return None
    # numbers.Real: numpy's float32 and int64 too (np.float32(0.01) was refused as out of range, 10**400 overflowed)
    if isinstance(gap_ms, bool) or not (isinstance(gap_ms, numbers.Real)
                                        and (isinstance(gap_ms, numbers.Integral) or math.isfinite(gap_ms))
                                        and 0 <= gap_ms <= MAX_LAUNCH_GAP_MS):  # True was taken as 1 ms
        raise LilouInputError(f"launch gap {gap_ms!r:.40} ms: give 0 to {MAX_LAUNCH_GAP_MS:g} ms (0 to 1000 us) per "
                              "kernel")
    return float(gap_ms)


def _as_quantized_runtimes_run(graph: ModelGraph) -> tuple[ModelGraph, list[str]]:
    """An INT8 or FP8 file as its runtimes run it: the batch norms it writes after convolutions folded into them
    (NVIDIA ModelOpt's FP8 ResNet leaves its 20 to TensorRT), with a note; any other file as it is."""
    precision = model_precision(graph).precision
    if precision not in ("int8", "fp8"):
        return graph, []
    from lilou.graph.retype import batch_norms_int8_runtimes_fold, without_batch_norms

    restored, written = batch_norms_int8_runtimes_fold(graph)
    if not restored and not written:
        return graph, []
    return without_batch_norms(graph, [*restored, *written]), [
        f"{_batch_norms_folded_note(len(restored) + len(written), precision.upper())}: "
        "a batch norm after each convolution launches no kernel of its own there"]


def _batch_norms_folded_note(count: int, precision: str) -> str:
    return (f"the {count} BatchNormalization(s) after convolutions are folded into them, as {precision} runtimes "
            "(TensorRT, onnxruntime) run them")


def _stored_precision(graph: ModelGraph) -> str:
    """What a note calls the precision the file stores: its matmuls' (``FP16``), or with the other floating-point
    types its tensors have (``mixed FP16/FP32``: a file onnxconverter-common converted keeping some ops in FP32; an
    INT8 file's FP32 layer norms and softmaxes)."""
    from lilou.graph.precision import PRECISION_OF_DTYPE

    dominant = model_precision(graph).precision
    data = graph.dag.nodes
    others = {PRECISION_OF_DTYPE[t.dtype] for n in graph.runtime_nodes() for t in (*data[n]["inputs"], *data[n]["outputs"])
              if t is not None and t.dtype in ("float32", "float16", "bfloat16")} - {dominant}
    if not others:
        return dominant.upper()
    return "mixed " + "/".join(p.upper() for p in (dominant, *sorted(others)))


def _rounded(interval: tuple[float, float]) -> tuple[float, float]:
    return round(interval[0], 4), round(interval[1], 4)


def _leading_dim(graph: ModelGraph) -> int | None:
    """The batch of the graph's first shaped input: its leading dimension, or the second of a time-major recurrent
    layer's input (:mod:`lilou.graph.batch_axis`)."""
    from lilou.graph.batch_axis import batch_of, graph_batch_axes

    axes = None
    for tensor in graph.inputs:
        if tensor.shape:
            axes = graph_batch_axes(graph) if axes is None else axes
            return batch_of(tensor.shape, axes.get(tensor.name, 0))
    return None


def _model_name(model: str | os.PathLike[str] | ModelGraph | GraphReading | bytes) -> str:
    from lilou.graph.dag import ModelGraph
    from lilou.graph.in_memory import in_memory, in_memory_name
    from lilou.graph.reading import GraphReading

    if in_memory(model):
        return in_memory_name(model)
    if isinstance(model, GraphReading):
        return os.fspath(model.path)
    return model.name if isinstance(model, ModelGraph) else os.fspath(model)


__all__ = ["KernelEstimate", "Prediction", "Predictor", "PreparedModel", "RankEntry", "Ranking", "rank_devices"]
