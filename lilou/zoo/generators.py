"""Parametrised model generators: architectures as data, sampled from an integer seed (no torch here).

Each family has a frozen *spec* dataclass (the architecture as data), a ``sample_*``
function (seed -> spec, deterministic), and an ``nn.Module`` built from a spec
(:mod:`lilou.zoo.generator_nets`, which needs torch). Overriding a spec field
(``dataclasses.replace``) gives a controlled variant.

- ``cnn-<seed>``: stage-wise CNNs (depth, width, kernel, stride, block type, residual, norm, activation).
- ``mlp-<seed>``: stacks of Linear layers (widths, activation, optional LayerNorm, bias, and
  per-token inputs as a transformer's feed-forward block sees them).
- ``nas201-<seed>``: NAS-Bench-201 networks: one 4-node cell (6 edges, 5 op choices) stacked
  3 x N times with residual reduction blocks, as in Dong & Yang, ICLR 2020.
- ``randdag-<seed>``: random DAGs of conv / pool / norm ops with branches, residual adds,
  multiplicative gates and concatenations.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

# --- CNN family ------------------------------------------------------------------------


@dataclass(frozen=True)
class CNNSpec:
    """A stage-wise CNN: stem, stages of blocks (the first block of stages 2.. halves H and W), head."""

    depths: tuple[int, ...]  # blocks per stage
    widths: tuple[int, ...]  # output channels per stage
    kernel: int  # spatial kernel of the main convolutions
    stem_stride: int
    block: str  # "plain" (two k x k convs) | "bottleneck" (1x1, k x k, 1x1) | "depthwise" (dw k x k, 1x1)
    residual: bool
    norm: str  # "batch" | "group" | "none"
    activation: str
    image_size: int = 224
    num_classes: int = 1000


def sample_cnn(seed: int) -> CNNSpec:
    rng = random.Random(seed)
    stages = rng.randint(2, 5)
    base = rng.choice([16, 24, 32, 48, 64])
    return CNNSpec(
        depths=tuple(rng.randint(1, 3) for _ in range(stages)),
        widths=tuple(base * 2**i for i in range(stages)),
        kernel=rng.choice([1, 3, 3, 5, 7]),
        stem_stride=rng.choice([1, 2, 4]),
        block=rng.choice(["plain", "bottleneck", "depthwise"]),
        residual=rng.random() < 0.6,
        norm=rng.choice(["batch", "batch", "group", "none"]),
        activation=rng.choice(["relu", "relu", "gelu", "silu", "hardswish"]),
        image_size=rng.choice([32, 64, 128, 224]),
    )


# --- MLP family ------------------------------------------------------------------------


@dataclass(frozen=True)
class MLPSpec:
    """Linear layers ``in_features -> hidden[0] -> ... -> out_features`` with an activation between."""

    in_features: int
    hidden: tuple[int, ...]
    out_features: int
    activation: str
    layer_norm: bool
    bias: bool
    #: 0: a ``(batch, features)`` input; otherwise ``(batch, tokens, features)``, where
    #: exporters write ``MatMul`` (+ ``Add``) instead of ``Gemm``.
    tokens: int = 0


def sample_mlp(seed: int) -> MLPSpec:
    rng = random.Random(seed)
    widths = [64, 128, 256, 512, 768, 1024, 2048, 4096]
    return MLPSpec(
        in_features=rng.choice(widths[:6]),
        hidden=tuple(rng.choice(widths) for _ in range(rng.randint(1, 7))),
        out_features=rng.choice([10, 100, 1000]),
        activation=rng.choice(["relu", "relu", "gelu", "silu", "tanh", "sigmoid"]),
        layer_norm=rng.random() < 0.3,
        bias=rng.random() < 0.5,  # transformer feed-forward blocks (T5, LLaMA) often drop it
        tokens=rng.choice([0, 0, 16, 64]),
    )


# --- NAS-Bench-201 ---------------------------------------------------------------------

NAS201_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
# Cell edges in NAS-Bench-201 order: node j takes the sum of op(node i) over i < j.
NAS201_EDGES = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))


@dataclass(frozen=True)
class NAS201Spec:
    """A NAS-Bench-201 network: ``ops[k]`` is the op on edge ``NAS201_EDGES[k]`` of every cell."""

    ops: tuple[str, ...]
    channels: int = 16
    cells_per_stage: int = 5
    image_size: int = 32
    num_classes: int = 10

    @property
    def arch_str(self) -> str:
        """The benchmark's string form, e.g. ``|nor_conv_3x3~0|+|none~0|skip_connect~1|+|...|``."""
        nodes = [[f"{self.ops[k]}~{src}" for k, (dst, src) in enumerate(NAS201_EDGES) if dst == j] for j in (1, 2, 3)]
        return "+".join("|" + "|".join(node) + "|" for node in nodes)


def sample_nas201(seed: int) -> NAS201Spec:
    rng = random.Random(seed)
    return NAS201Spec(ops=tuple(rng.choice(NAS201_OPS) for _ in NAS201_EDGES))


# --- DARTS cells ------------------------------------------------------------------------

DARTS_OPS = ("sep_conv_3x3", "sep_conv_5x5", "dil_conv_3x3", "dil_conv_5x5", "max_pool_3x3", "avg_pool_3x3",
             "skip_connect")


@dataclass(frozen=True)
class DARTSSpec:
    """A DARTS-space network: each cell has 4 nodes; node j sums two ops applied to earlier nodes.

    ``genotype[2j]`` and ``genotype[2j+1]`` are (op, input) pairs of node j, inputs 0 and 1
    being the two previous cells' outputs (the DARTS search space of Liu et al., 2019).
    """

    genotype: tuple[tuple[str, int], ...]
    channels: int = 16
    cells: int = 4
    image_size: int = 32
    num_classes: int = 10


def sample_darts(seed: int) -> DARTSSpec:
    rng = random.Random(seed)
    genotype = []
    for node in range(4):
        for _ in range(2):
            genotype.append((rng.choice(DARTS_OPS), rng.randrange(node + 2)))
    return DARTSSpec(genotype=tuple(genotype), cells=rng.choice((3, 4, 5)), channels=rng.choice((8, 16, 24)))


# --- random DAGs -----------------------------------------------------------------------

UNARY_OPS = ("conv3x3", "conv1x1", "conv5x5", "dwconv3x3", "bn_relu", "maxpool3x3", "avgpool3x3", "gelu")
BINARY_OPS = ("add", "mul_sigmoid", "concat_conv1x1")


@dataclass(frozen=True)
class DAGNode:
    """One node: ``op`` applied to the outputs of earlier nodes ``inputs`` (node 0 is the stem)."""

    op: str
    inputs: tuple[int, ...]


@dataclass(frozen=True)
class RandDAGSpec:
    """A DAG of same-shape feature maps [channels, H/stem_stride, W/stem_stride]; sinks are summed into the head."""

    nodes: tuple[DAGNode, ...]
    channels: int
    stem_stride: int
    image_size: int = 64
    num_classes: int = 1000


def sample_randdag(seed: int) -> RandDAGSpec:
    rng = random.Random(seed)
    nodes: list[DAGNode] = []
    for i in range(1, rng.randint(6, 20) + 1):
        # Mostly a chain (take the previous node), with branches and long-range (residual) edges.
        main = i - 1 if rng.random() < 0.7 else rng.randrange(i)
        if i >= 2 and rng.random() < 0.35:
            other = rng.choice([j for j in range(i) if j != main])
            nodes.append(DAGNode(rng.choice(BINARY_OPS), (main, other)))
        else:
            nodes.append(DAGNode(rng.choice(UNARY_OPS), (main,)))
    return RandDAGSpec(
        nodes=tuple(nodes),
        channels=rng.choice([16, 32, 64, 96, 128]),
        stem_stride=rng.choice([1, 2, 4]),
        image_size=rng.choice([32, 64, 128, 224]),
    )
