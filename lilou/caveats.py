"""What a prediction cannot stand behind, said in its warnings: kernels on the memory-bound fallback, convolution
forms and units no source measured, fused attention, low-power boards, launch-bound devices, a model that does not
fit, intervals calibrated for other checkpoints. Each function returns a list of zero or one line for
:class:`lilou.api.Predictor` to append; the shares quoted are of the predicted time (a range over devices for
``rank``).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lilou.checkpoints import (KERNEL_LATENCY, KERNEL_LATENCY_TENSOR, checkpoint_path, in_checkout, make_remedy,
                               shipped_checkpoint_path)
from lilou.docs import doc
from lilou.graph.memory import CUDA_CONTEXT_GIB, fits_memory, usable_gib
from lilou.hardware import Device
from lilou.hardware.database import architecture_class
from lilou.latency.composition.fallback import fallback_ops
from lilou.latency.kernel_model.features import KernelBatch, power_factor
from lilou.latency.kernel_model.precision import MATH_FAMILIES, PrecisionPath, kernel_path, kernel_unit
from lilou.latency.kernel_model.transposed import load_ratios
from lilou.plan.calibration import CALIBRATION_FILE, Calibration
from lilou.plan.extrapolation import fused_attention, unmeasured_conv_forms, unmeasured_shapes

if TYPE_CHECKING:
    from lilou.latency.composition.end_to_end import GraphKernels
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.results import RankEntry


def _tf32_kernels(kernels: GraphKernels, devices: Sequence[Device], paths: Sequence[PrecisionPath]) -> np.ndarray:
    """bool [distinct kernels, devices]: FP32 GEMMs and convolutions priced on the TF32 tensor cores, a unit no
    source of the kernel table measured (their intervals are those of extrapolated kernels)."""
    kinds = [(spec.family, spec.precision) for spec in kernels.unique]
    out = np.zeros((len(kinds), len(devices)), dtype=bool)
    for j, (device, path) in enumerate(zip(devices, paths)):
        if path.tf32 != "off":
            tf32 = {kind for kind in set(kinds) if kind[0] in MATH_FAMILIES
                    and kernel_unit(kind[0], kernel_path(path, kind[1]), device) == "tf32_tensor"}
            out[:, j] = np.array([kind in tf32 for kind in kinds], dtype=bool) & ~kernels.unique_fallback
    return out


def _transposed_beyond_data(kernels: GraphKernels, devices: Sequence[Device]) -> np.ndarray:
    """bool [distinct kernels, devices]: transposed convolutions on an architecture where no source measured the
    backward-data kernel that prices them (:mod:`lilou.latency.kernel_model.transposed`)."""
    transposed = np.array([spec.transposed for spec in kernels.unique], dtype=bool) & ~kernels.unique_fallback
    measured = load_ratios().architectures
    beyond = np.array([architecture_class(d.gpu) not in measured for d in devices], dtype=bool)
    return transposed[:, None] & beyond[None, :]


def unmeasured_kernels(kernels: GraphKernels, devices: Sequence[Device], paths: Sequence[PrecisionPath]) -> np.ndarray:
    """bool [distinct kernels, devices]: kernels priced on a unit or architecture no source measured (their intervals
    are those of extrapolated kernels)."""
    return _tf32_kernels(kernels, devices, paths) | _transposed_beyond_data(kernels, devices)


def shipped_partner_notes(kernel_checkpoint: str | os.PathLike[str], has_tensor: bool) -> list[str]:
    """A warning when a kernel checkpoint other than the shipped one (``Predictor(kernel_checkpoint=...)``) left out
    GPUs that the shipped tensor-core model trained on: it replaces only the FP32 model, so a leave-T4-out checkpoint
    still priced the T4's tensor-core kernels (and TF32 convolutions) with a model trained on the T4, unsaid.
    Compared with the repository's shipped folder: under ``LILOU_CHECKPOINTS`` ``checkpoint_path`` is the user's own,
    and ``infer --gpu t4`` said nothing where ``Predictor(kernel_checkpoint=...)`` warned."""
    import json

    folder = Path(kernel_checkpoint)
    shipped = shipped_checkpoint_path(KERNEL_LATENCY)
    if not has_tensor or not folder.exists() or (shipped.exists() and folder.resolve() == shipped.resolve()):
        return []
    try:
        mine = set(json.loads((folder / "config.json").read_text()).get("trained_on") or [])
        tensor = checkpoint_path(KERNEL_LATENCY_TENSOR, required=False)
        theirs = set(json.loads((tensor / "config.json").read_text()).get("trained_on") or [])
    except (OSError, ValueError):
        return []
    left_out = sorted(g for g in theirs - mine if g in _neusight_gpus(shipped))
    if not mine or not left_out:
        return []
    whose = "the shipped ones" if tensor.resolve() == shipped_checkpoint_path(KERNEL_LATENCY_TENSOR).resolve() \
        else f"the ones in {tensor.parent}"
    return [f"kernel_checkpoint replaces only the FP32 kernel model: the tensor-core model (tensor-core and TF32 "
            f"kernels) and the end-to-end overhead are {whose}, trained on {', '.join(left_out)}, which your "
            "checkpoint left out"]


def _neusight_gpus(shipped: Path) -> set[str]:
    """The GPUs the shipped FP32 model trained on: the ones a user's FP32 checkpoint can leave out."""
    import json

    try:
        return set(json.loads((shipped / "config.json").read_text()).get("trained_on") or [])
    except (OSError, ValueError):
        return set()


def calibration_notes(kernel_checkpoint: str | os.PathLike[str], has_tensor: bool) -> tuple[list[str], str | None]:
    """(warnings for every prediction, a warning for non-FP32 ones) when the interval calibration was made for
    other kernel models than the ones loaded."""
    from lilou.plan.calibration import checkpoint_fingerprint

    partners = shipped_partner_notes(kernel_checkpoint, has_tensor)
    calibration = Calibration.shipped()
    if calibration is None:
        return [*partners, f"no interval calibration file ({CALIBRATION_FILE}): every interval is the estimate itself; "
                f"{'regenerate it with `make calibrate`' if in_checkout() else 'reinstall lilou'}"], None
    notes = partners
    if checkpoint_fingerprint(os.fspath(kernel_checkpoint)) != calibration.fingerprint:
        notes.append(f"the 90 % intervals were calibrated for another kernel model "
                     f"({calibration.data['kernel_model']['checkpoint']}, {calibration.fingerprint}); regenerate "
                     f"them for this one with {make_remedy('`make calibrate`')}")
    tensor = None
    shipped = calibration.data.get("tensor_model")
    if has_tensor and shipped is None:
        tensor = ("the 90 % intervals of non-FP32 kernels come from the FP32 model's held-out residuals, not the "
                  f"tensor-core model's that priced them ({doc('intervals.md')})")
    elif has_tensor and checkpoint_fingerprint(os.fspath(checkpoint_path(KERNEL_LATENCY_TENSOR))) != shipped["fingerprint"]:
        tensor = ("the 90 % intervals of non-FP32 GEMMs and convolutions were calibrated for another tensor-core "
                  f"model ({shipped['fingerprint']}); regenerate them with {make_remedy('`make calibrate`')}")
    return notes, tensor


def fallback_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Which kernels rest on the fallback and their share of the time (a range over devices for rank)."""
    mask = kernels.fallback
    if not mask.any():
        return []
    ops = list(dict.fromkeys(op for spec, m in zip(kernels.specs, mask) if m for op in fallback_ops(spec)))
    return [f"{int(mask.sum())} of {len(kernels)} kernels ({', '.join(ops)}) use the memory-bound fallback "
            f"(no measurements of these op kinds): {_share_text(mask, shares)} of the predicted time"]


def host_wait_warning(kernels: GraphKernels) -> list[str]:
    """The synchronising ``nonzero`` calls of an eager prediction: a data-dependent output size, and a host that waits
    for the GPU (:mod:`lilou.latency.composition.eager_calls`)."""
    waits = int(kernels.host_waits.sum())
    if not waits:
        return []
    return [f"{waits} NonZero node(s) have a data-dependent output size: eager PyTorch's nonzero copies its count to "
            "the host and waits for the GPU there (the launch queue drains, the host cannot run ahead), and Lilou "
            "sizes its output as if every element were non-zero; fewer non-zeros make it and what reads it faster"]


def _share_text(mask: np.ndarray, shares: np.ndarray) -> str:
    """The share of the predicted time on the kernels of ``mask``: one figure, or its range over devices."""
    share = 100 * shares[mask].sum(axis=0) / shares.sum(axis=0)
    low, high = float(np.min(share)), float(np.max(share))
    return f"{low:.1f} %" if round(low, 1) == round(high, 1) else f"{low:.1f} to {high:.1f} % (by device)"


def grouped_conv_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when grouped convolutions are priced by a convolution model: no source measured one
    (:func:`lilou.plan.extrapolation.unmeasured_shapes`). Depthwise ones are on the fallback and named there."""
    mask = unmeasured_shapes(KernelBatch.from_specs(kernels.unique))[kernels.index] & ~kernels.fallback
    if not mask.any():
        return []
    return [f"{int(mask.sum())} grouped convolutions: no source measured one, so they are priced by the convolution "
            f"model beyond its data (flagged extrapolated): {_share_text(mask, shares)} of the predicted time"]


def conv_form_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when 3-D or dilated convolutions are priced: every measured convolution is 2-D without dilation."""
    mask = unmeasured_conv_forms(kernels.unique)[kernels.index] & ~kernels.fallback
    forms = np.array([spec.conv_form for spec in kernels.unique], dtype=object)[kernels.index]
    if not mask.any():
        return []
    counts = ", ".join(f"{int((forms[mask] == form).sum())} {form}" for form in sorted(set(forms[mask])))
    return [f"convolutions of a form no source measured ({counts}; every measured one is 2-D without dilation): "
            f"priced by the convolution model beyond its data (flagged extrapolated): {_share_text(mask, shares)} of "
            "the predicted time"]


def transposed_conv_warning(kernels: GraphKernels, shares: np.ndarray, devices: Sequence[Device]) -> list[str]:
    """Say so when transposed convolutions run on an architecture where no backward-data kernel was measured."""
    beyond = _transposed_beyond_data(kernels, devices)
    if not beyond.any():
        return []
    mask = beyond.any(axis=1)[kernels.index]
    ratios = load_ratios()
    architectures = sorted({architecture_class(d.gpu) for d, b in zip(devices, beyond.any(axis=0)) if b})
    return [f"{int(mask.sum())} transposed convolutions (ConvTranspose): priced as the convolution whose input "
            f"gradient they compute, x{ratios.strided:.2f} when strided (the backward-data / forward ratio measured on "
            f"{', '.join(ratios.architectures)} GPUs); no source measured them on {', '.join(architectures)} (flagged "
            f"extrapolated): {_share_text(mask, shares)} of the predicted time"]


def fused_attention_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when a fused attention kernel (F.scaled_dot_product_attention) is priced: nobody measured one in eager."""
    mask = fused_attention(kernels.unique)[kernels.index]
    if not mask.any():
        return []
    return [f"{int(mask.sum())} fused attention kernel(s) (F.scaled_dot_product_attention, or an ONNX Attention "
            "node: one kernel in eager): "
            "priced as a GEMM of Q.K^T carrying both products and the softmax, reading Q, K and V once; no eager "
            f"attention kernel was measured (flagged extrapolated): {_share_text(mask, shares)} of the predicted time"]


#: Ideal kernel times (ms at peak) at which the low-power note quotes the slowdown.
_NOTE_TIMES_MS = (0.1, 100.0)


#: A device is launch-bound when its GPU work is at most this share of its latency (it waits for the host the rest).
LAUNCH_BOUND_WORK_SHARE = 0.5


#: What a launch-bound note says (:func:`launch_bound_note`): it explains a ranking's order, which a plan does not use.
LAUNCH_BOUND = "devices are launch-bound ("


def launch_bound_note(entries: Sequence[RankEntry], gap_ms: float, given: bool = False) -> list[str]:
    """Say so when two or more ranked devices are launch-bound: the host's kernel launches, not the GPU, set most of
    their latency. When they tie (to within 1 %) they are ordered by GPU work alone; otherwise their spread is said
    (a small model over every device: 115 devices within 2.3 %). The launch gap is NeuSight's 2023 hosts'
    (docs/end_to_end.md) unless the caller gave its own; a faster host shortens it, and then the GPU work decides."""
    bound = [e for e in entries if e.latency_ms > 0 and e.gpu_work_ms <= LAUNCH_BOUND_WORK_SHARE * e.latency_ms]
    if len(bound) < 2:
        return []
    names = ", ".join(e.device for e in bound[:4]) + (f" and {len(bound) - 4} more" if len(bound) > 4 else "")
    origin = "as given" if given else "measured on NeuSight's 2023 hosts"
    low, high = min(e.latency_ms for e in bound), max(e.latency_ms for e in bound)
    work = f"{min(e.gpu_work_ms for e in bound):.3f}-{max(e.gpu_work_ms for e in bound):.3f} ms"
    head = f"{len(bound)} {LAUNCH_BOUND}{names}): the host's kernel launches ({1000 * gap_ms:.0f} us each, {origin})"
    if high <= 1.01 * low:
        return [f"{head} set their predicted latency, not the GPU, so they tie and are ordered by GPU work (the "
                f"kernels' time alone, {work}), the order a faster host would see"]
    return [f"{head} set most of their predicted latency, not the GPU: they are within {100 * (high / low - 1):.1f} % "
            f"of each other ({low:.3f}-{high:.3f} ms); their GPU work alone ({work}) is what a faster host would see"]


def power_note(kernel_model: KernelModel, devices: Sequence[Device]) -> list[str]:
    """Say so when low-power boards compute below their peak in the model (lilou.latency.kernel_model.model)."""
    short, long = (float(e) for e in kernel_model.low_power_exponent(np.array(_NOTE_TIMES_MS)))
    slowed: dict[str, tuple[float, float, float]] = {}  # board -> (power W, factor for short, for long kernels)
    for device in devices:
        low, high = float(power_factor(device.board_power_w, short)), float(power_factor(device.board_power_w, long))
        if high > 1.0:
            slowed[device.gpu] = (device.board_power_w, low, high)
    span = (f"{_NOTE_TIMES_MS[0]:g} ms", f"{_NOTE_TIMES_MS[1]:g} ms")
    if len(slowed) == 1:
        (gpu, (power, low, high)), = slowed.items()
        return [f"{gpu} is a {power:g} W board: compute-bound kernels are predicted {low:.2f}x (kernels of "
                f"{span[0]} at peak) to {high:.2f}x ({span[1]}) slower than its spec-sheet peak, for its power "
                f"limit (learned from the P4 and T4 kernel rows; {doc('kernel_model.md')})"]
    if slowed:
        boards = ", ".join(f"{gpu} ({power:g} W) {low:.2f}-{high:.2f}x" for gpu, (power, low, high) in slowed.items())
        return [f"compute-bound kernels are predicted slower than spec-sheet peak on low-power boards, for their "
                f"power limit (kernels of {span[0]} to {span[1]} at peak): {boards} ({doc('kernel_model.md')})"]
    return []


def ambiguity_notes(names: str | Iterable[object] | None) -> list[str]:
    """For each GPU named (``GPU`` or ``GPU/PROFILE``) that stands for several boards, the note that says which one
    is priced; once each. Anything but a name (a :class:`lilou.hardware.Device`) names no family."""
    from lilou.hardware.database import ambiguity_note
    from lilou.hardware.names import name_list, split_mig

    notes = []
    for raw in name_list(names if names is not None else ()):
        if not isinstance(raw, str):
            continue
        with_slice = split_mig(raw)  # CUDA's and GPU feature discovery's names of a slice's device
        gpu = (with_slice[0] if with_slice else raw.partition("/")[0]).strip()
        note = ambiguity_note(gpu) if gpu else None
        if note and note not in notes:
            notes.append(note)
    return notes


def extrapolated_warning(devices: Sequence[Device], shares: Sequence[float], widened: Sequence[bool] | None = None,
                         wait_shares: Sequence[float] | None = None) -> list[str]:
    """Say so when every kernel of the model is extrapolated on a device (``shares``: each device's share of the
    predicted time on extrapolated kernels, :mod:`lilou.plan.extrapolation`): no kernel of its kinds was measured in
    range on GPUs of its class (H100 and L4 rows are held back; an A10G's FP32 BERT-base kernels). Only the widened
    interval said so.

    ``widened`` (:attr:`lilou.plan.intervals.Intervals.widened`): whether the flags widened each device's end-to-end
    interval. It said "its 90 % interval is widened for it" on every device (session 41), also where the wider
    bands went on GPU work that hides behind the host's launches (``wait_shares``: the share of the estimate
    waiting for them) and the interval was the in-range one: one line per case.

    Every kernel is the whole share (the extrapolated kernels' sum over the same kernels' sum: 1.0 exactly). It was
    99.95 % of it until 2026-12-07, which said "every kernel" of ResNet-50 in FP8 at batch 64 on an H100-SXM's 1g.10gb
    slice with 1 of its 121 kernels in range (share 0.9996), and not of another at 0.99949 (0.9995 in the JSON)."""
    whole = [j for j, share in enumerate(shares) if share >= 1.0]
    if not whole:
        return []
    head = ("every kernel of this model is extrapolated (no measured kernel of its kinds lies in range on GPUs of that "
            "class, dtype and family): the prediction rests on other GPUs' measurements")
    wider = [j for j in whole if widened is None or widened[j]]
    same = [j for j in whole if j not in wider]
    lines = []
    if wider:
        lines.append(f"{devices_text([devices[j].name for j in wider], len(devices))}: {head}, and its 90 % interval is "
                     "widened for it")
    if same:
        waits = [float(wait_shares[j]) for j in same] if wait_shares is not None else [0.0]
        span = (f"{min(waits) * 100:.0f} %" if max(waits) - min(waits) < 0.005
                else f"{min(waits) * 100:.0f} to {max(waits) * 100:.0f} %")
        lines.append(f"{devices_text([devices[j].name for j in same], len(devices))}: {head}; its kernels' 90 % intervals "
                     "are widened for it, the model's is not: the wider bands go on the GPU work only, which the host's "
                     f"kernel launches hide ({span} of the estimate is waiting for them; the interval carries the launch "
                     f"gap's range instead), or they are no wider than the in-range bands ({doc('intervals.md')})")
    return lines


#: The share of an estimate waiting for the host's launches from which the launch gap's range is named.
LAUNCH_WAIT_NOTE_SHARE = 0.1


def launch_wait_interval_note(wait_share: float, gap_ms: float, gap_range: tuple[float, float]) -> list[str]:
    """Where the host's launch waits are a share of an estimate (``wait_share``, the largest over the devices): the
    interval prices them over the launch gap's range (:data:`lilou.latency.composition.overhead.LAUNCH_GAP_RANGE`),
    an observed range of five hosts, not a calibrated one."""
    if wait_share < LAUNCH_WAIT_NOTE_SHARE:
        return []
    lo, hi = (gap_ms * 1000 * f for f in gap_range)
    return [f"up to {wait_share * 100:.0f} % of the estimate is waiting for the host's kernel launches: its 90 % interval prices "
            f"the launch gap from {lo:.1f} to {hi:.1f} us (the estimate's {gap_ms * 1000:.1f}), the spread of NeuSight's "
            "five 2023 hosts, not a calibrated 90 % range (no measured whole model waits on its launches); a faster "
            "host (a recent CPU, CUDA graphs, TensorRT) is below it: give its gap with --launch-gap-us"]


def mig_interval_warning(devices: Sequence[Device]) -> list[str]:
    """Say so when a device is a MIG slice: no source measured one, so its interval takes the farthest tier's band
    (:func:`lilou.plan.intervals.device_tier`) and nothing checked it."""
    slices = [d.name for d in devices if d.mig is not None]
    if not slices:
        return []
    return [f"{devices_text(slices, len(devices))}: no source measured a MIG slice; the 90 % interval takes the band of "
            "an architecture with no measured GPU (the widest tier) and is not validated against any slice's "
            f"measurements ({doc('intervals.md')})"]


def launch_gap_interval_note(gap_ms: float, gap_range: tuple[float, float]) -> str:
    """The note for a launch gap given by the caller (``--launch-gap-us``): the intervals price it over one host's
    call-to-call spread (:data:`lilou.latency.composition.overhead.LAUNCH_GAP_RANGE_GIVEN`), not the host-to-host one."""
    lo, hi = (gap_ms * 1000 * f for f in gap_range)
    return (f"the launch gap given ({gap_ms * 1000:g} us per kernel) is priced from {lo:.3g} to {hi:.3g} us in the 90 % "
            "intervals (one host's call-to-call spread, the widest of NeuSight's five hosts), not over other hosts; their "
            f"bands were calibrated with the shipped gap (NeuSight's 2023 hosts; {doc('intervals.md')})")


def devices_text(names: Sequence[str], total: int) -> str:
    """Which of ``total`` devices a warning is about: the one name, or "3 of 62 devices (a, b, c, ...)" with the
    dots only when names are left out."""
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} of {total} devices ({shown})"


def memory_warning(devices: Sequence[Device], needs: Sequence[tuple[int, int]]) -> list[str]:
    """Say so when the weights and the activations live at the peak cannot fit a device's memory (``needs``: what
    :func:`lilou.graph.memory.memory_needed` returns, for each device: a model retyped for some devices needs another
    amount there). The figures quoted are the first short device's."""
    short = [(d, need) for d, need in zip(devices, needs) if not fits_memory(need, d)]
    if not short:
        return []
    gib = 2**30
    first, (weights, activation) = short[0]
    where = devices_text([d.name for d, _ in short], len(devices))
    return [f"the model does not fit in memory on {where}: weights {weights / gib:,.2f} GiB + activations at their peak "
            f"{activation / gib:,.2f} GiB > {round(usable_gib(first), 2):g} GiB (its {round(first.memory_gib, 2):g} "
            f"less {CUDA_CONTEXT_GIB:g} GiB of CUDA context){'' if len(short) == 1 else ' on ' + first.name}; the prediction "
            "assumes it would run"]
