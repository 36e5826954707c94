"""`lilou llm MODEL --gpu NAME ...`: TTFT, ITL, throughput, power and memory fit of a decoder LLM being served."""
from __future__ import annotations

import argparse

from lilou.commands._common import add_format_option, console, print_json, warn
from lilou.docs import doc
from lilou.errors import LilouInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "llm", help="LLM serving: time to first token, inter-token latency, power, memory fit",
        description="Predicted serving of a decoder LLM (a built-in name or a Hugging Face config.json) on one GPU, "
                    "MIG slice or tensor-parallel group: TTFT, ITL, throughput, mean power, energy per token and "
                    "whether weights + KV cache + workspace fit. Each prefill and decode step is composed from the "
                    f"kernel model's per-kernel predictions ({doc('llm.md')}).")
    parser.add_argument("model", nargs="?", help="built-in model name (see --list) or path of a config.json")
    parser.add_argument("--list", action="store_true", help="list the built-in model names and exit")
    parser.add_argument("--gpu", help="GPU name (any alias, see `lilou gpus`)")
    parser.add_argument("--mig", default=None, metavar="PROFILE", help="MIG profile of the GPU, e.g. 3g.40gb")
    parser.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel GPUs (default 1)")
    parser.add_argument("--batch", type=int, default=1, metavar="B", help="concurrent sequences (default 1)")
    parser.add_argument("--input-len", type=int, default=None, metavar="I", help="prompt tokens per sequence")
    parser.add_argument("--output-len", type=int, default=None, metavar="O", help="generated tokens per sequence")
    parser.add_argument("--dtype", default=None, metavar="D",
                        help="weights and math: bf16, fp16, fp8, fp4 (NVFP4) or int8 (W8A8), int4 (AWQ/GPTQ weight-only, FP16 "
                             "math) or fp32 (default: the config's quantization_config, else its torch_dtype as "
                             "vLLM's --dtype auto serves it, else bf16 where the GPU has it, else fp16)")
    parser.add_argument("--kv-dtype", default=None, metavar="D",
                        help="KV-cache dtype: bf16, fp16, fp8 (vLLM's fp8_e4m3, fp8_e5m2 too; not under --engine hf) or "
                             "fp32 (vllm: with --dtype fp32 only) (default: the --dtype; bf16 for fp8/fp4/int8 weights, "
                             "fp16 for int4)")
    parser.add_argument("--engine", default="vllm", metavar="E", help="vllm (CUDA-graph decode, default) or hf "
                                                                      "(transformers eager)")
    add_format_option(parser)
    parser.set_defaults(handler=run, quick_exit=True)  # lilou.cli.entry: leave without teardown


def run(args: argparse.Namespace) -> int:
    if args.list:
        from lilou.llm.config import builtin_models

        names = builtin_models()
        if args.format == "json":
            print_json(names)
        else:
            print("\n".join(names))
        return 0
    missing = [flag for flag, value in (("MODEL", args.model), ("--gpu", args.gpu), ("--input-len", args.input_len),
                                        ("--output-len", args.output_len)) if value is None]
    if missing:
        raise LilouInputError(f"llm: {', '.join(missing)} required (or --list)")
    from lilou.llm import LLMPredictor

    result = LLMPredictor().predict(args.model, args.gpu, mig=args.mig, tp=args.tp, batch=args.batch,
                                    input_len=args.input_len, output_len=args.output_len, dtype=args.dtype,
                                    kv_dtype=args.kv_dtype, engine=args.engine)
    data = result.to_json()
    if args.format == "json":
        print_json(data)
        for message in result.warnings:
            warn(message)
        return 0
    _table(data)
    return 0


def _table(data: dict) -> None:
    from rich.table import Table

    def value(key: str, unit: str, digits: int = 2) -> str:
        v = data[key]
        if v is None:
            return "-"
        interval = (data.get("intervals") or {}).get(key)
        text = f"{v:,.{digits}f} {unit}"
        return text + (f"  (90 %: {interval[0]:,.{digits}f} - {interval[1]:,.{digits}f})" if interval else "")

    device = data["gpu"] + (f"/{data['mig']}" if data["mig"] else "") + (f" x{data['tp']}" if data["tp"] > 1 else "")
    table = Table(title=f"{data['model']} on {device} ({data['engine']}, {data['dtype']}, KV {data['kv_dtype']}): "
                        f"batch {data['batch']}, {data['input_len']} in / {data['output_len']} out")
    table.add_column("quantity")
    table.add_column("predicted", justify="right")
    memory = data["memory"]
    rows = [("time to first token", value("ttft_ms", "ms")), ("inter-token latency", value("itl_ms", "ms", 3)),
            ("end-to-end", value("e2e_ms", "ms", 1)), ("output tokens/s", value("tokens_per_s", "tok/s", 1)),
            ("mean power per GPU", value("power_w", "W", 1)),
            ("energy per output token", value("energy_per_token_j", "J", 4)),
            ("memory per GPU", f"{memory['total_gb']:.2f} of {round(memory['device_gb'], 2):g} GiB (weights "
                               f"{memory['weights_gb']:.2f}, KV {memory['kv_cache_gb']:.2f}, workspace "
                               f"{memory['activations_gb']:.2f})"),
            ("fits", "yes" if memory["fits"] else "NO"), ("largest batch that fits", str(data["max_batch_fitting"]))]
    steady = data.get("steady_state")
    if steady:
        interval = steady["interval_ms"]
        rows[2:2] = [(f"ITL, server with {data['batch']} running", f"{steady['itl_ms']:,.3f} ms" + (
            f"  (90 %: {interval[0]:,.3f} - {interval[1]:,.3f})" if interval else "")),
            (f"tokens/s, server with {data['batch']} running", f"{steady['tokens_per_s']:,.1f} tok/s")]
    for name, text in rows:
        table.add_row(name, text)
    out = console()
    out.print(table)
    for message in data["warnings"]:
        out.print(f"[yellow]warning:[/yellow] {message}")
