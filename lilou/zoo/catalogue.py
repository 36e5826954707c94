"""The zoo catalogue: names -> entries, without torch (``lilou zoo list`` runs on the base install).

Names are either fixed catalogue names (``resnet50``, ``gpt3_27`` ...) or generator
names ``<family>-<seed>`` (``cnn-7``, ``mlp-0``, ``nas201-42``, ``randdag-3``); any
non-negative integer seed is valid and builds the same network every time. Building
a model is :mod:`lilou.zoo.registry`'s job (it needs the ``zoo`` extra).
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

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

GENERATORS: dict[str, tuple[Callable[[int], Any], str]] = {
    # family: (seed -> spec, description); lilou.zoo.registry builds the module of a spec
    "cnn": (generators.sample_cnn, "random CNN: depth/width/kernel/stride/block/residual/norm"),
    "mlp": (generators.sample_mlp, "random MLP: widths, activation, optional LayerNorm"),
    "nas201": (generators.sample_nas201, "NAS-Bench-201 cell (5 ops, 4 nodes) stacked 3x5"),
    "darts": (generators.sample_darts, "DARTS-space cells (sep/dil convs, pools, skips), 3-5 cells"),
    "randdag": (generators.sample_randdag, "random DAG with branches, gates and residual adds"),
}
_GENERATOR_NAME = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<seed>\d+)$")


def _hf_entry(name: str, family: str, batch: int, size: int, description: str) -> ZooEntry:
    kind = hf.SPECS[name].kind
    seq, image = (size, None) if kind == "text" else (None, size)
    return ZooEntry(name, family, kind, batch, seq, image, description)


_CATALOGUE: dict[str, ZooEntry] = {row[0]: _hf_entry(*row) for row in _HF_ENTRIES}


def _generator_entry(family: str, seed: int) -> ZooEntry:
    spec = GENERATORS[family][0](seed)
    image = getattr(spec, "image_size", None)
    description = f"{GENERATORS[family][1]} (any seed: {family}-<seed>)"
    return ZooEntry(f"{family}-{seed}", family, "generator", 1, None, image, description)


def _corpus_entry(name: str) -> ZooEntry:
    form, op = decomp.parse(name)  # type: ignore[misc]
    spec = decomp.OPS[op]
    where = {"op": "alone", "lin": "after a Linear, then a sum", "conv": "after a Conv2d, then a mean"}[form]
    return ZooEntry(name, "decomp", "generator", decomp.example_batch(name), None, None,
                    f"decomposition corpus: {spec.kind} {op} {where} (tiny shapes)")


def list_models() -> list[ZooEntry]:
    """The catalogue, seed 0 of every generator family, then the decomposition corpus (:mod:`lilou.zoo.decomp`)."""
    return [*_CATALOGUE.values(), *(_generator_entry(family, 0) for family in GENERATORS),
            *(_corpus_entry(name) for name in decomp.corpus_names())]


def parse_generator(name: str) -> tuple[str, int] | None:
    """``(family, seed)`` of a generator name (``cnn-7`` -> ``("cnn", 7)``), or None when ``name`` is not one."""
    match = _GENERATOR_NAME.match(name)
    if match and match["family"] in GENERATORS:
        return match["family"], int(match["seed"])
    return None


def get_entry(name: str) -> ZooEntry:
    """The entry for ``name``; unknown names raise :class:`LilouInputError` naming the closest ones."""
    if name in _CATALOGUE:
        return _CATALOGUE[name]
    generator = parse_generator(name)
    if generator is not None:
        return _generator_entry(*generator)
    if decomp.parse(name) is not None:
        return _corpus_entry(name)
    known = [*_CATALOGUE, *(f"{family}-0" for family in GENERATORS), *decomp.corpus_names()]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `lilou zoo list`"
    raise LilouInputError(f"unknown zoo model {name!r}{hint}")
