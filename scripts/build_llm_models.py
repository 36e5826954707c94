"""Regenerate ``lilou/llm/models.yaml``: the built-in LLM architectures (``lilou llm MODEL``).

Two parts, each entry with its source:

- the 51 LLM configs of WattGPU's ``model_features.csv`` (``$LILOU_DATA_DIR/wattgpu``, Apache-2.0),
  read field by field from the mirror;
- the decoder LLMs measured in ``$LILOU_DATA_DIR/llm_energy`` that WattGPU does not list. Their
  architecture fields are transcribed below from each model's published Hugging Face ``config.json``
  (``huggingface.co/<id>/blob/main/config.json``); nothing is downloaded.

Only architecture fields are kept: layers, hidden size, attention and KV heads, head dim, MLP width,
vocabulary, MoE experts / top-k / expert width / dense first layers, tied embeddings, MLP and norm kind, the sliding
window and how many layers use it, attention logit soft-capping.

    python scripts/build_llm_models.py            # writes lilou/llm/models.yaml
"""
from __future__ import annotations

import argparse
import ast
import csv
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "lilou" / "llm" / "models.yaml"
WATTGPU = "maufadel/wattgpu@4e010359c167ac8c65b55aabd1aafbf765ae5d91 model_features.csv"

#: Architectures whose MLP is not gated (one up projection + activation + down).
UNGATED = {"gpt2", "gptj", "gpt_neox", "phi", "opt", "falcon", "bloom", "starcoder2", "nemotron"}
#: Architectures with LayerNorm (mean and variance) instead of RMSNorm.
LAYERNORM = {"gpt2", "gptj", "gpt_neox", "phi", "opt", "falcon", "bloom", "starcoder2", "nemotron", "olmo", "phimoe"}
#: Non-transformer or hybrid layers Lilou does not model (kept so the names resolve, refused at predict).
KIND = {"falcon_mamba": "mamba", "nemotron_h": "hybrid", "rwkv": "rwkv"}

# Transcribed from each model's Hugging Face config.json: (id, model_type, layers, hidden, heads, kv_heads,
# head_dim or None, intermediate, vocab, tied, experts, top_k, moe_intermediate, shared_intermediate).
LLM_ENERGY = [
    # mlenergy_v1_2023 (FastChat, LLaMA-1 derivatives and others)
    ("metaai/llama-7B", "llama", 32, 4096, 32, 32, None, 11008, 32000, False, 0, 0, 0, 0),
    ("metaai/llama-13B", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("lmsys/vicuna-7B", "llama", 32, 4096, 32, 32, None, 11008, 32000, False, 0, 0, 0, 0),
    ("lmsys/vicuna-13B", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("tatsu-lab/alpaca-7B", "llama", 32, 4096, 32, 32, None, 11008, 32001, False, 0, 0, 0, 0),
    ("BAIR/koala-7b", "llama", 32, 4096, 32, 32, None, 11008, 32000, False, 0, 0, 0, 0),
    ("BAIR/koala-13b", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("project-baize/baize-v2-7B", "llama", 32, 4096, 32, 32, None, 11008, 32000, False, 0, 0, 0, 0),
    ("camel-ai/CAMEL-13B-Combined-Data", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("nomic-ai/gpt4all-13b-snoozy", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("openaccess-ai-collective/manticore-13b-chat-pyg", "llama", 40, 5120, 40, 40, None, 13824, 32000, False,
     0, 0, 0, 0),
    ("h2oai/h2ogpt-gm-oasst1-en-2048-open-llama-7b-preview-300bt-v2", "llama", 32, 4096, 32, 32, None, 11008,
     32000, False, 0, 0, 0, 0),
    ("Salesforce/xgen-7b-8k-inst", "llama", 32, 4096, 32, 32, None, 11008, 51200, False, 0, 0, 0, 0),
    ("metaai/Llama-2-7b-chat-hf", "llama", 32, 4096, 32, 32, None, 11008, 32000, False, 0, 0, 0, 0),
    ("metaai/Llama-2-13b-chat-hf", "llama", 40, 5120, 40, 40, None, 13824, 32000, False, 0, 0, 0, 0),
    ("OpenAssistant/oasst-sft-1-pythia-12b", "gpt_neox", 36, 5120, 40, 40, None, 20480, 50288, False, 0, 0, 0, 0),
    ("databricks/dolly-v2-12b", "gpt_neox", 36, 5120, 40, 40, None, 20480, 50280, False, 0, 0, 0, 0),
    ("StabilityAI/stablelm-tuned-alpha-7b", "gpt_neox", 16, 6144, 48, 48, None, 24576, 50432, False, 0, 0, 0, 0),
    ("togethercomputer/RedPajama-INCITE-7B-Chat", "gpt_neox", 32, 4096, 32, 32, None, 16384, 50432, False,
     0, 0, 0, 0),
    ("FreedomIntelligence/phoenix-inst-chat-7b", "bloom", 30, 4096, 32, 32, None, 16384, 250880, True, 0, 0, 0, 0),
    # mlenergy_v2_2024 (vLLM 0.5.4)
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama", 32, 4096, 32, 8, 128, 14336, 128256, False, 0, 0, 0, 0),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama", 80, 8192, 64, 8, 128, 28672, 128256, False, 0, 0, 0, 0),
    ("meta-llama/Meta-Llama-3.1-405B-Instruct", "llama", 126, 16384, 128, 8, 128, 53248, 128256, False,
     0, 0, 0, 0),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral", 40, 5120, 32, 8, 128, 14336, 131072, False, 0, 0, 0, 0),
    ("mistralai/Mistral-Large-Instruct-2407", "mistral", 88, 12288, 96, 8, 128, 28672, 32768, False, 0, 0, 0, 0),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral", 32, 4096, 32, 8, 128, 14336, 32000, False, 8, 2, 14336, 0),
    ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral", 56, 6144, 48, 8, 128, 16384, 32768, False, 8, 2, 16384, 0),
    ("google/gemma-2-9b-it", "gemma2", 42, 3584, 16, 8, 256, 14336, 256000, True, 0, 0, 0, 0),
    ("google/gemma-2-27b-it", "gemma2", 46, 4608, 32, 16, 128, 36864, 256000, True, 0, 0, 0, 0),
    ("microsoft/Phi-3-small-8k-instruct", "phi3small", 32, 4096, 32, 8, 128, 14336, 100352, True, 0, 0, 0, 0),
    ("codellama/CodeLlama-7b-hf", "llama", 32, 4096, 32, 32, 128, 11008, 32016, False, 0, 0, 0, 0),
    ("codellama/CodeLlama-13b-hf", "llama", 40, 5120, 40, 40, 128, 13824, 32016, False, 0, 0, 0, 0),
    ("codellama/CodeLlama-34b-hf", "llama", 48, 8192, 64, 8, 128, 22016, 32000, False, 0, 0, 0, 0),
    ("codellama/CodeLlama-70b-hf", "llama", 80, 8192, 64, 8, 128, 28672, 32016, False, 0, 0, 0, 0),
    ("bigcode/starcoder2-3b", "starcoder2", 30, 3072, 24, 2, 128, 12288, 49152, True, 0, 0, 0, 0),
    ("bigcode/starcoder2-7b", "starcoder2", 32, 4608, 36, 4, 128, 18432, 49152, True, 0, 0, 0, 0),
    ("bigcode/starcoder2-15b", "starcoder2", 40, 6144, 48, 4, 128, 24576, 49152, False, 0, 0, 0, 0),
    ("google/codegemma-7b", "gemma", 28, 3072, 16, 16, 256, 24576, 256000, True, 0, 0, 0, 0),
    ("google/codegemma-1.1-2b", "gemma", 18, 2048, 8, 1, 256, 16384, 256000, True, 0, 0, 0, 0),
    # mlenergy_v3_2025 (vLLM 0.11.1)
    ("Qwen/Qwen3-8B", "qwen3", 36, 4096, 32, 8, 128, 12288, 151936, False, 0, 0, 0, 0),
    ("Qwen/Qwen3-32B", "qwen3", 64, 5120, 64, 8, 128, 25600, 151936, False, 0, 0, 0, 0),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_moe", 48, 2048, 32, 4, 128, 6144, 151936, False, 128, 8, 768, 0),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3_moe", 94, 4096, 64, 4, 128, 12288, 151936, False, 128, 8,
     1536, 0),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3_moe", 62, 6144, 96, 8, 128, 8192, 151936, False, 160, 8,
     2560, 0),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama", 80, 8192, 64, 8, 128, 28672, 128256, False, 0, 0, 0, 0),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama", 80, 8192, 64, 8, 128, 28672, 128256, False, 0, 0, 0, 0),
    ("meta-llama/Llama-3.1-405B-Instruct", "llama", 126, 16384, 128, 8, 128, 53248, 128256, False, 0, 0, 0, 0),
    ("openai/gpt-oss-120b", "gpt_oss", 36, 2880, 64, 8, 64, 2880, 201088, False, 128, 4, 2880, 0),
    # llm_inference_bench (Argonne)
    ("meta-llama/Llama-2-7b-hf", "llama", 32, 4096, 32, 32, 128, 11008, 32000, False, 0, 0, 0, 0),
    ("meta-llama/Llama-2-70b-hf", "llama", 80, 8192, 64, 8, 128, 28672, 32000, False, 0, 0, 0, 0),
    ("meta-llama/Meta-Llama-3-8B", "llama", 32, 4096, 32, 8, 128, 14336, 128256, False, 0, 0, 0, 0),
    ("meta-llama/Meta-Llama-3-70B", "llama", 80, 8192, 64, 8, 128, 28672, 128256, False, 0, 0, 0, 0),
    ("mistralai/Mistral-7B-v0.1", "mistral", 32, 4096, 32, 8, 128, 14336, 32000, False, 0, 0, 0, 0),
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral", 32, 4096, 32, 8, 128, 14336, 32000, False, 8, 2, 14336, 0),
    ("Qwen/Qwen2-7B", "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, False, 0, 0, 0, 0),
    ("Qwen/Qwen2-72B", "qwen2", 80, 8192, 64, 8, 128, 29568, 152064, False, 0, 0, 0, 0),
    ("Qwen/Qwen1.5-7B", "qwen2", 32, 4096, 32, 32, 128, 11008, 151936, False, 0, 0, 0, 0),
    ("huggyllama/llama-7b", "llama", 32, 4096, 32, 32, 128, 11008, 32000, False, 0, 0, 0, 0),
    ("BAAI/Aquila-7B", "llama", 32, 4096, 32, 32, 128, 11008, 100008, False, 0, 0, 0, 0),
    ("facebook/opt-6.7b", "opt", 32, 4096, 32, 32, 128, 16384, 50272, True, 0, 0, 0, 0),
    ("bigscience/bloom-7b1", "bloom", 30, 4096, 32, 32, 128, 16384, 250880, True, 0, 0, 0, 0),
]


# Sliding windows of the transcribed models, from the same config.json files: (sliding_window, layers that use it,
# attn_logit_softcapping). Gemma 2 alternates local and global layers (layer_types, or every other layer in older
# configs); Mistral v0.1 and StarCoder 2 window every layer; gpt-oss alternates a 128-token band with full layers.
# The others transcribed above have no window (sliding_window null, or Qwen's use_sliding_window false).
TRANSCRIBED_WINDOWS = {
    "google/gemma-2-9b-it": (4096, 21, 50.0),
    "google/gemma-2-27b-it": (4096, 23, 50.0),
    "bigcode/starcoder2-3b": (4096, 30, 0.0),
    "bigcode/starcoder2-7b": (4096, 32, 0.0),
    "bigcode/starcoder2-15b": (4096, 40, 0.0),
    "openai/gpt-oss-120b": (128, 18, 0.0),
    "mistralai/Mistral-7B-v0.1": (4096, 32, 0.0),
}


# Context limits of the transcribed models: max_position_embeddings of the same config.json files (Llama 3.1 / 3.3's
# 131072 is already the rope-scaled length; its rope_scaling's original_max_position_embeddings is 8192). Models left
# out here have no limit in Lilou's table, which every prediction of them says: fine-tunes whose configs differ from
# their base (Vicuna, Koala ...), BLOOM's ALiBi (no position limit in its config), and those whose value we could not
# confirm (Qwen2 base, Mistral-Nemo, Mistral-Large, CodeLlama-70B, Aquila).
TRANSCRIBED_CONTEXT = {
    "metaai/llama-7B": 2048, "metaai/llama-13B": 2048, "huggyllama/llama-7b": 2048,
    "metaai/Llama-2-7b-chat-hf": 4096, "metaai/Llama-2-13b-chat-hf": 4096,
    "meta-llama/Llama-2-7b-hf": 4096, "meta-llama/Llama-2-70b-hf": 4096,
    "meta-llama/Meta-Llama-3-8B": 8192, "meta-llama/Meta-Llama-3-70B": 8192,
    "meta-llama/Meta-Llama-3.1-8B-Instruct": 131072, "meta-llama/Meta-Llama-3.1-70B-Instruct": 131072,
    "meta-llama/Meta-Llama-3.1-405B-Instruct": 131072, "meta-llama/Llama-3.1-70B-Instruct": 131072,
    "meta-llama/Llama-3.3-70B-Instruct": 131072, "meta-llama/Llama-3.1-405B-Instruct": 131072,
    "mistralai/Mistral-7B-v0.1": 32768, "mistralai/Mixtral-8x7B-v0.1": 32768,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 32768, "mistralai/Mixtral-8x22B-Instruct-v0.1": 65536,
    "google/gemma-2-9b-it": 8192, "google/gemma-2-27b-it": 8192,
    "google/codegemma-7b": 8192, "google/codegemma-1.1-2b": 8192,
    "microsoft/Phi-3-small-8k-instruct": 8192, "Salesforce/xgen-7b-8k-inst": 8192,
    "codellama/CodeLlama-7b-hf": 16384, "codellama/CodeLlama-13b-hf": 16384, "codellama/CodeLlama-34b-hf": 16384,
    "bigcode/starcoder2-3b": 16384, "bigcode/starcoder2-7b": 16384, "bigcode/starcoder2-15b": 16384,
    "Qwen/Qwen3-8B": 40960, "Qwen/Qwen3-32B": 40960, "Qwen/Qwen1.5-7B": 32768,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 262144, "Qwen/Qwen3-235B-A22B-Instruct-2507": 262144,
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": 262144,
    "openai/gpt-oss-120b": 131072,  # yarn factor 32 over 4096, already applied in max_position_embeddings
    "facebook/opt-6.7b": 2048, "databricks/dolly-v2-12b": 2048, "OpenAssistant/oasst-sft-1-pythia-12b": 2048,
    "togethercomputer/RedPajama-INCITE-7B-Chat": 2048,
}


def _number(value: str) -> float | None:
    value = (value or "").strip()
    if value in ("", "N/A", "None"):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _int(value: str) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _entry(name, model_type, layers, hidden, heads, kv_heads, head_dim, inter, vocab, tied, experts, top_k,
           moe_inter, shared_inter, source, params_b=None, window=(0, 0, 0.0), dense_layers=0,
           max_context=0) -> dict:
    entry = {"name": name, "model_type": model_type, "kind": KIND.get(model_type, "transformer"),
             "layers": int(layers), "hidden": int(hidden), "heads": int(heads or 0),
             "kv_heads": int(kv_heads or heads or 0),
             "head_dim": int(head_dim) if head_dim else (int(hidden) // int(heads) if heads else 0),
             "intermediate": int(inter), "vocab": int(vocab), "tied_embeddings": bool(tied),
             "gated_mlp": model_type not in UNGATED, "norm": "layernorm" if model_type in LAYERNORM else "rmsnorm",
             "experts": int(experts or 0), "experts_per_token": int(top_k or 0),
             "moe_intermediate": int(moe_inter or 0), "shared_expert_intermediate": int(shared_inter or 0)}
    if experts and dense_layers:  # a MoE model whose first layers keep a dense MLP
        entry["dense_layers"] = int(dense_layers)
    sliding_window, sliding_layers, softcap = window
    if sliding_window and sliding_layers:  # only models that have one (LLMConfig's defaults: none)
        entry.update(sliding_window=int(sliding_window), sliding_layers=int(sliding_layers))
    if softcap:
        entry["attention_softcap"] = float(softcap)
    if max_context:
        entry["max_context"] = int(max_context)
    if params_b is not None:
        entry["params_b"] = params_b
    entry["source"] = source
    return entry


def wattgpu_entries(folder: Path) -> list[dict]:
    with open(folder / "model_features.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter=";"))
    entries = []
    for r in rows:
        text = r.get("text_config") or ""
        nested = ast.literal_eval(text) if text.startswith("{") else {}

        def get(key, *more, r=r, nested=nested):
            for k in (key, *more):
                if nested.get(k) is not None:
                    return nested[k]
                if _number(r.get(k)) is not None:
                    return _number(r[k])
            return None

        layers = get("num_layers", "num_hidden_layers", "n_layer")
        hidden = get("hidden_size", "n_embd")
        heads = get("num_attention_heads", "n_head")
        kv = get("num_key_value_heads") or heads
        head_dim = get("head_dim", "kv_channels")
        inter = get("intermediate_size", "n_inner") or 4 * hidden
        experts = get("num_local_experts", "num_experts", "n_routed_experts") or 0
        top_k = get("num_experts_per_tok", "experts_per_token") or 0
        moe_inter = get("moe_intermediate_size") or (inter if experts else 0)
        shared = get("shared_expert_intermediate_size") or 0
        if not shared and get("n_shared_experts"):
            shared = get("n_shared_experts") * moe_inter
        model_type = r["model_type"]
        tied = (r.get("tie_word_embeddings") or "").upper() == "TRUE"
        entries.append(_entry(r["model_name"], model_type, layers, hidden, heads, kv, head_dim, inter,
                              get("vocab_size"), tied, experts, top_k, moe_inter, shared,
                              f"{WATTGPU} (row {r['model_name']})", _number(r.get("total_b_params")),
                              _window(r, nested, int(layers), model_type),
                              get("first_k_dense_replace") or 0,
                              get("max_position_embeddings", "n_positions", "max_sequence_length") or 0))
    return entries


def _window(row: dict, nested: dict, layers: int, model_type: str) -> tuple[int, int, float]:
    """(sliding_window, layers using it, attn_logit_softcapping) of one row, read as a config.json is read
    (lilou.llm.config.sliding_window_layers)."""
    from lilou.llm.config import sliding_window_layers

    fields: dict = {}
    for key in ("sliding_window", "max_window_layers", "sliding_window_pattern", "attn_logit_softcapping"):
        value = nested.get(key) if nested.get(key) is not None else _number(row.get(key))
        if value is not None:
            fields[key] = int(value) if key != "attn_logit_softcapping" else float(value)
    if nested.get("use_sliding_window") is False or (row.get("use_sliding_window") or "").upper() == "FALSE":
        fields["use_sliding_window"] = False
    types = nested.get("layer_types") or row.get("layer_types") or ""
    if isinstance(types, str) and types.startswith("["):
        types = ast.literal_eval(types)
    if isinstance(types, list):
        fields["layer_types"] = types
    window, sliding = sliding_window_layers(fields, layers, model_type, row["model_name"])
    return window, sliding, fields.get("attn_logit_softcapping") or 0.0


def main(argv: list[str] | None = None) -> int:
    # it took no arguments: `--help` (or any typo) regenerated the shipped models.yaml
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    folder = Path(os.environ.get("LILOU_DATA_DIR", ROOT.parent / "shared" / "datasets")) / "wattgpu"
    entries = wattgpu_entries(folder)
    seen = {e["name"].lower() for e in entries}
    for row in LLM_ENERGY:
        if row[0].lower() in seen:
            continue
        seen.add(row[0].lower())
        entries.append(_entry(*row, source=f"huggingface.co/{row[0]}/blob/main/config.json (architecture fields, "
                                           "transcribed; measured in llm_energy/)",
                              window=TRANSCRIBED_WINDOWS.get(row[0], (0, 0, 0.0)),
                              max_context=TRANSCRIBED_CONTEXT.get(row[0], 0)))
    header = ("# Built-in LLM architectures for `lilou llm MODEL`. Generated by scripts/build_llm_models.py;\n"
              "# edit that script, not this file. Architecture fields only; `source` says where each came from.\n")
    OUT.write_text(header + yaml.safe_dump({"models": entries}, sort_keys=False, width=120))
    print(f"wrote {len(entries)} models to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
