"""Measured LLM serving runs of ``$LILOU_DATA_DIR/llm_energy`` as one list of :class:`ServingRun` rows.

Each table keeps its own meaning (read its section of ``llm_energy/README.md``); the fields below say which
quantity a row measured, so a benchmark compares like with like:

- ``itl_kind``: ``engine-mean`` (vLLM's mean time per output token, ML.ENERGY v2), ``steady-derived`` (the
  steady state's mean running batch / output tokens per second, ML.ENERGY v3: the mean time between a sequence's
  tokens over the same window as its power and batch; v3's client-side median ITL pools the whole run, ramp-up
  and drain with their smaller batches included, and is 1.07-1.8x lower, by task), ``derived-static``
  ((end-to-end - TTFT) / (O - 1) of a static batch, Argonne), ``per-token-incl-prefill`` (request latency /
  output tokens at batch 1, ML.ENERGY v1);
- ``batch``: the mean running batch where the source logs it (ML.ENERGY v2/v3 ``avg_batch_size``; not
  ``max_num_seqs``), else the static batch;
- ``steady``: the run is a server in steady state (continuous batching: prefills of arriving requests share the
  steps with decodes), not one static batch;
- ``power_w``: mean board power per GPU over what the source's window covers (``power_window``);
- ``input_len``: known for Argonne (input = output length); for ML.ENERGY it is not in the export and is the
  assumed prompt length of the task in :data:`ASSUMED_PROMPT_TOKENS` (``input_assumed`` is True).

Rows measured on H100 and L4 GPUs carry ``held_back=True`` (:func:`lilou.data.kernel_schema.is_held_back`):
they are for independent evaluation only. Nothing here fits anything.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from lilou.data.kernel_schema import is_held_back
from lilou.errors import MissingDataError

#: Assumed mean prompt tokens per task where the source does not export them (ShareGPT / LMArena chats,
#: HumanEval+ code prompts, GPQA-diamond questions, Sourcegraph fill-in-the-middle contexts). An assumption.
ASSUMED_PROMPT_TOKENS = {"chat": 256, "chat-concise": 256, "instruct": 256, "instruct-concise": 256,
                         "code": 160, "lm-arena-chat": 512, "gpqa": 300, "sourcegraph-fim": 1500}
#: GPU strings of the sources -> GPU database names. The ML.ENERGY v1 A100 and V100 variants are not recorded
#: (assumed SXM4-40GB and SXM2-32GB); Argonne's A100s are Polaris nodes (A100-SXM4-40GB).
GPU_NAMES = {"A100": "a100-sxm4-40gb", "A40": "a40", "V100": "v100-sxm2-32gb",
             "A100-SXM4-40GB": "a100-sxm4-40gb", "H100 80GB HBM3": "h100-sxm", "H100": "h100-sxm", "B200": "b200",
             "Nvidia A100 GPU": "a100-sxm4-40gb", "Nvidia H100 GPU": "h100-sxm", "Nvidia GH200 GPU": "gh200"}
_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "float16": "fp16"}
#: Argonne models whose context is 2048 tokens (max_position_embeddings / n_positions / seq_length of their
#: configs): their 2048-in / 2048-out rows cannot have run as labelled (e.g. Aquila-7B at batch 1: 48 ms for the
#: whole batch on GH200), so they are left out.
CONTEXT_2048 = frozenset({"BAAI/Aquila-7B", "bigscience/bloom-7b1", "EleutherAI/gpt-j-6b", "huggyllama/llama-7b",
                          "facebook/opt-6.7b"})
#: ML.ENERGY v3 text tasks (image/video chat also spend time in a vision encoder). GPQA is left out: its median
#: ITL is about 33 ms whatever the model (8B to 32B) and batch (8 to 64) on B200, a bottleneck outside the GPU
#: (the client streaming 7000-token reasoning outputs), which no GPU model can predict.
V3_TEXT_TASKS = ("lm-arena-chat", "sourcegraph-fim")


@dataclass(frozen=True)
class ServingRun:
    source: str            # mlenergy_v1_2023 | mlenergy_v2_2024 | mlenergy_v3_2025 | llm_inference_bench
    task: str
    model: str             # Hugging Face id as the source names it
    gpu: str               # GPU database name
    engine: str            # hf | vllm | trtllm
    tp: int
    batch: float           # mean running batch, or the static batch
    input_len: int
    input_assumed: bool
    output_len: float
    dtype: str
    steady: bool
    itl_ms: float | None
    itl_kind: str | None
    ttft_ms: float | None
    e2e_ms: float | None   # one static batch: prefill + every decode step
    power_w: float | None  # per GPU
    power_window: str | None
    held_back: bool
    config: str = ""       # the source's configuration key within (task, model): max_num_seqs, batch and length
    note: str = ""


def llm_energy_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    root = Path(data_dir or os.environ.get("LILOU_DATA_DIR") or "datasets")
    folder = root / "llm_energy"
    if not folder.is_dir():
        raise MissingDataError(f"no llm_energy mirror at {folder}; set LILOU_DATA_DIR to a folder holding it")
    return folder


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle) if any((v or "").strip() for v in r.values())]


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _run(**fields) -> ServingRun:
    return ServingRun(held_back=is_held_back(fields["gpu"]), **fields)


def mlenergy_v1(folder: Path) -> list[ServingRun]:
    """HF/FastChat at batch 1, FP16: request latency (prefill included) and energy per request on one GPU."""
    runs = []
    for r in _rows(folder / "mlenergy_v1_2023" / "all_runs_flat.csv"):
        latency_s, tokens = _float(r["latency"]), _float(r["response_length"])
        if not latency_s or not tokens:
            continue
        runs.append(_run(source="mlenergy_v1_2023", task=r["task"], model=r["model"], gpu=GPU_NAMES[r["gpu"]],
                         engine="hf", tp=1, batch=1, input_len=ASSUMED_PROMPT_TOKENS[r["task"]], input_assumed=True,
                         output_len=tokens, dtype="fp16", steady=False, itl_ms=1000 * latency_s / tokens,
                         itl_kind="per-token-incl-prefill", ttft_ms=None, e2e_ms=1000 * latency_s,
                         power_w=_float(r["derived_avg_power_w"]), power_window="request", config="bs1"))
    return runs


def mlenergy_v2(folder: Path) -> list[ServingRun]:
    """vLLM 0.5.4 servers (chunked prefill off): engine-side mean TPOT, steady-state power per GPU."""
    runs = []
    for r in _rows(folder / "mlenergy_v2_2024" / "all_runs_flat.csv"):
        if r["suite"] != "llm_text_generation" or r["PP"] != "1":
            continue
        runs.append(_run(source="mlenergy_v2_2024", task=r["task"], model=r["Model"], gpu=GPU_NAMES[r["gpu_dir"]],
                         engine="vllm", tp=int(r["TP"]), batch=float(r["Avg BS (reqs)"]),
                         input_len=ASSUMED_PROMPT_TOKENS[r["task"]], input_assumed=True,
                         output_len=float(r["Avg Output Tokens"]), dtype="bf16", steady=True,
                         itl_ms=1000 * float(r["Avg TPOT (s)"]), itl_kind="engine-mean", ttft_ms=None, e2e_ms=None,
                         power_w=_float(r["derived_avg_power_w_per_gpu"]), power_window="steady-state",
                         config=f"max_num_seqs={r['max_num_seqs']},tp={r['TP']}"))
    return runs


def mlenergy_v3(folder: Path) -> list[ServingRun]:
    """vLLM 0.11.1 servers (chunked prefill): steady-state time per output token (mean running batch / output
    throughput), steady-state power per GPU; TP-only runs of the text tasks (expert/data-parallel runs and MXFP4
    weights left out)."""
    runs = []
    for r in _rows(folder / "mlenergy_v3_2025" / "llm_runs_flat.csv"):
        dtype = _DTYPES.get(r["weight_precision"])
        if r["task"] not in V3_TEXT_TASKS or dtype is None or r["expert_parallel"] != "1" or r["data_parallel"] != "1":
            continue
        runs.append(_run(source="mlenergy_v3_2025", task=r["task"], model=r["model_id"], gpu=GPU_NAMES[r["gpu_model"]],
                         engine="vllm", tp=int(r["tensor_parallel"]), batch=float(r["avg_batch_size"]),
                         input_len=ASSUMED_PROMPT_TOKENS[r["task"]], input_assumed=True,
                         output_len=float(r["avg_output_len"]), dtype=dtype, steady=True,
                         itl_ms=_steady_itl_ms(r), itl_kind="steady-derived", ttft_ms=None, e2e_ms=None,
                         power_w=_float(r["derived_avg_power_w_per_gpu"]), power_window="steady-state",
                         config=f"max_num_seqs={r['max_num_seqs']},tp={r['tensor_parallel']}"))
    return runs


def _steady_itl_ms(row: dict[str, str]) -> float | None:
    """Mean ms between one sequence's tokens in steady state: each step emits one token per running sequence."""
    batch, throughput = _float(row["avg_batch_size"]), _float(row["output_throughput_tokens_per_sec"])
    return 1000.0 * batch / throughput if batch and throughput else None


def llm_inference_bench(folder: Path) -> list[ServingRun]:
    """Argonne: static batches in vLLM (FP16; input length = output length), batch latency; TTFT at input 1024,
    batch 16; NVML power of GPU 0 with 1 s of idle before and after inside the window."""
    base = folder / "llm_inference_bench"
    runs = []
    seen = set()
    for r in _rows(base / "All_results.csv"):
        if r["Framework"] != "vLLM" or r["Hardware"] not in GPU_NAMES:
            continue
        key = (r["Hardware"], r["Num of Hardware"], r["Model"], r["Input Output Length"], r["Batch Size"])
        if key in seen:  # 57 repeated keys upstream: the first is kept
            continue
        seen.add(key)
        length = int(r["Input Output Length"])
        if length + length > 2048 and r["Model"] in CONTEXT_2048:
            continue  # input + output exceed the model's context: upstream times are of runs that stopped early
        runs.append(_run(source="llm_inference_bench", task="static-batch", model=r["Model"],
                         gpu=GPU_NAMES[r["Hardware"]], engine="vllm", tp=int(r["Num of Hardware"]),
                         batch=int(r["Batch Size"]), input_len=length, input_assumed=False, output_len=length,
                         dtype="fp16", steady=False, itl_ms=None, itl_kind=None, ttft_ms=None,
                         e2e_ms=1000 * float(r["Latency"]), power_w=None, power_window=None,
                         config=f"batch={r['Batch Size']},len={length},n={r['Num of Hardware']}"))
    for r in _rows(base / "all_results_TTFT_ITL.csv"):
        end = _float(r.get("end_latency ") or r.get("end_latency"))
        if r["Framework"] != "vLLM" or r["Hardware"] not in GPU_NAMES:
            continue
        ttft = 1000 * float(r["TTFT Latency"])
        out = 1024  # the end-to-end run generates 1024 tokens (README)
        runs.append(_run(source="llm_inference_bench", task="ttft-itl", model=r["Model"], gpu=GPU_NAMES[r["Hardware"]],
                         engine="vllm", tp=int(r["Num of Hardware"]), batch=int(r["Batch Size"]),
                         input_len=int(r["Input Length"]), input_assumed=False, output_len=out, dtype="fp16",
                         steady=False, itl_ms=None if end is None else (1000 * end - ttft) / (out - 1),
                         itl_kind="derived-static", ttft_ms=ttft, e2e_ms=None, power_w=None, power_window=None,
                         config=f"batch={r['Batch Size']},in={r['Input Length']}"))
    for r in _rows(base / "power_results_tidy.csv"):
        gpu = GPU_NAMES.get(r["Hardware"])
        if gpu is None:
            continue
        length = int(r["Input Output Length"])
        engine = {"vLLM": "vllm", "TensorRT-LLM": "trtllm"}.get(r["Framework"])
        if engine is None:
            continue
        runs.append(_run(source="llm_inference_bench", task="power", model=r["Model"], gpu=gpu, engine=engine,
                         tp=int(r["Num of Hardware"]), batch=int(r["Batch Size"]), input_len=length,
                         input_assumed=False, output_len=length, dtype="fp16", steady=False, itl_ms=None,
                         itl_kind=None, ttft_ms=None, e2e_ms=1000 * float(r["Latency"]),
                         power_w=float(r["avg_power_W"]), power_window="batch+2s-idle",
                         config=f"{engine},batch={r['Batch Size']},len={length}",
                         note="GH200: NVML may report module power" if gpu == "gh200" else ""))
    return runs


def serving_runs(data_dir: str | os.PathLike[str] | None = None) -> list[ServingRun]:
    """Every run of the four tables (see the module docstring)."""
    folder = llm_energy_dir(data_dir)
    return mlenergy_v1(folder) + mlenergy_v2(folder) + mlenergy_v3(folder) + llm_inference_bench(folder)
