"""The decomposition corpus: aten ops that exporters write as several ONNX nodes, alone and in small sequences.

Users' exports meet the fusion model with forms the zoo's architecture families
rarely hold: an erf-form GELU (``Div, Erf, Add, Mul, Mul``), Softplus, ELU, an L2
``F.normalize``, a bidirectional LSTM. Each entry here is one such aten op on tiny
shapes (exporting is the slow part, not the size), either alone (``op-<op>``) or
inside a sequence that gives it real neighbours: ``lin-<op>`` (Linear -> op -> sum
over the last axis) and ``conv-<op>`` (Conv2d -> op -> mean over the image). The
fusion dataset exports every entry under several exporter settings
(:data:`lilou.fusion.dataset.CORPUS_EXPORTERS`) and labels it with the oracles.

Every entry has an ``op`` key (the aten op it is about); the leave-op-out split of
``make bench-fusion`` holds out every entry of some keys. ``kind`` is the coarse
class of the op (activation, norm, loss, softmax, pool, rnn).

Left out on purpose: a hand-written swish (``x * torch.sigmoid(x)``). Its ONNX graph
is node for node the one ``nn.SiLU`` exports (``Sigmoid``, ``Mul`` of the same
input), but eager runs it as two kernels (two aten calls) where SiLU runs one: the
two labels would contradict each other on identical inputs. The GNN follows SiLU.

This module is the corpus as data (names, kinds, input layouts) and imports no torch;
the modules themselves are built by :mod:`lilou.zoo.decomp_nets`.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Feature width of the tiny inputs: (2, 6, 16) token tensors and (1, 4, 8, 8) images.
WIDTH = 16
CHANNELS = 4


@dataclass(frozen=True)
class OpSpec:
    """One aten op of the corpus. ``layout`` says which input it takes: ``tokens`` (2, 6, 16) or ``image``
    (1, 4, 8, 8); :data:`lilou.zoo.decomp_nets.MAKERS` builds the op for a feature/channel width."""

    op: str
    kind: str
    layout: str
    sequences: tuple[str, ...] = ("lin", "conv")


def _ops() -> list[OpSpec]:
    act = "activation"
    return [
        OpSpec("gelu-erf", act, "tokens"),
        OpSpec("gelu-tanh", act, "tokens"),
        OpSpec("silu", act, "tokens"),
        OpSpec("mish", act, "tokens"),
        OpSpec("softplus", act, "tokens"),
        OpSpec("elu", act, "tokens"),
        OpSpec("selu", act, "tokens"),
        OpSpec("celu", act, "tokens"),
        OpSpec("hardswish", act, "image"),
        OpSpec("hardsigmoid", act, "image"),
        OpSpec("leaky-relu", act, "image"),
        OpSpec("relu6", act, "image"),
        OpSpec("layer-norm", "norm", "tokens", sequences=("lin",)),
        OpSpec("rms-norm", "norm", "tokens", sequences=("lin",)),
        OpSpec("l2-normalize", "norm", "tokens"),
        OpSpec("l1-normalize", "norm", "tokens"),
        OpSpec("group-norm", "norm", "image", sequences=("conv",)),
        OpSpec("instance-norm", "norm", "image", sequences=("conv",)),
        OpSpec("batch-norm", "norm", "image", sequences=("conv",)),
        OpSpec("batch-norm-train", "norm", "image", sequences=("conv",)),
        OpSpec("softmax", "softmax", "tokens", sequences=("lin",)),
        OpSpec("log-softmax", "softmax", "tokens", sequences=("lin",)),
        OpSpec("mse-loss", "loss", "tokens", sequences=("lin",)),
        OpSpec("smooth-l1-loss", "loss", "tokens", sequences=("lin",)),
        OpSpec("bce-logits-loss", "loss", "tokens", sequences=("lin",)),
        OpSpec("cross-entropy", "loss", "logits", sequences=("lin",)),
        OpSpec("max-pool", "pool", "image", sequences=("conv",)),
        OpSpec("avg-pool", "pool", "image", sequences=("conv",)),
        OpSpec("avg-pool-ceil", "pool", "image", sequences=("conv",)),
        OpSpec("adaptive-avg-pool", "pool", "image", sequences=("conv",)),
        OpSpec("adaptive-max-pool", "pool", "image", sequences=("conv",)),
        OpSpec("lstm", "rnn", "tokens", sequences=("lin",)),
        OpSpec("lstm-bi2", "rnn", "tokens", sequences=("lin",)),
        OpSpec("gru", "rnn", "tokens", sequences=("lin",)),
        OpSpec("gru-bi", "rnn", "tokens", sequences=("lin",)),
        OpSpec("rnn-tanh", "rnn", "tokens", sequences=("lin",)),
    ]


#: op key -> spec, in a fixed order.
OPS: dict[str, OpSpec] = {spec.op: spec for spec in _ops()}


#: The leading (batch) dimension of each layout's example input.
EXAMPLE_BATCH = {"image": 1, "logits": 12, "tokens": 2}


def input_layout(form: str, spec: OpSpec) -> str:
    """The layout of the example input of ``form`` (``op``, ``lin``, ``conv``) of ``spec``."""
    if form == "op":
        return spec.layout
    if form == "conv":
        return "image"
    return "logits" if spec.layout == "logits" else "tokens"


def example_batch(name: str) -> int:
    """The batch (leading dimension) a corpus entry exports with when no ``--batch`` is given."""
    form, op = parse(name)  # type: ignore[misc]
    return EXAMPLE_BATCH.get(input_layout(form, OPS[op]), EXAMPLE_BATCH["tokens"])


def corpus_names() -> list[str]:
    """Every corpus entry's zoo name: ``op-<op>`` alone, then ``lin-<op>`` / ``conv-<op>`` sequences."""
    names = [f"op-{op}" for op in OPS]
    names += [f"{form}-{op}" for op, spec in OPS.items() for form in spec.sequences]
    return names


def parse(name: str) -> tuple[str, str] | None:
    """``(form, op)`` of a corpus name, or None when ``name`` is not one."""
    form, _, op = name.partition("-")
    if op in OPS and (form == "op" or form in OPS[op].sequences):
        return form, op
    return None


def op_of(name: str) -> str:
    """The op key of a corpus name (``lin-gelu-erf`` -> ``gelu-erf``)."""
    parsed = parse(name)
    if parsed is None:
        raise KeyError(name)
    return parsed[1]
