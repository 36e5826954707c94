"""The zoo catalogue: names -> entries, and ``build(name)`` -> a ready-to-export module.

Names are either fixed catalogue names (``resnet50``, ``gpt3_27`` ...) or generator
names ``<family>-<seed>`` (``cnn-7``, ``mlp-0``, ``nas201-42``, ``randdag-3``); any
non-negative integer seed is valid and builds the same network every time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from lilou.errors import LilouInputError
from lilou.zoo import decomp, generators, hf

Kind = Literal["vision", "text", "generator"]


@dataclass(frozen=True)
class ZooEntry:
    """One catalogue line. ``seq`` is set for text models, ``image_size`` for image inputs."""

    name: str
    family: str
    kind: Kind
    batch: int
    seq: int | None
    image_size: int | None
    description: str


@dataclass(frozen=True)
class BuiltModel:
    """A module in eval mode with example inputs, ready for ``torch.onnx.export``.

    ``fake`` means the parameters are FakeTensors: shapes and dtypes only, no memory,
    so the module can be exported (weight-free) but not run on real data.
    """

    name: str
    module: nn.Module
    args: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    output_name: str
    fake: bool = False

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


# --- catalogue ---------------------------------------------------------------------------

_HF_ENTRIES: tuple[tuple[str, str, int, int, str], ...] = (
    # name, family, default batch, default seq / image size, description
    ("resnet18", "resnet", 1, 224, "ResNet-18 (ResNetForImageClassification, basic blocks)"),
    ("resnet50", "resnet", 1, 224, "ResNet-50 v1.5 (bottleneck [3,4,6,3]; 25.6M params, 4.1 GMAC)"),
    ("convnext-tiny", "convnext", 1, 224, "ConvNeXt-T (depths [3,3,9,3], widths 96..768)"),
    ("mobilenetv2", "mobilenet", 1, 224, "MobileNetV2 1.0 (PyTorch-style padding)"),
    ("efficientnet-b0", "efficientnet", 1, 224, "EfficientNet-B0 (width 1.0, depth 1.0)"),
    ("regnety-400mf", "regnet", 1, 224, "RegNetY-400MF (depths [1,3,6,6], group width 8, SE)"),
    ("vit-b16", "vit", 1, 224, "ViT-B/16 (12 layers, hidden 768), eager attention"),
    ("swin-tiny", "swin", 1, 224, "Swin-T (window 7, depths [2,2,6,2]), eager attention"),
    ("deit-small", "deit", 1, 224, "DeiT-S/16 (12 layers, hidden 384, 6 heads)"),
    ("bert-base", "bert", 1, 128, "BERT-base encoder (BertModel), last hidden state"),
    ("bert-large", "bert", 1, 128, "BERT-large encoder (BertModel), last hidden state"),
    ("gpt2", "gpt2", 1, 128, "GPT-2 small (GPT2LMHeadModel, 124M), logits"),
    ("opt-125m", "opt", 1, 128, "OPT-125m (OPTForCausalLM), logits"),
    ("t5-base-encoder", "t5", 1, 128, "T5-base encoder (T5EncoderModel), last hidden state"),
    ("bart-base-encoder", "bart", 1, 128, "BART-base encoder (BartModel's encoder), last hidden state"),
    ("roberta-base", "roberta", 1, 128, "RoBERTa-base encoder (RobertaModel)"),
    ("distilbert-base", "distilbert", 1, 128, "DistilBERT-base (6 layers)"),
    ("albert-base", "albert", 1, 128, "ALBERT-base v2 (shared layers, factorised embeddings)"),
    ("electra-small", "electra", 1, 128, "ELECTRA-small discriminator encoder"),
    ("gpt-neo-125m", "gptneo", 1, 128, "GPT-Neo 125M (alternating global/local attention), logits"),
    ("tinyllama-1.1b", "llama", 1, 128, "TinyLlama 1.1B (Llama: RMSNorm, SwiGLU, rotary, GQA), logits"),
    ("bloom-560m", "bloom", 1, 128, "BLOOM-560m (ALiBi attention), logits"),
    ("mobilevit-small", "mobilevit", 1, 256, "MobileViT-S (convs + transformer blocks)"),
    ("dinov2-small", "dinov2", 1, 224, "DINOv2 ViT-S/14 backbone, last hidden state"),
    ("beit-base", "beit", 1, 224, "BEiT-base/16 (relative position bias)"),
    ("poolformer-s12", "poolformer", 1, 224, "PoolFormer-S12 (pooling token mixer)"),
    ("segformer-b0", "segformer", 1, 224, "SegFormer-B0 semantic segmentation (150 classes)"),
    # NeuSight model_configs/<name>.json; batch and seq as in its end-to-end latency data.
    ("bert", "bert", 8, 512, "NeuSight bert.json: BERT-base, BertLMHeadModel"),
    ("bert_large", "bert", 8, 512, "NeuSight bert_large.json: BERT-large, BertLMHeadModel"),
    ("gpt2_med", "gpt2", 4, 1024, "NeuSight gpt2_med.json: GPT-2 medium (355M), GPT2LMHeadModel"),
    ("gpt2_large", "gpt2", 4, 1024, "NeuSight gpt2_large.json: GPT-2 large (774M), GPT2LMHeadModel"),
    ("gpt2_xl", "gpt2", 4, 1024, "NeuSight gpt2_xl.json: GPT-2 XL (1.5B), GPT2LMHeadModel"),
    ("gpt3_xl", "gpt3", 2, 2048, "NeuSight gpt3_xl.json: GPT-3 XL-like (d 3072, 24 layers), GPT2LMHeadModel"),
    ("gpt3_27", "gpt3", 2, 2048, "NeuSight gpt3_27.json: GPT-3 2.7B (d 2560, 32 layers), GPT2LMHeadModel"),
    ("gpt3_67", "gpt3", 2, 2048, "NeuSight gpt3_67.json: GPT-3 6.7B (d 4096, 32 layers), GPT2LMHeadModel"),
    ("gpt3_13", "gpt3", 2, 2048, "NeuSight gpt3_13.json: GPT-3 13B (d 5120, 40 layers), GPT2LMHeadModel"),
    ("opt", "opt", 2, 2048, "NeuSight opt.json: one-layer OPT (d 512), OPTForCausalLM"),
    ("opt_13", "opt", 2, 2048, "NeuSight opt_13.json: OPT-1.3B, OPTForCausalLM"),
    ("switchxl4", "switch", 1, 512,
     "NeuSight switchxl4.json: Switch Transformer, 4 experts (static capacity dispatch), seq2seq logits"),
)

_GENERATORS: dict[str, tuple[Callable[[int], Any], Callable[[Any], nn.Module], str]] = {
    # family: (seed -> spec, spec -> module, description)
    "cnn": (generators.sample_cnn, generators.CNN, "random CNN: depth/width/kernel/stride/block/residual/norm"),
    "mlp": (generators.sample_mlp, generators.MLP, "random MLP: widths, activation, optional LayerNorm"),
    "nas201": (generators.sample_nas201, generators.NAS201Net, "NAS-Bench-201 cell (5 ops, 4 nodes) stacked 3x5"),
    "darts": (generators.sample_darts, generators.DARTSNet, "DARTS-space cells (sep/dil convs, pools, skips), 3-5 cells"),
    "randdag": (generators.sample_randdag, generators.RandDAG, "random DAG with branches, gates and residual adds"),
}
_GENERATOR_NAME = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<seed>\d+)$")


def _hf_entry(name: str, family: str, batch: int, size: int, description: str) -> ZooEntry:
    kind = hf.SPECS[name].kind
    seq, image = (size, None) if kind == "text" else (None, size)
    return ZooEntry(name, family, kind, batch, seq, image, description)


_CATALOGUE: dict[str, ZooEntry] = {row[0]: _hf_entry(*row) for row in _HF_ENTRIES}


def _generator_entry(family: str, seed: int) -> ZooEntry:
    spec = _GENERATORS[family][0](seed)
    image = getattr(spec, "image_size", None)
    description = f"{_GENERATORS[family][2]} (any seed: {family}-<seed>)"
    return ZooEntry(f"{family}-{seed}", family, "generator", 1, None, image, description)


def _corpus_entry(name: str) -> ZooEntry:
    form, op = decomp.parse(name)  # type: ignore[misc]
    spec = decomp.OPS[op]
    where = {"op": "alone", "lin": "after a Linear, then a sum", "conv": "after a Conv2d, then a mean"}[form]
    return ZooEntry(name, "decomp", "generator", decomp.example_batch(name), None, None,
                    f"decomposition corpus: {spec.kind} {op} {where} (tiny shapes)")


def list_models() -> list[ZooEntry]:
    """The catalogue, seed 0 of every generator family, then the decomposition corpus (:mod:`lilou.zoo.decomp`)."""
    return [*_CATALOGUE.values(), *(_generator_entry(family, 0) for family in _GENERATORS),
            *(_corpus_entry(name) for name in decomp.corpus_names())]


def _parse_generator(name: str) -> tuple[str, int] | None:
    match = _GENERATOR_NAME.match(name)
    if match and match["family"] in _GENERATORS:
        return match["family"], int(match["seed"])
    return None


def get_entry(name: str) -> ZooEntry:
    """The entry for ``name``; unknown names raise :class:`LilouInputError` naming the closest ones."""
    if name in _CATALOGUE:
        return _CATALOGUE[name]
    generator = _parse_generator(name)
    if generator is not None:
        return _generator_entry(*generator)
    if decomp.parse(name) is not None:
        return _corpus_entry(name)
    known = [*_CATALOGUE, *(f"{family}-0" for family in _GENERATORS), *decomp.corpus_names()]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `lilou zoo list`"
    raise LilouInputError(f"unknown zoo model {name!r}{hint}")


# --- building ------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_parameters() -> Iterator[None]:
    """Build modules whose parameters are FakeTensors: right shape and dtype, no memory.

    Only parameters are faked (by intercepting ``nn.Module.register_parameter``);
    buffers and every other tensor a constructor makes stay real, so code that
    computes in ``__init__`` (``torch.linspace(...).tolist()``) still works and small
    buffers keep their values. transformers' weight initialisation is skipped: it is
    pointless on fake tensors and some of it (``trunc_normal_``) reads values.
    Weight tying still happens. This is how a 13B-parameter GPT is exported with
    well under a GB of memory. The patch is process-wide while active: not thread-safe.
    """
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from transformers import PreTrainedModel

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    register_parameter = nn.Module.register_parameter
    initialize_weights = PreTrainedModel.initialize_weights

    def register_fake_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not isinstance(param, FakeTensor):
            with mode:
                fake = torch.empty(param.shape, dtype=param.dtype, device=param.device)
            param = nn.Parameter(fake, requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    nn.Module.register_parameter = register_fake_parameter  # type: ignore[method-assign]
    PreTrainedModel.initialize_weights = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        PreTrainedModel.initialize_weights = initialize_weights  # type: ignore[method-assign]


def _positive(option: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise LilouInputError(f"{option} must be a positive integer, got {value}")


def _check_shape_options(entry: ZooEntry, seq: int | None, image_size: int | None,
                         overrides: dict[str, Any]) -> None:
    _positive("--seq", seq)
    _positive("--image-size", image_size)
    if seq is not None and entry.seq is None:
        raise LilouInputError(f"{entry.name} does not take a sequence length (--seq); it is not a text model")
    if image_size is not None and entry.image_size is None:
        raise LilouInputError(f"{entry.name} does not take an image size (--image-size)")
    if seq is not None and entry.name in hf.SPECS:
        limit = hf.max_positions(entry.name, overrides)
        if limit is not None and seq > limit:
            raise LilouInputError(f"{entry.name} supports sequences up to {limit} tokens, got --seq {seq}")


def _build_hf(entry: ZooEntry, batch: int, seq: int | None, image_size: int | None,
              overrides: dict[str, Any]) -> BuiltModel:
    spec = hf.SPECS[entry.name]
    if spec.kind == "vision":
        size = image_size or entry.image_size
        if "image_size" in spec.config:  # models with position embeddings sized for the image
            overrides = {"image_size": size, **overrides}
        module = hf.build_hf(entry.name, overrides)
        args: tuple[torch.Tensor, ...] = (torch.zeros(batch, 3, size, size),)
    else:
        module = hf.build_hf(entry.name, overrides)
        shape = (batch, seq or entry.seq or 1)
        args = tuple(torch.zeros(shape, dtype=torch.long) for _ in spec.inputs)
    return BuiltModel(entry.name, module, args, spec.inputs, spec.output)


def _build_generator(entry: ZooEntry, batch: int, image_size: int | None, overrides: dict[str, Any]) -> BuiltModel:
    family, seed = _parse_generator(entry.name)  # type: ignore[misc]
    sample, make, _ = _GENERATORS[family]
    if image_size is not None:
        overrides = {**overrides, "image_size": image_size}
    try:
        spec = dataclasses.replace(sample(seed), **overrides)
    except TypeError as exc:
        raise LilouInputError(f"bad override for {entry.name}: {exc}") from None
    module = make(spec).eval()
    if isinstance(spec, generators.MLPSpec):
        tokens = (spec.tokens,) if spec.tokens else ()
        args: tuple[torch.Tensor, ...] = (torch.zeros(batch, *tokens, spec.in_features),)
    else:
        args = (torch.zeros(batch, 3, spec.image_size, spec.image_size),)
    return BuiltModel(entry.name, module, args, ("x",), "output")


def build(name: str, batch: int | None = None, seq: int | None = None, image_size: int | None = None,
          *, fake: bool = False, **overrides: Any) -> BuiltModel:
    """Build zoo model ``name`` (random weights, eval mode) with example inputs.

    ``batch`` / ``seq`` / ``image_size`` default to the entry's values. ``overrides``
    change the architecture: transformers config fields for catalogue models
    (``build("gpt2", n_layer=2)``), spec fields for generators (``build("cnn-3", kernel=5)``).
    ``fake=True`` builds with weight-free FakeTensor parameters (see :func:`fake_parameters`).
    Weights are drawn from a fixed seed, so a build is reproducible.
    """
    entry = get_entry(name)
    _positive("--batch", batch)
    _check_shape_options(entry, seq, image_size, overrides)
    requested_batch = batch
    batch = batch or entry.batch
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        torch.manual_seed(0)
        if fake:
            stack.enter_context(fake_parameters())
        if entry.family == "decomp":
            if image_size is not None or seq is not None or overrides:
                raise LilouInputError(f"{name} is a decomposition-corpus entry: it takes --batch only")
            module, args = decomp.build_entry(name, requested_batch)
            built = BuiltModel(name, module, args, ("x",), "output")
        elif entry.kind == "generator":
            built = _build_generator(entry, batch, image_size, overrides)
        else:
            built = _build_hf(entry, batch, seq, image_size, overrides)
    return dataclasses.replace(built, fake=fake)


def parameter_count(name: str, **overrides: Any) -> int:
    """Number of parameters of ``name`` (counted on a weight-free build: fast even for 13B models)."""
    return build(name, fake=True, **overrides).num_parameters
