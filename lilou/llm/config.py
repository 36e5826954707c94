"""Decoder-LLM architectures: the built-in table (``models.yaml``) or a Hugging Face ``config.json``.

Only the fields that size the kernels and the memory are read. Hugging Face configs spell them
differently per family (Llama/Mistral/Qwen/Mixtral ``num_hidden_layers``, GPT-NeoX/OPT/Falcon
``n_layer``/``ffn_dim``/``n_head_kv`` ...); :data:`_ALIASES` maps every spelling to one name, and a
config lacking one is refused with the missing fields named.
"""
from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from lilou.errors import LilouInputError

#: Model types whose MLP is one up projection + activation + down (no gate), and those with LayerNorm.
#: (Apertus, Arcee AFM, Jais 2, Persimmon, nanochat and BioGPT: one up projection, as transformers builds them; they
#: were priced with a gate, a third more MLP: transformers' default ApertusConfig at 8.86 B parameters, 6.98 B.)
UNGATED_TYPES = frozenset({"gpt2", "gptj", "gpt_neox", "phi", "opt", "falcon", "bloom", "starcoder2", "nemotron",
                           "gpt_bigcode", "mpt", "apertus", "apertus1p5_text", "arcee", "jais2", "persimmon", "nanochat",
                           "biogpt"})
LAYERNORM_TYPES = frozenset({"gpt2", "gptj", "gpt_neox", "phi", "opt", "falcon", "bloom", "starcoder2",
                             "nemotron", "gpt_bigcode", "olmo", "mpt", "dbrx", "phimoe", "jais2", "persimmon",
                             "biogpt"})
#: Layer kinds the step composition models; the others resolve by name but are refused at predict time.
MODELLED_KINDS = frozenset({"transformer"})


@dataclass(frozen=True)
class LLMConfig:
    """What one decoder LLM's kernels and memory depend on."""

    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int          # dense MLP width (per expert for MoE models without moe_intermediate)
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True     # gate + up + down (SwiGLU / GeGLU) or up + down
    norm: str = "rmsnorm"      # rmsnorm | layernorm
    experts: int = 0           # routed experts (0: dense)
    experts_per_token: int = 0
    moe_intermediate: int = 0  # width of one routed expert
    shared_expert_intermediate: int = 0
    kind: str = "transformer"  # transformer | mamba | hybrid | rwkv
    sliding_window: int = 0    # tokens a local-attention layer attends over (0: every layer attends to all)
    sliding_layers: int = 0    # how many of the layers are local (Gemma 2 half, Gemma 3 five in six, Mistral all)
    attention_softcap: float = 0.0  # Gemma 2's attn_logit_softcapping (0: none)
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): keys and values are projected from one latent of
    # ``kv_lora_rank`` dims (plus a ``qk_rope_head_dim`` rotary part), which is all the KV cache holds; ``head_dim``
    # is then the query/key head (the non-rotary and rotary parts), ``v_head_dim`` the value head.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0       # queries through a low-rank projection too (0: one q projection)
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    dense_layers: int = 0      # the first layers of a MoE model that keep a dense MLP (first_k_dense_replace)
    # How the checkpoint stores its weights (its quantization_config): a --dtype (fp8, int8, int4, fp4), or "" for
    # none or a format Lilou does not price (said in ``quantization_note``).
    quantization: str = ""
    quantization_note: str = ""
    # The type the checkpoint's 16/32-bit weights are stored in (its torch_dtype; transformers 5 writes dtype): bf16,
    # fp16 or fp32, or "" where the config does not say. vLLM's --dtype auto serves a checkpoint in it.
    stored_dtype: str = ""
    # Parts the checkpoint keeps in 16 bits beside its quantised layers (its modules_to_not_convert: gpt-oss's
    # "attention" and "router"), and the bytes per weight its scales add where they differ from the format's
    # default (MXFP4: one 8-bit scale per 32 weights); both apply only when priced at the checkpoint's own dtype.
    unquantised: tuple[str, ...] = ()
    quantization_group_bytes: float | None = None
    # A format Lilou does not price (8-bit GPTQ, bitsandbytes): the bits per weight its checkpoint stores, scales
    # included (0: not known), for the warning that its 16-bit weights overstate the memory.
    unpriced_bits: float = 0.0
    # An INT4 checkpoint's group size where it is not 128 (AWQ/GPTQ group_size 64): its scales are counted at it.
    quantization_group: int = 0
    # The checkpoint's quantization group or block along the widths tensor parallelism splits (AWQ/GPTQ group_size,
    # FP8 weight_block_size, compressed-tensors group_size / block_structure; 0: none, or per channel): each rank's
    # share of a quantised width must be a whole number of them for vLLM to load it (LLMPredictor refuses the TP).
    quantization_block: int = 0
    max_context: int = 0       # max_position_embeddings: the longest context the model takes (0: not known)
    # Where max_context comes from, for the warning ("max_position_embeddings", "... x rope_scaling factor 4 (yarn)"),
    # and whether the positions are learned embeddings (GPT-2, OPT, GPT-BigCode): no context past them runs at all.
    context_source: str = ""
    learned_positions: bool = False
    # What a config.json holds that the steps do not price, or price approximately (a vision tower, chunked
    # attention as a window): said in every prediction's warnings.
    notes: tuple[str, ...] = ()
    source: str = ""
    params_b: float | None = None   # published total parameters (billions), where the source gives it

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (see the fields above)."""
        return self.kv_lora_rank > 0

    @property
    def latent_width(self) -> int:
        """What one token's KV cache holds per layer under MLA: the latent and the rotary key part."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (all but the dense first ones of a MoE model; none of a dense model)."""
        return max(0, self.layers - self.dense_layers) if self.moe else 0

    @property
    def windowed_layers(self) -> int:
        """Layers that attend over a sliding window (0 when the model has none)."""
        return self.sliding_layers if self.sliding_window > 0 else 0

    @property
    def expert_width(self) -> int:
        return self.moe_intermediate or self.intermediate

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    def parameters(self) -> dict[str, int]:
        """Parameter counts by part (embedding, LM head, attention, MLP/experts, norms), biases left out."""
        h = self.hidden
        if self.mla:
            q = h * self.q_lora_rank + self.q_lora_rank * self.q_width if self.q_lora_rank else h * self.q_width
            nope = self.head_dim - self.qk_rope_head_dim
            attention = (q + h * self.latent_width + self.kv_lora_rank * self.heads * (nope + self.v_head_dim)
                         + self.heads * self.v_head_dim * h)
        else:
            attention = h * (self.q_width + 2 * self.kv_width) + self.q_width * h
        dense = self.mlp_matrices * h * self.intermediate
        if self.moe:
            routed = self.experts * self.mlp_matrices * h * self.expert_width + h * self.experts
            routed += self.mlp_matrices * h * self.shared_expert_intermediate
            if self.shared_expert_intermediate and self.model_type == "qwen2_moe":
                routed += h  # Qwen2-MoE's shared_expert_gate (hidden -> 1)
            mlp = self.moe_layers * routed + (self.layers - self.moe_layers) * dense
        else:
            mlp = self.layers * dense
        return {"embedding": self.vocab * h, "lm_head": 0 if self.tied_embeddings else self.vocab * h,
                "attention": self.layers * attention, "mlp": mlp, "norms": (2 * self.layers + 1) * h}

    @property
    def total_parameters(self) -> int:
        return sum(self.parameters().values())


# ----------------------------------------------------------------------------------- built-in table


@functools.cache
def _table() -> dict[str, LLMConfig]:
    text = resources.files("lilou.llm").joinpath("models.yaml").read_text(encoding="utf-8")
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(text, Loader=loader)["models"]
    return {entry["name"]: LLMConfig(**entry) for entry in entries}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@functools.cache
def _index() -> dict[str, str]:
    """Spellings -> canonical name: the full Hugging Face id and the part after the organisation."""
    index: dict[str, str] = {}
    short: dict[str, list[str]] = {}
    for name in _table():
        index[_key(name)] = name
        short.setdefault(_key(name.rsplit("/", 1)[-1]), []).append(name)
    for key, names in short.items():
        if len(names) == 1:
            index.setdefault(key, names[0])
    # A fine-tune has its base model's architecture: "Llama-3.1-8B" finds "Llama-3.1-8B-Instruct" when every
    # built-in of that base name has one architecture (the JSON's "model" then names the config used).
    bases: dict[str, list[str]] = {}
    for name in _table():
        organisation, _, model_part = name.rpartition("/")
        base = _without_tune_suffix(model_part)
        if base:
            for spelling in (base, f"{organisation}/{base}"):
                bases.setdefault(_key(spelling), []).append(name)
    for key, names in bases.items():
        if len({_architecture(_table()[n]) for n in names}) == 1:
            index.setdefault(key, sorted(names)[0])
    # Common spellings: "llama-3-8b", "Meta-Llama-3-8B-Instruct" and "mixtral-8x7b" find Meta-Llama-3-8B and
    # Mixtral-8x7B-v0.1 (:func:`_common_key`), where every built-in so spelled has one architecture ("mistral-7b" is
    # v0.1 with its window or v0.3 without: not guessed, the suggestions say both).
    common: dict[str, list[str]] = {}
    for name in _table():
        common.setdefault(_common_key(name), []).append(name)
    for key, names in common.items():
        if key and len({_architecture(_table()[n]) for n in names}) == 1:  # the shortest: the base, not a tune
            index.setdefault(key, min(names, key=lambda n: (len(n.rsplit("/", 1)[-1]), n)))
    return index


#: A version suffix of a release (``-v0.1``, ``-v2``).
_VERSION = re.compile(r"v\d+(\.\d+)*")


def _common_key(name: str) -> str:
    """``name`` without what common spellings of one model differ by: the organisation, a ``Meta-`` prefix, and the
    fine-tune (``-Instruct``, ``-chat``, ``-it``, ``-hf``) and version (``-v0.1``) suffixes, in any order and case
    (``meta-llama/Meta-Llama-3-8B-Instruct`` and ``llama-3-8b`` both ``llama38b``)."""
    words = name.rsplit("/", 1)[-1].split("-")
    if len(words) > 1 and words[0].lower() == "meta":
        words = words[1:]
    while len(words) > 1 and (words[-1].lower() in _TUNE_SUFFIXES or _VERSION.fullmatch(words[-1].lower())):
        words = words[:-1]
    return _key("-".join(words))


def _architecture(config: LLMConfig) -> tuple:
    """What a config's kernels and memory depend on: every field but its name and provenance."""
    return tuple(getattr(config, f.name) for f in fields(config)
                 if f.name not in ("name", "source", "params_b", "max_context", "quantization", "quantization_note",
                                   "notes", "context_source", "learned_positions", "quantization_block",
                                   "unpriced_bits", "quantization_group"))


#: Dash-separated name suffixes of fine-tunes that keep the base model's architecture.
_TUNE_SUFFIXES = ("instruct", "chat", "it", "hf")


def _without_tune_suffix(model_part: str) -> str | None:
    """``Llama-3.1-8B-Instruct`` -> ``Llama-3.1-8B``; None when the name has no such suffix."""
    words = model_part.split("-")
    cut = len(words)
    while cut > 1 and words[cut - 1].lower() in _TUNE_SUFFIXES:
        cut -= 1
    return "-".join(words[:cut]) if cut < len(words) else None


def builtin_models() -> list[str]:
    """Names of the built-in configs (Hugging Face ids), sorted."""
    return sorted(_table(), key=str.lower)


def builtin_name(name: str) -> str | None:
    """The built-in id ``name`` spells (any case, organisation optional, a base name for its fine-tune, a common
    spelling of one architecture: :func:`_common_key`), or None."""
    index = _index()
    return index.get(_key(name)) or index.get(_common_key(name))


def builtin_config(name: str) -> LLMConfig:
    """A built-in config by Hugging Face id or its model part (``Llama-3.1-8B-Instruct``), any case."""
    found = builtin_name(name)
    if found is None:
        spellings: dict[str, list[str]] = {}  # lower-case full id or model part -> full ids
        for full in builtin_models():
            for spelling in (full.lower(), full.rsplit("/", 1)[-1].lower()):
                spellings.setdefault(spelling, []).append(full)
        # names that start with what was typed first ("llama-3": the Llama 3 models, not llama-13B, the closest
        # spelling), then names that hold it, then close spellings
        wanted = name.lower().rsplit("/", 1)[-1]
        starting = [s for s in spellings if s.rsplit("/", 1)[-1].startswith(wanted)]
        holding = [s for s in spellings if wanted in s and s not in starting]
        close = difflib.get_close_matches(name.lower(), list(spellings), n=5, cutoff=0.5)
        def closest_first(found: list[str]) -> list[str]:
            # the longest shared start first ("llama-3.1-8bb": Llama-3.1-8B-Instruct before llama-13B, which
            # difflib rated closer), then difflib's ratio
            def key(spelling: str) -> tuple[int, float, str]:
                part = spelling.rsplit("/", 1)[-1]
                return (-len(os.path.commonprefix([wanted, part])),
                        -difflib.SequenceMatcher(None, wanted, part).ratio(), spelling)
            return sorted(found, key=key)

        ranked = (closest_first(starting) + closest_first(holding) + closest_first(close)) if len(wanted) >= 3 \
            else close
        suggestions = list(dict.fromkeys(full for spelling in ranked for full in spellings[spelling]))[:5]
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise LilouInputError(f"unknown LLM {name!r}{hint} (a built-in name from `lilou llm --list`, or the path "
                              "of a Hugging Face config.json)")
    return _table()[found]


# ------------------------------------------------------------------------------- Hugging Face configs

#: Field -> the spellings of it in Hugging Face configs, first match wins.
_ALIASES: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model", "dim"),  # n_embed: BLOOM's (BloomConfig takes it)
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num", "n_kv_heads"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate": ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "d_ff"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),  # the last: ERNIE 4.5
    "experts_per_token": ("num_experts_per_tok", "experts_per_token", "moe_top_k", "moe_k"),
    "moe_intermediate": ("moe_intermediate_size",),
    "shared_expert_intermediate": ("shared_expert_intermediate_size",),
    "shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "dense_layers": ("first_k_dense_replace", "num_dense_layers"),  # the second: AFMoE's
    "kv_lora_rank": ("kv_lora_rank",),
    "q_lora_rank": ("q_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "max_context": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "max_seq_len"),
}
_REQUIRED = ("layers", "hidden", "heads", "vocab")


def _named(field: str) -> str:
    """A field with its Hugging Face spellings, for error lines: ``layers (num_hidden_layers / n_layer ...)``."""
    return f"{field} ({' / '.join(_ALIASES[field])})"


def _first(config: dict[str, Any], field: str) -> Any:
    for key in _ALIASES[field]:
        if config.get(key) is not None:
            return config[key]
    return None


#: Hugging Face model types that generate no tokens one by one (encoders), or do so with an encoder beside the
#: decoder: ``lilou llm`` prices decoder-only steps, so their configs are refused rather than priced as one.
ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta",
                           "deberta-v2", "camembert", "mpnet", "ernie", "modernbert", "nomic_bert", "megatron-bert",
                           "mobilebert", "squeezebert", "convbert", "funnel", "layoutlm", "xlm", "flaubert",
                           "roformer", "nezha", "rembert", "canine", "luke", "big_bird", "longformer", "vit",
                           "clip_vision_model", "dinov2", "wav2vec2", "hubert",
                           # BERT-family encoders transformers also builds as *ForCausalLM (audit s47: priced as LLMs)
                           "roberta-prelayernorm", "xlm-roberta-xl", "data2vec-text", "roc_bert", "xmod"})
ENCODER_DECODER_TYPES = frozenset({"t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper",
                                   "blenderbot", "prophetnet", "led", "encoder-decoder", "switch_transformers",
                                   "blenderbot-small", "bigbird_pegasus", "plbart", "mvp"})


def _check_decoder(config: dict[str, Any], model_type: str, name: str) -> None:
    if model_type in ENCODER_TYPES:
        raise LilouInputError(f"{name}: an encoder (model_type {model_type!r}), not a decoder LLM; lilou llm prices "
                              "token-by-token generation; predict the encoder's ONNX export with lilou infer")
    if model_type in ENCODER_DECODER_TYPES or config.get("is_encoder_decoder") is True:
        raise LilouInputError(f"{name}: an encoder-decoder model (model_type {model_type!r}); lilou llm prices "
                              "decoder-only LLMs; predict its ONNX exports (encoder, decoder step) with lilou infer")


#: Model types whose transformers config ties the LM head to the embedding when ``tie_word_embeddings`` is left out
#: (``AutoConfig.for_model(t).tie_word_embeddings`` in transformers 5.25); the others untie it. A Gemma 2 config
#: without the field was counted with its own LM head: Gemma-2-2B at 3.20 B parameters, 2.61 B in truth.
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "cohere2", "falcon", "gpt2", "opt",
                             "bloom", "starcoder2", "gpt_bigcode", "mpt", "smollm3", "ernie4_5", "ernie4_5_moe"})
#: The model types Falcon's first configs name themselves by, before it moved into transformers.
_FALCON_ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon"}
#: transformers' defaults for the fields a multimodal config's ``text_config`` leaves out, by its model type (Gemma
#: 3's ``gemma3_text`` holds only what differs from them, LLaVA-1.5's ``llama`` hardly more than its vocabulary).
_NESTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "max_position_embeddings": 131072},
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "sliding_window": 4096,
                "max_position_embeddings": 131072},
}


def _unpriced_parts(config: dict[str, Any]) -> tuple[str, ...]:
    """What a multimodal config holds beside the text decoder the steps price: a vision tower, cross-attention."""
    notes = []
    if isinstance(config.get("vision_config"), dict):
        notes.append("the model's vision encoder is not priced (its weights, and the prefill of an image's tokens): "
                     "the text decoder is, on text tokens")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    crossed = text.get("cross_attention_layers")
    if isinstance(crossed, list) and crossed:
        notes.append(f"{len(crossed)} cross-attention layers (to the image's tokens) are priced as the decoder's "
                     "self-attention layers, their cache growing with the text")
    return tuple(notes)


def _llama4(config: dict[str, Any], name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Llama 4's text config in the fields the steps read: every ``interleave_moe_layer_step``-th layer routes to
    its experts and one shared expert, both ``intermediate_size`` wide; the other layers are dense, as wide as
    ``intermediate_size_mlp`` (Maverick: 24 of 48 layers; Scout: all). The RoPE layers attend within chunks of
    ``attention_chunk_size`` tokens, priced as a window of that size (at most twice a chunk's work: a query
    attends to its chunk's start, half a window on average). It was read as a MoE in every layer without the
    shared expert: Maverick at 778 B parameters (400.7 B), Scout with 11 B active (17 B)."""
    out = dict(config)
    step = config.get("interleave_moe_layer_step", 1)
    layers, expert = config.get("num_hidden_layers"), config.get("intermediate_size")
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise LilouInputError(f"{name}: interleave_moe_layer_step is {step!r:.40}, not a positive whole number")
    if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 and expert is not None:
        out["moe_intermediate_size"] = expert
        out["shared_expert_intermediate_size"] = expert
        out["first_k_dense_replace"] = layers - layers // step  # their order does not change the cost
        if config.get("intermediate_size_mlp") is not None:
            out["intermediate_size"] = config["intermediate_size_mlp"]
    chunk = config.get("attention_chunk_size")
    if chunk is None or not isinstance(layers, int) or isinstance(layers, bool) or not 0 < layers <= SIZE_LIMITS["layers"]:
        return out, ()  # a layer count no model has is refused by name after this (a list of 2^62 ran out of memory)
    rope = config.get("no_rope_layers")
    chunked = (sum(1 for uses_rope in rope[:layers] if uses_rope) if isinstance(rope, list) and rope
               else layers - layers // 4)  # transformers' default: every fourth layer global, without RoPE
    out["sliding_window"] = chunk
    out["layer_types"] = ["chunked_attention"] * chunked + ["full_attention"] * (layers - chunked)
    return out, (f"{chunked} of the {layers} layers attend within chunks of {chunk} tokens: priced as a sliding "
                 "window of that size, at most twice their attention's work",)


#: Model types whose layers are not all attention: state-space (Mamba) and recurrent (RWKV) models, and hybrids of
#: them or of linear attention with attention layers (transformers' and vLLM's spellings).
RECURRENT_TYPES: dict[str, str] = {
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba"), "mamba"),
    **dict.fromkeys(("rwkv", "rwkv5", "rwkv6", "rwkv7"), "rwkv"),
    **dict.fromkeys(("jamba", "bamba", "zamba", "zamba2", "nemotron_h", "granitemoehybrid", "falcon_h1", "plamo2"),
                    "mamba"),
    "recurrent_gemma": "recurrent (RG-LRU)", "lfm2": "short convolution", "qwen3_next": "linear_attention",
    "minimax": "linear_attention", "xlstm": "xLSTM"}
#: The ``layer_types`` entries of attention layers (GraniteMoeHybrid spells a full-attention layer "attention").
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention"})


def _non_attention_layers(config: dict[str, Any], model_type: str) -> tuple[str, str] | None:
    """The kind of the layers a config holds beside attention (``mamba``, ``rwkv``, ``linear_attention`` ...) and
    where it says so, or None for an attention-only decoder. Hybrids (Jamba, Granite 4.0-H, Falcon-H1, Qwen3-Next)
    were priced as transformers with every layer attention: Jamba at 92 B parameters (52 B), Qwen3-Next's KV cache 4x;
    pure Mamba and RWKV configs were refused as lacking an MLP width or heads, inviting the fields to be added."""
    types = config.get("layer_types")
    if isinstance(types, list):
        other = [kind for kind in types if isinstance(kind, str) and kind not in ATTENTION_LAYER_TYPES]
        if other:
            kind = max(dict.fromkeys(other), key=other.count)
            return kind, f"{other.count(kind)} of the {len(types)} layer_types are {kind!r}"
    if model_type in RECURRENT_TYPES:
        return RECURRENT_TYPES[model_type], f"model_type {model_type!r}"
    if model_type.endswith("_h") or config.get("hybrid_override_pattern"):
        return "mamba", f"model_type {model_type!r}" + (", hybrid_override_pattern" * bool(config.get(
            "hybrid_override_pattern")))
    for key, kind in (("full_attention_interval", "linear_attention"), ("attn_layer_period", "mamba"),
                      ("layers_block_type", "mamba"), ("mamba_d_state", "mamba"), ("ssm_cfg", "mamba")):
        if config.get(key) is not None:
            return kind, f"its {key}"
    architectures = config.get("architectures")
    for architecture in architectures if isinstance(architectures, list) else ():
        for word, kind in (("Mamba", "mamba"), ("Rwkv", "rwkv"), ("RWKV", "rwkv"), ("Hybrid", "mamba")):
            if isinstance(architecture, str) and word in architecture:
                return kind, f"architecture {architecture[:60]!r}"
    return None


#: Fields of layers that are not alike or not all counted (Gemma 3n's and Gemma 4's): per-layer embeddings
#: (``hidden_size_per_layer_input``: 2 B of Gemma 4's 5.1 B parameters), head sizes per layer (``per_layer_config``:
#: its global layers' 512-wide KV heads) and layers sharing another's KV cache (``num_kv_shared_layers``).
UNMODELLED_LAYER_FIELDS = ("hidden_size_per_layer_input", "per_layer_config", "num_kv_shared_layers")


def _check_uniform_layers(config: dict[str, Any], name: str) -> None:
    """Refuse a config whose layers Lilou would size wrongly without a word (:data:`UNMODELLED_LAYER_FIELDS`):
    transformers' default Gemma 4 text config was priced at 2.94 B parameters (5.08 B), its global layers' KV cache
    at half its size."""
    found = [key for key in UNMODELLED_LAYER_FIELDS if config.get(key) not in (None, 0, {}, [], False)]
    if found:
        raise LilouInputError(f"{name}: {', '.join(found)} (per-layer embeddings, head sizes or shared KV caches, as in "
                              "Gemma 3n and Gemma 4) are not modelled: its weights and KV cache would be mispriced")


def _nested_blocks(config: dict[str, Any], model_type: str, name: str) -> dict[str, Any]:
    """MPT's and DBRX's widths in the spellings the others use: MPT's MLP is ``expansion_ratio`` x ``d_model`` wide
    (GELU, no gate) and its ``attn_config`` may hold ``kv_n_heads``; DBRX's ``ffn_config`` holds its experts
    (``moe_num_experts`` of ``ffn_hidden_size``, GLU, ``moe_top_k`` per token) and its ``attn_config`` the KV heads.
    Both were refused as lacking an MLP width."""
    out = dict(config)
    attention = config.get("attn_config") if isinstance(config.get("attn_config"), dict) else {}
    if attention.get("kv_n_heads") is not None and config.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = attention["kv_n_heads"]
    if model_type == "mpt" and config.get("expansion_ratio") is not None and _first(config, "intermediate") is None:
        ratio, width = config["expansion_ratio"], config.get("d_model")
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and isinstance(width, int) \
                and not isinstance(width, bool):
            out["intermediate_size"] = ratio * width  # a fraction is refused by name after this
        else:
            raise LilouInputError(f"{name}: expansion_ratio is {ratio!r:.40} and d_model {width!r:.40}, not numbers")
    ffn = config.get("ffn_config")
    if model_type == "dbrx" and isinstance(ffn, dict):
        for mine, theirs in (("intermediate_size", "ffn_hidden_size"), ("num_local_experts", "moe_num_experts"),
                             ("num_experts_per_tok", "moe_top_k")):
            if ffn.get(theirs) is not None:
                out[mine] = ffn[theirs]
        out["moe_intermediate_size"] = out.get("intermediate_size")
    return out


def config_from_dict(config: dict[str, Any], name: str) -> LLMConfig:
    """An :class:`LLMConfig` from a parsed Hugging Face config (a nested ``text_config`` is used when present)."""
    notes = _unpriced_parts(config)
    nested = next((key for key in ("text_config", "llm_config") if isinstance(config.get(key), dict)), None)
    if nested is not None:  # InternVL's language model is its llm_config
        text = config[nested]
        config = {**config, **_NESTED_DEFAULTS.get(str(text.get("model_type")), {}), **text}
    model_type = str(config.get("model_type") or "unknown")
    model_type = _FALCON_ALIASES.get(model_type, model_type)
    _check_decoder(config, model_type, name)
    other = _non_attention_layers(config, model_type)
    if other is not None:
        raise LilouInputError(f"{name} has {other[0]} layers ({other[1]}); Lilou models transformer decoders only")
    _check_uniform_layers(config, name)
    if model_type in ("mpt", "dbrx"):
        config = _nested_blocks(config, model_type, name)
    if model_type in ("llama4", "llama4_text"):
        config, chunked = _llama4(config, name)
        notes += chunked
    values = {field: _first(config, field) for field in _ALIASES}
    missing = [_named(field) for field in _REQUIRED if values[field] is None]
    if model_type == "falcon" and not config.get("new_decoder_architecture", False):
        # Falcon-7B style: one KV head with multi_query, else one per query head (num_kv_heads is ignored)
        values["kv_heads"] = 1 if config.get("multi_query", True) else values["heads"]
    if model_type == "gpt_bigcode":
        # StarCoder, SantaCoder, WizardCoder, Granite-20B-code: multi_query (GPTBigCodeConfig's default: true) is one
        # KV head, c_attn hidden x (hidden + 2 x head_dim); it was read as a KV head per query head (KV 48x too big)
        multi_query = True if config.get("multi_query") is None else config["multi_query"]
        if not isinstance(multi_query, bool):
            raise LilouInputError(f"{name}: multi_query is {multi_query!r:.40}, not true or false")
        values["kv_heads"] = 1 if multi_query else values["heads"]
    hidden = values["hidden"]
    if values["intermediate"] is None:
        if model_type in ("falcon", "gpt_neox", "gptj", "gpt2", "bloom", "opt") and hidden is not None:
            values["intermediate"] = 4 * _whole(hidden, name, "hidden")  # their configs leave the 4x MLP implicit
        else:
            missing.append(_named("intermediate"))
    if missing:
        raise LilouInputError(f"{name}: the config lacks {', '.join(missing)}")
    ints = {field: _whole(value, name, field) for field, value in values.items() if value is not None}
    heads = ints["heads"]
    if min(ints["layers"], ints["hidden"], heads, ints["vocab"], ints["intermediate"]) <= 0:
        raise LilouInputError(f"{name}: layers, hidden size, heads, vocabulary and MLP width must be positive")
    _check_optional(ints, name)
    _check_sizes(ints, name)
    if not ints.get("experts"):
        _check_no_unread_experts(config, name)
    latent = _latent_attention(ints, name)
    head_dim = latent.pop("head_dim", 0) or ints.get("head_dim") or ints["hidden"] // heads
    shared = ints.get("shared_expert_intermediate", 0) or ints.get("shared_experts", 0) * ints.get("moe_intermediate", 0)
    if head_dim <= 0:
        raise LilouInputError(f"{name}: hidden size {ints['hidden']} is smaller than its {heads} attention heads "
                              "and no head_dim is given")
    tied = config.get("tie_word_embeddings")
    if tied is not None and not isinstance(tied, bool):  # "false" (a string) read as true: the LM head went
        raise LilouInputError(f"{name}: tie_word_embeddings is {tied!r:.40}, not true or false")
    if ints.get("experts") and ints.get("dense_layers", 0) >= ints["layers"]:
        raise LilouInputError(f"{name}: {_named('dense_layers')} is {ints['dense_layers']}, not fewer than the "
                              f"{ints['layers']} layers of a mixture of experts (it made the whole model dense)")
    if ints.get("experts"):
        ints["dense_layers"] = _dense_layers(config, ints["layers"], ints.get("dense_layers", 0), name)
    window, sliding = sliding_window_layers(config, ints["layers"], model_type, name)
    quantization, quantization_note = checkpoint_format(config.get("quantization_config"))
    unquantised = _not_converted(config.get("quantization_config")) if quantization else ()
    group_bytes = 1 / 32 if quantization and config["quantization_config"].get("quant_method") == "mxfp4" else None
    block = quantization_block(config.get("quantization_config")) if quantization else 0
    group = 0
    if quantization == "int4" and group_bytes is None and block and block != INT4_GROUP:
        # AWQ/GPTQ's FP16 scale and 4-bit zero point per group, at the checkpoint's group (64: twice 128's bytes)
        group, group_bytes = block, (2 + 0.5) / block
    softcap = config.get("attn_logit_softcapping")
    max_context, context_source = _context_limit(config, ints.get("max_context", 0), model_type)
    return LLMConfig(
        name=name, model_type=model_type, layers=ints["layers"], hidden=ints["hidden"], heads=heads,
        kv_heads=ints.get("kv_heads") or heads, head_dim=head_dim, intermediate=ints["intermediate"],
        vocab=ints["vocab"], tied_embeddings=model_type in TIED_BY_DEFAULT if tied is None else tied,
        gated_mlp=model_type not in UNGATED_TYPES, norm="layernorm" if model_type in LAYERNORM_TYPES else "rmsnorm",
        experts=ints.get("experts", 0), experts_per_token=ints.get("experts_per_token", 0),
        moe_intermediate=ints.get("moe_intermediate", 0),
        shared_expert_intermediate=shared, sliding_window=window, sliding_layers=sliding,
        dense_layers=min(ints.get("dense_layers", 0), ints["layers"]) if ints.get("experts") else 0, **latent,
        quantization=quantization, quantization_note=quantization_note, stored_dtype=stored_dtype(config),
        unquantised=unquantised, quantization_group_bytes=group_bytes, quantization_block=block, max_context=max_context,
        unpriced_bits=0.0 if quantization else unpriced_bits(config.get("quantization_config")), quantization_group=group,
        context_source=context_source, learned_positions=model_type in LEARNED_POSITION_TYPES or model_type == "mpt"
        and config.get("learned_pos_emb") is True and not (config.get("attn_config") or {}).get("alibi"),
        attention_softcap=_softcap(softcap), notes=notes, source=name)


#: torch dtypes a config's torch_dtype names, as --dtype values (other types, "auto": not said).
_STORED_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


def stored_dtype(config: dict[str, Any]) -> str:
    """The checkpoint's weight type from its config's ``dtype`` (transformers 5) or ``torch_dtype``: bf16, fp16,
    fp32, or "" where it names none of them."""
    value = config.get("dtype") or config.get("torch_dtype")
    if not isinstance(value, str):
        return ""
    return _STORED_DTYPES.get(value.strip().lower().removeprefix("torch."), "")


def _check_no_unread_experts(config: dict[str, Any], name: str) -> None:
    """A config read as dense must hold no count of experts in a spelling Lilou does not read (a key ending in
    ``experts``: ERNIE 4.5's ``moe_num_experts`` before it was read, ``top_k_experts`` ...): such a mixture of experts
    was priced silently as a dense model (ERNIE-4.5-21B-A3B at 3.3 B parameters)."""
    read = set(_ALIASES["experts"]) | set(_ALIASES["shared_experts"])
    for key, value in config.items():
        if isinstance(key, str) and key.endswith("experts") and key not in read and isinstance(value, int) \
                and not isinstance(value, bool) and value > 0:
            raise LilouInputError(f"{name}: {key[:40]} is {_size_text(value)}, a count of experts in a spelling Lilou "
                                  f"does not read ({_named('experts')}): the mixture of experts would be priced as a "
                                  "dense model")


def _softcap(value: Any) -> float:
    """Gemma 2's ``attn_logit_softcapping`` as a positive finite float, else 0 (none), as an infinite one is; an int
    too large for a float (10**400 in a config.json) was an OverflowError, an internal error (audit ua46)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return 0.0
    try:
        value = float(value)
    except OverflowError:
        return 0.0
    return value if math.isfinite(value) else 0.0


def _dense_layers(config: dict[str, Any], layers: int, first_dense: int, name: str) -> int:
    """How many layers of a mixture of experts keep a dense MLP (``intermediate_size`` wide); their order does not
    change the cost. They were only DeepSeek's ``first_k_dense_replace`` first layers; now also:

    - Qwen2-MoE / Qwen3-MoE (transformers' ``Qwen2MoeDecoderLayer``, vLLM alike): layer ``i`` routes to experts only
      when ``i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0``;
    - DeepSeek-V2/V3's ``moe_layer_freq`` (DeepSeek's own modelling code and vLLM's ``DeepseekV2DecoderLayer``;
      transformers' class leaves it out): layer ``i`` routes only when ``i >= first_k_dense_replace and
      i % moe_layer_freq == 0``;
    - ERNIE 4.5 (``Ernie4_5_MoeDecoderLayer``): only when ``(i + 1) % moe_layer_interval == 0`` and
      ``moe_layer_start_index <= i <= moe_layer_end_index`` (-1: the last layer);
    - ``mlp_layer_types`` (MiMo-V2-Flash, Laguna, Beam): only when its ``i``-th entry is ``"sparse"``.

    Released checkpoints set step 1, no MLP-only layers and frequency 1 (every layer routes); a custom config with
    ``decoder_sparse_step: 2`` was priced with experts in every layer (14.3 B parameters for 8.1 B)."""
    def positive(field: str) -> int:
        value = config.get(field, 1)
        if value is None:
            return 1
        # an int is finite (math.isfinite of 10**400 was an OverflowError: audit ua46)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not (isinstance(value, int) or math.isfinite(value)) or value != int(value) or value <= 0:
            raise LilouInputError(f"{name}: {field} is {value!r:.40}, not a positive whole number")
        return int(value)

    step, frequency, interval = positive("decoder_sparse_step"), positive("moe_layer_freq"), positive("moe_layer_interval")
    start, end = config.get("moe_layer_start_index", 0), config.get("moe_layer_end_index", -1)
    for field, value in (("moe_layer_start_index", start), ("moe_layer_end_index", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < -1):
            raise LilouInputError(f"{name}: {field} is {value!r:.40}, not a layer index")
    first = max(first_dense, start or 0)
    last = layers if end is None or end == -1 else min(end + 1, layers)
    only = config.get("mlp_only_layers")
    if only is None:
        only = []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise LilouInputError(f"{name}: mlp_only_layers is {only!r:.40}, not a list of layer indices")
    dense = set(only)  # layers is at most SIZE_LIMITS["layers"] here
    kinds = config.get("mlp_layer_types")
    if kinds is not None and not (isinstance(kinds, list) and len(kinds) == layers
                                  and all(kind in ("dense", "sparse") for kind in kinds)):
        raise LilouInputError(f"{name}: mlp_layer_types is {str(kinds)[:60]!r}, not a list of one 'dense' or 'sparse' "
                              f"per layer ({layers} layers)")
    sparse = sum(1 for i in range(first, last) if i not in dense and (i + 1) % step == 0 and (i + 1) % interval == 0
                 and i % frequency == 0 and (kinds is None or kinds[i] == "sparse"))
    if sparse <= 0:
        fields = [f"{key} {config[key]!r:.40}" for key in ("decoder_sparse_step", "mlp_only_layers", "moe_layer_freq",
                                                          "first_k_dense_replace", "moe_layer_interval",
                                                          "moe_layer_start_index", "moe_layer_end_index")
                  if config.get(key)]
        raise LilouInputError(f"{name}: {', '.join(fields)} leave none of the {layers} layers with experts (it made "
                              "the whole model dense)")
    return layers - sparse


#: Model types whose positions are learned embeddings of max_position_embeddings / n_positions rows.
LEARNED_POSITION_TYPES = frozenset({"gpt2", "opt", "gpt_bigcode", "biogpt", "xglm"})


#: The largest rope_scaling factor taken (:func:`_context_limit`).
MAX_ROPE_FACTOR = 2**20


def _rope_scaling(config: dict[str, Any]) -> tuple[str, Any]:
    """The config's RoPE scaling: ``rope_scaling``, or transformers 5's ``rope_parameters`` (what it writes instead),
    which may hold one per layer type (``{"full_attention": {...}, "sliding_attention": {...}}``): then the first
    that scales; with the field's name. transformers 5's spelling was ignored (Qwen2.5-7B's yarn x4: 32,768 tokens)."""
    key = "rope_scaling" if config.get("rope_scaling") is not None else "rope_parameters"
    rope = config.get(key)
    if isinstance(rope, dict) and rope and set(rope) <= ATTENTION_LAYER_TYPES:
        per_layer_type = [value for value in rope.values() if isinstance(value, dict) and "factor" in value]
        return key, per_layer_type[0] if per_layer_type else None
    return key, rope


def _context_limit(config: dict[str, Any], positions: int, model_type: str) -> tuple[int, str]:
    """The longest context vLLM serves the model at and where that comes from: the config's position limit (the
    first of max_position_embeddings, n_positions, ...), times the ``rope_scaling`` factor of a yarn, dynamic or
    linear scaling (yarn's ``original_max_position_embeddings`` x factor where given), as vLLM derives
    max_model_len. The scaling was ignored: Qwen2.5-7B with Qwen's yarn x4 was warned past 32,768 tokens, not 131,072.
    Gemma 3's max_position_embeddings is already the scaled length (vLLM skips its factor): its linear x8 made the
    4B-27B models' 131,072 tokens 1,048,576."""
    field = next((key for key in _ALIASES["max_context"] if config.get(key) is not None), "max_position_embeddings")
    key, rope = _rope_scaling(config)
    if not positions or not isinstance(rope, dict) or "gemma3" in model_type:
        return positions, field
    kind = str(rope.get("rope_type") or rope.get("type") or "")[:20]
    factor = rope.get("factor")
    # a factor past 2^20 is ignored as an infinite one is: 10**400 was an OverflowError, and 1e308 one in int() of the
    # context (an uploaded config.json's 500; audit ua46); released models scale by 4 to 64
    if kind not in ("yarn", "dynamic", "linear") or isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or not 1 <= factor <= MAX_ROPE_FACTOR:
        return positions, field
    original = rope.get("original_max_position_embeddings")
    if kind == "yarn" and isinstance(original, int) and not isinstance(original, bool) and 0 < original <= 2**40:
        return int(original * factor), f"original_max_position_embeddings {original} x {key} factor {factor:g} (yarn)"
    return int(positions * factor), f"{field} {positions} x {key} factor {factor:g} ({kind})"


def checkpoint_format(quantization: Any) -> tuple[str, str]:
    """The ``--dtype`` a checkpoint's ``quantization_config`` stores its weights in, and a description of it: AWQ and
    GPTQ at 4 bits (int4), FP8 (HF's ``fp8``, FBGEMM's, ModelOpt's), ModelOpt's NVFP4 (fp4) and llm-compressor's
    compressed-tensors (FP8 or INT8 W8A8, INT4 weight-only, NVFP4). Any other (bitsandbytes, 8-bit GPTQ ...): ("", a
    line saying it is not priced)."""
    if not isinstance(quantization, dict):
        return "", ""
    method = str(quantization.get("quant_method", "")).lower()[:40]
    bits = quantization.get("bits")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and bits == 4:
        return "int4", f"{method} 4-bit"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", method
    if method == "mxfp4":  # gpt-oss's experts: 4-bit weights, run as weight-only kernels (vLLM's Marlin / Triton)
        return "int4", "mxfp4, priced as 4-bit weight-only kernels: the same bytes; Blackwell's FP4 math is not priced"
    if method == "modelopt":
        algo = str(quantization.get("quant_algo", "")).upper()[:40]
        known = {"FP8": "fp8", "NVFP4": "fp4", "W4A16_AWQ": "int4", "INT4_AWQ": "int4"}
        return (known[algo], f"modelopt {algo}") if algo in known else ("", f"modelopt {algo or 'unknown'}")
    if method == "compressed-tensors":
        found = _compressed_tensors(quantization)
        return found if found else ("", "compressed-tensors of another scheme")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and isinstance(bits, int) and not isinstance(bits, bool):
        return "", f"{method} {bits}-bit"
    if method == "bitsandbytes":
        if quantization.get("load_in_8bit") is True:
            return "", "bitsandbytes 8-bit (LLM.int8)"
        if quantization.get("load_in_4bit") is True:
            kind = str(quantization.get("bnb_4bit_quant_type") or "fp4").lower()[:10]
            return "", f"bitsandbytes 4-bit ({kind})"
    return "", method or "an unnamed method"


#: The group size Lilou's INT4 (AWQ/GPTQ) weights are priced at by default (lilou.llm.memory.GROUP_BYTES_PER_WEIGHT).
INT4_GROUP = 128


def unpriced_bits(quantization: Any) -> float:
    """Bits per weight, scales included, of a quantised format Lilou does not price (0: none, or not known): GPTQ /
    AWQ at other than 4 bits (an FP16 scale and a zero point per group of 128), bitsandbytes LLM.int8 (8 bits; a
    scale per row) and 4-bit NF4/FP4 (an FP32 absmax per 64 weights: 4.5 bits; 4.127 with double quantisation)."""
    if not isinstance(quantization, dict) or checkpoint_format(quantization)[0]:
        return 0.0
    method = str(quantization.get("quant_method", "")).lower()
    bits = quantization.get("bits")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and isinstance(bits, int) and 1 < bits <= 8:
        return bits + (16 + bits) / INT4_GROUP
    if method == "bitsandbytes" and quantization.get("load_in_8bit") is True:
        return 8.0
    if method == "bitsandbytes" and quantization.get("load_in_4bit") is True:
        return 4.127 if quantization.get("bnb_4bit_use_double_quant") is True else 4.5
    return 0.0


def quantization_block(quantization: Any) -> int:
    """The group or block (in weights along a row or column) a ``quantization_config`` quantises in: AWQ / GPTQ
    ``group_size``, FP8 ``weight_block_size`` ``[n, k]`` (their least common multiple: a rank's width is both a
    column-parallel output and a row-parallel input), compressed-tensors' first group's ``group_size`` or
    ``block_structure``; 0 for none, per channel (``group_size`` -1) or per tensor."""
    if not isinstance(quantization, dict):
        return 0

    def whole(value: Any) -> int:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1 << 16 else 0

    sizes: list[int] = []
    block = quantization.get("weight_block_size")
    if isinstance(block, (list, tuple)):
        sizes += [whole(v) for v in block]
    sizes.append(whole(quantization.get("group_size")))
    groups = quantization.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    weights = group.get("weights") if isinstance(group, dict) else None
    if isinstance(weights, dict):
        sizes.append(whole(weights.get("group_size")))
        structure = weights.get("block_structure")
        if isinstance(structure, (list, tuple)):
            sizes += [whole(v) for v in structure]
    sizes = [v for v in sizes if v > 1]
    return math.lcm(*sizes) if sizes else 0


def _not_converted(quantization: dict) -> tuple[str, ...]:
    """The layer parts a quantization_config's ``modules_to_not_convert`` keeps in 16 bits: "attention" (gpt-oss's
    ``model.layers.*.self_attn``) and "router" (``mlp.router``, ``mlp.gate``); the embedding and LM head are 16-bit
    in every quantised format already. gpt-oss's attention was priced at 4 bits (its weights 1.1 GiB short)."""
    modules = quantization.get("modules_to_not_convert")
    if not isinstance(modules, list):
        return ()
    found = set()
    for module in modules:
        if not isinstance(module, str):
            continue
        last = module.rstrip(".*").rsplit(".", 1)[-1]
        if last in ("self_attn", "attn", "attention", "self_attention"):
            found.add("attention")
        elif last in ("router", "gate") and ".mlp" in f".{module}":
            found.add("router")
    return tuple(sorted(found))


def _compressed_tensors(quantization: dict) -> tuple[str, str] | None:
    """llm-compressor's schemes by their first config group's weights and activations."""
    groups = quantization.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        return None
    weights, activations = group["weights"], group.get("input_activations")
    bits, kind = weights.get("num_bits"), str(weights.get("type", "")).lower()
    quantised_inputs = isinstance(activations, dict) and activations.get("num_bits") in (4, 8)
    if bits == 8 and kind == "float":
        return "fp8", "compressed-tensors FP8"
    if bits == 8 and kind == "int" and quantised_inputs:
        return "int8", "compressed-tensors INT8 W8A8"
    if bits == 4 and kind == "int" and not quantised_inputs:
        return "int4", "compressed-tensors INT4 weight-only"
    if bits == 4 and kind == "float":
        return "fp4", "compressed-tensors NVFP4"
    return None


def _latent_attention(ints: dict[str, int], name: str) -> dict[str, int]:
    """The multi-head latent attention fields of a config that has ``kv_lora_rank`` (else none), checked: the
    query/key head is the non-rotary plus the rotary part."""
    if not ints.get("kv_lora_rank"):
        return {}
    missing = [_named(f) for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if not ints.get(f)]
    if missing:
        raise LilouInputError(f"{name}: multi-head latent attention (kv_lora_rank) without {', '.join(missing)}")
    return {"kv_lora_rank": ints["kv_lora_rank"], "q_lora_rank": ints.get("q_lora_rank", 0),
            "qk_rope_head_dim": ints["qk_rope_head_dim"], "v_head_dim": ints["v_head_dim"],
            "head_dim": ints["qk_nope_head_dim"] + ints["qk_rope_head_dim"]}


#: Model types whose transformers config makes every ``sliding_window_pattern``-th layer global (its default here)
#: and the others local, where ``layer_types`` is left out (the configs on the Hub before transformers 4.53). Command
#: R7B's (``cohere2``) was read as every layer local: its 8 global layers' KV cache capped at the 4,096-token window.
SLIDING_WINDOW_PATTERN = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4}


def sliding_window_layers(config: dict[str, Any], layers: int, model_type: str, name: str) -> tuple[int, int]:
    """The sliding window of a Hugging Face config and how many layers use it, as transformers reads them:
    ``layer_types`` where given (its ``sliding_attention`` entries); else Gemma 2 every other layer, Gemma 3 and
    Cohere 2 all but every ``sliding_window_pattern``-th (:data:`SLIDING_WINDOW_PATTERN`), Qwen 2 the layers from
    ``max_window_layers`` on, and every layer for the others (Mistral v0.1, Phi-3, StarCoder 2).
    ``use_sliding_window: false`` (Qwen) or no window: (0, 0)."""
    window = config.get("sliding_window")
    if window is None or config.get("use_sliding_window") is False:
        return 0, 0
    if isinstance(window, bool) or not isinstance(window, (int, float)) or \
            isinstance(window, float) and not (math.isfinite(window) and window.is_integer()):
        raise LilouInputError(f"{name}: sliding_window is {window!r:.40}, not a whole number of tokens")
    window = int(window)
    if window < 0:
        raise LilouInputError(f"{name}: sliding_window is {window}, not a number of tokens")
    if window == 0:
        return 0, 0
    types = config.get("layer_types")
    if types is not None and not (isinstance(types, list) and len(types) == layers
                                  and all(isinstance(kind, str) for kind in types)):
        # a string was ignored (the Gemma 3 pattern priced instead), a longer list cut short
        raise LilouInputError(f"{name}: layer_types is {str(types)[:60]!r}, not a list of one attention kind per "
                              f"layer ({layers} layers)")
    if types:
        return window, sum(1 for kind in types if kind in ("sliding_attention", "chunked_attention"))
    if model_type == "gemma2":
        return window, (layers + 1) // 2  # layers 0, 2, 4 ... are local
    if model_type in SLIDING_WINDOW_PATTERN:
        pattern = config.get("sliding_window_pattern")
        if pattern is None:
            pattern = SLIDING_WINDOW_PATTERN[model_type]
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern <= 0:
            raise LilouInputError(f"{name}: sliding_window_pattern is {pattern!r:.40}, not a positive whole number")
        return window, layers - layers // pattern  # every pattern-th layer is global
    if model_type in ("qwen2", "qwen2_moe") and isinstance(config.get("max_window_layers"), int):
        if config["max_window_layers"] < 0:  # it gave a negative KV cache and every batch "fitting"
            raise LilouInputError(f"{name}: max_window_layers is {config['max_window_layers']}, not a layer count")
        return window, max(0, layers - config["max_window_layers"])
    return window, layers


def _whole(value: Any, name: str, field: str) -> int:
    """A config's dimension as an int: JSON integers, or floats with an integral value (4096.0); a string, a
    boolean, a fraction or NaN is refused with the field named."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LilouInputError(f"{name}: {_named(field)} is {value!r:.40}, not a whole number")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise LilouInputError(f"{name}: {_named(field)} is {value!r}, not a whole number")
    return int(value)


#: Sizes far above any released model's (Llama-3.1-405B: 126 layers, hidden 16,384, MLP 53,248; Gemma: a 262,144
#: vocabulary; DeepSeek-V3: 256 experts), so that a config of a few bytes cannot make Lilou allocate gigabytes
#: (the steps are built layer by layer: 10^8 layers took 8 GB before these limits).
SIZE_LIMITS = {"layers": 4096, "hidden": 1 << 18, "heads": 1 << 14, "kv_heads": 1 << 14, "head_dim": 1 << 14,
               "vocab": 1 << 24, "intermediate": 1 << 22, "experts": 1 << 14, "experts_per_token": 1 << 14,
               "moe_intermediate": 1 << 22, "shared_expert_intermediate": 1 << 22, "shared_experts": 1 << 14,
               "kv_lora_rank": 1 << 16, "q_lora_rank": 1 << 16, "qk_nope_head_dim": 1 << 14,
               "qk_rope_head_dim": 1 << 14, "v_head_dim": 1 << 14}


def _check_sizes(ints: dict[str, int], name: str) -> None:
    """Refuse sizes no model has (see :data:`SIZE_LIMITS`), and a KV-head count or head width of 0, which would
    otherwise stand silently for the default (every head its own KV head, hidden / heads)."""
    over = [field for field, limit in SIZE_LIMITS.items() if ints.get(field, 0) > limit]
    if over:
        sizes = ", ".join(f"{_named(f)} {_size_text(ints[f])}" for f in over)
        limits = ", ".join(f"{SIZE_LIMITS[f]:,}" for f in over)
        raise LilouInputError(f"{name}: {sizes} is beyond any released model (at most {limits})")
    zero = [_named(field) for field in ("kv_heads", "head_dim") if ints.get(field) == 0]
    if zero:
        raise LilouInputError(f"{name}: {', '.join(zero)} is 0; leave the field out for its default")


def _size_text(value: int) -> str:
    """1,000,000 as written; a number of more than 16 digits as its power of ten (an int of 400 digits has no float)."""
    digits = len(str(value))
    return f"{value:,}" if digits <= 16 else f"about 10^{digits - 1}"


def _check_optional(ints: dict[str, int], name: str) -> None:
    """The fields a config may leave out must make sense when given: KV heads that divide the heads, experts
    and top-k that agree, no negative widths."""
    negative = [field for field in ("kv_heads", "head_dim", "experts", "experts_per_token", "moe_intermediate",
                                    "shared_expert_intermediate", "shared_experts", "dense_layers", "kv_lora_rank",
                                    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                    "max_context")
                if ints.get(field, 0) < 0]
    if negative:
        raise LilouInputError(f"{name}: {', '.join(map(_named, negative))} must not be negative")
    kv_heads = ints.get("kv_heads") or ints["heads"]
    if ints["heads"] % kv_heads:
        raise LilouInputError(f"{name}: {ints['heads']} attention heads do not split into groups of {kv_heads} KV "
                              "heads (grouped-query attention needs heads divisible by KV heads)")
    experts, top_k = ints.get("experts", 0), ints.get("experts_per_token", 0)
    if experts and "experts_per_token" not in ints:  # it read "0 experts per token of 8 routed experts"
        raise LilouInputError(f"{name}: the config lacks {_named('experts_per_token')}, the experts each token is "
                              f"routed to of its {experts} routed experts")
    if experts and not 0 < top_k <= experts:
        raise LilouInputError(f"{name}: {top_k} experts per token of {experts} routed experts; a mixture of "
                              "experts routes each token to between 1 and all of them")


#: False while a caller reads no path relative to the working folder (:func:`absolute_paths_only`).
_RELATIVE_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("lilou_llm_relative_paths", default=True)


@contextlib.contextmanager
def absolute_paths_only() -> Iterator[None]:
    """While active (in this thread or task), :func:`load_config` takes a relative name for a built-in, never for a
    file of the working folder: the service names its files by absolute path (under --models-root, or an upload), and
    resolved "llama-3.1-8b" to "meta-llama/Llama-3.1-8B-Instruct", which the process's working folder held as a folder
    of another config.json: its figures were served (audit ua46)."""
    token = _RELATIVE_PATHS.set(False)
    try:
        yield
    finally:
        _RELATIVE_PATHS.reset(token)


def load_config(model: str | os.PathLike[str]) -> LLMConfig:
    """A built-in name, or the path of a Hugging Face ``config.json`` (or of the folder holding one)."""
    if not isinstance(model, str | os.PathLike):
        raise LilouInputError(f"an LLM is a built-in name or a config.json's path, not {type(model).__name__}")
    text = os.fspath(model)
    if "\0" in text:  # os.stat's ValueError ("embedded null byte") was an internal error
        raise LilouInputError(f"an LLM's name or config path cannot hold a NUL byte: {text[:80]!r}")
    path = Path(text)
    if path.suffix.lower() == ".onnx":  # it said "not a readable JSON config (UnicodeDecodeError)", or "unknown model"
        raise LilouInputError(f"{text}: an ONNX model, not an LLM config; `lilou llm` and `plan --llm` take a Hugging "
                              "Face config.json or a built-in name (`lilou llm --list`); an ONNX file is priced by "
                              "`lilou infer` and planned by `lilou plan FILE --slo-ms T`")
    if not _RELATIVE_PATHS.get() and not path.is_absolute():
        return builtin_config(text)
    looks_like_path = text.endswith(".json") or os.sep in text and path.exists() or path.is_dir()
    if not looks_like_path:
        return builtin_config(text)
    if path.is_dir():
        path = path / "config.json"
    try:
        if path.stat().st_size > 16 * 2**20:
            raise LilouInputError(f"{path}: larger than 16 MiB; not a model config")
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LilouInputError(f"no such config file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise LilouInputError(f"{path}: not a readable JSON config ({type(error).__name__})") from None
    if not isinstance(config, dict):
        raise LilouInputError(f"{path}: a config.json holds one JSON object")
    # config.json in the working folder: its resolved folder's name (Path("config.json").parent.name is "")
    name = (path.resolve().parent.name or str(path)) if path.name == "config.json" else path.stem or str(path)
    return config_from_dict(config, name)
