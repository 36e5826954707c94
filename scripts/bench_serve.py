"""Load benchmark of `lilou serve` on loopback (``make bench-serve``): bounded, nothing leaves 127.0.0.1.

A real uvicorn process serves three weight-free models from a --models-root (ResNet-18 from examples/,
ResNet-50 and BERT-base seq 128 exported from the zoo into datasets/bench_models) and is asked by an
httpx client, with JSON bodies naming the files, as an autoscaler would:

1. in-process baseline: ``Predictor.predict(path, gpu)`` in this process (parse, group, predict), median;
   and the server's warm path without HTTP (``Service.predict`` on a cached graph), to show the HTTP cost;
2. cold vs warm: per model, the first request (graph not cached) and then warm ones on the other GPUs,
   one at a time; the warm median against the in-process baseline (target <= 1.5x);
3. load: 200 requests at concurrency 16 over 3 models x 4 GPUs: errors (target 0), p50, p99, requests/s;
   the same against a second server started with --cache-size 0 shows what the cache saves under load;
4. memory: 2,000 more requests at concurrency 16, the server's RSS sampled every 100 and its peak (VmHWM).

Writes outputs/bench/serve.json.

    python scripts/bench_serve.py [--requests 200] [--concurrency 16] [--memory-requests 2000] [--no-cache-run]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"
MODELS_DIR = REPO / "datasets" / "bench_models"
GPUS = ["a10g", "t4", "a100-sxm4-80gb", "h100-sxm"]
WARM_TARGET = 1.5


def models() -> dict[str, str]:
    """name -> file under MODELS_DIR (exported once, weight-free)."""
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    files = {"resnet18": "resnet18.onnx", "resnet50": "resnet50-batch1.onnx", "bert-base": "bert-base-seq128.onnx"}
    if not (MODELS_DIR / files["resnet18"]).exists():
        shutil.copy(REPO / "examples" / "resnet18.onnx", MODELS_DIR / files["resnet18"])
    for name, options in (("resnet50", {"batch": 1}), ("bert-base", {"batch": 1, "seq": 128})):
        path = MODELS_DIR / files[name]
        if not path.exists():
            from lilou.zoo.export import export_onnx

            export_onnx(name, path, strip_weights=True, **options)
    return files


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(*options: str) -> Iterator[tuple[str, int, float]]:
    """(base URL, pid, startup seconds) of a `lilou serve` process on loopback."""
    port = free_port()
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "lilou.cli", "serve", "--host", "127.0.0.1", "--port",
                                str(port), "--log-level", "warning", *options])
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"lilou serve exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/v1/healthz", timeout=2).status_code == 200:
                    break
            if time.perf_counter() - start > 180:
                raise SystemExit("lilou serve did not start within 180 s")
            time.sleep(0.1)
        yield base, process.pid, time.perf_counter() - start
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def in_process(files: dict[str, str], rounds: int) -> dict[str, dict]:
    from lilou.api import Predictor

    predictor = Predictor()
    results = {}
    for name, file in files.items():
        path = MODELS_DIR / file
        predictor.predict(path, gpu=GPUS[0])  # first call: lazy loads, not counted
        times = []
        for _ in range(rounds):
            for gpu in GPUS:
                start = time.perf_counter()
                predictor.predict(path, gpu=gpu)
                times.append(time.perf_counter() - start)
        results[name] = {"p50_ms": 1000 * statistics.median(times), "n": len(times),
                         "service_warm_p50_ms": _service_warm(path, rounds)}
    return results


def _service_warm(path: Path, rounds: int) -> float:
    """The server's warm path without HTTP: Service.predict on a cached graph and grouping (median ms)."""
    from lilou.serve.schemas import PredictRequest
    from lilou.serve.service import Service, Settings

    service = Service(Settings(models_root=path.parent))
    try:
        service.predict(PredictRequest(gpu=GPUS[0]), service.models_root.resolve(path.name))
        times = []
        for _ in range(rounds):
            for gpu in GPUS[1:]:
                start = time.perf_counter()
                service.predict(PredictRequest(gpu=gpu), service.models_root.resolve(path.name))
                times.append(time.perf_counter() - start)
    finally:
        service.shutdown()
    return 1000 * statistics.median(times)


def cold_warm(base: str, files: dict[str, str], warm_rounds: int) -> dict[str, dict]:
    out = {}
    with httpx.Client(base_url=base, timeout=120) as client:
        for name, file in files.items():
            start = time.perf_counter()
            response = client.post("/v1/predict", json={"model": file, "gpu": GPUS[0]})
            cold = time.perf_counter() - start
            response.raise_for_status()
            warm = []
            for _ in range(warm_rounds):
                for gpu in GPUS[1:]:
                    start = time.perf_counter()
                    client.post("/v1/predict", json={"model": file, "gpu": gpu}).raise_for_status()
                    warm.append(time.perf_counter() - start)
            out[name] = {"cold_ms": 1000 * cold, "warm_p50_ms": 1000 * statistics.median(warm), "warm_n": len(warm)}
    return out


async def load(base: str, files: dict[str, str], requests: int, concurrency: int,
               on_progress=None) -> dict[str, float | int]:
    """``requests`` POST /v1/predict over models x GPUs, ``concurrency`` in flight."""
    pairs = itertools.cycle([(file, gpu) for file in files.values() for gpu in GPUS])
    jobs = [next(pairs) for _ in range(requests)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    done = 0
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        async def worker() -> None:
            nonlocal done
            while not queue.empty():
                file, gpu = queue.get_nowait()
                start = time.perf_counter()
                try:
                    response = await client.post("/v1/predict", json={"model": file, "gpu": gpu})
                    if response.status_code != 200:
                        errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                latencies.append(time.perf_counter() - start)
                done += 1
                if on_progress is not None and done % 100 == 0:
                    on_progress(done)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return {"requests": requests, "concurrency": concurrency, "errors": sum(errors.values()),
            "errors_by_kind": errors, "p50_ms": 1000 * percentile(latencies, 50),
            "p99_ms": 1000 * percentile(latencies, 99), "requests_per_s": requests / wall, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--memory-requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="in-process and warm repeats per GPU")
    parser.add_argument("--no-cache-run", action="store_true", help="skip the --cache-size 0 comparison")
    parser.add_argument("--out", type=Path, default=OUT / "serve.json")
    args = parser.parse_args(argv)
    for option in ("requests", "concurrency", "memory_requests", "rounds"):  # 0 ran and wrote serve.json, exit 0
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} {getattr(args, option)}: give at least 1")

    files = models()
    print("in-process Predictor.predict ...", flush=True)
    baseline = in_process(files, args.rounds)
    result: dict = {"models": files, "gpus": GPUS, "host": "127.0.0.1", "cpus": os.cpu_count(),
                    "load_average_start": os.getloadavg()[0], "in_process": baseline}
    with server("--models-root", str(MODELS_DIR)) as (base, pid, startup):
        result["startup_s"] = startup
        result["rss_after_start_mb"] = memory_kb(pid)["VmRSS"] / 1024
        print("cold vs warm ...", flush=True)
        result["cold_warm"] = cold_warm(base, files, args.rounds)
        for name, row in result["cold_warm"].items():
            row["warm_vs_in_process"] = row["warm_p50_ms"] / baseline[name]["p50_ms"]
            row["target_ok"] = row["warm_vs_in_process"] <= WARM_TARGET
        print(f"load: {args.requests} requests at concurrency {args.concurrency} ...", flush=True)
        result["load"] = asyncio.run(load(base, files, args.requests, args.concurrency))
        samples: list[dict] = []

        def sample(done: int) -> None:
            samples.append({"requests": done, "rss_mb": memory_kb(pid)["VmRSS"] / 1024})

        print(f"memory: {args.memory_requests} requests ...", flush=True)
        memory_load = asyncio.run(load(base, files, args.memory_requests, args.concurrency, sample))
        peak = memory_kb(pid)["VmHWM"] / 1024
        first = next((s["rss_mb"] for s in samples if s["requests"] >= 200), samples[0]["rss_mb"] if samples else 0.0)
        result["memory"] = {"requests": args.memory_requests, "errors": memory_load["errors"],
                            "p50_ms": memory_load["p50_ms"], "requests_per_s": memory_load["requests_per_s"],
                            "peak_rss_mb": peak, "rss_at_200_mb": first,
                            "rss_at_end_mb": samples[-1]["rss_mb"] if samples else None,
                            "growth_after_200_mb": (samples[-1]["rss_mb"] - first) if samples else None,
                            "samples": samples}
        result["cache"] = httpx.get(f"{base}/v1/healthz").json()["cache"]
    if not args.no_cache_run:
        print("load without the graph cache (--cache-size 0) ...", flush=True)
        with server("--models-root", str(MODELS_DIR), "--cache-size", "0") as (base, _, _):
            result["load_no_cache"] = asyncio.run(load(base, files, args.requests, args.concurrency))
    result["load_average_end"] = os.getloadavg()[0]
    result["targets"] = {"errors": "0", "warm_vs_in_process": f"<= {WARM_TARGET}x",
                         "memory": "flat over 2,000 requests (growth after the first 200 small against peak)"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    from lilou.research.ablation import write_provenance

    write_provenance(args.out)
    _print(result)
    print(f"wrote {args.out}")
    return 0


def _print(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(title="lilou serve on loopback: warm vs in-process, per model (ms)")
    for column in ("model", "in-process p50", "same, cached (no HTTP)", "cold (1st)", "warm p50", "warm / in-process"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in result["cold_warm"].items():
        table.add_row(name, f"{result['in_process'][name]['p50_ms']:.1f}",
                      f"{result['in_process'][name]['service_warm_p50_ms']:.1f}", f"{row['cold_ms']:.1f}",
                      f"{row['warm_p50_ms']:.1f}", f"{row['warm_vs_in_process']:.2f}x")
    console.print(table)
    for key in ("load", "load_no_cache"):
        if key in result:
            r = result[key]
            console.print(f"{key}: {r['requests']} requests at concurrency {r['concurrency']}: {r['errors']} errors, "
                          f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, {r['requests_per_s']:.1f} req/s")
    m = result["memory"]
    console.print(f"memory: {m['requests']} requests, {m['errors']} errors, peak RSS {m['peak_rss_mb']:.0f} MB, "
                  f"RSS {m['rss_at_200_mb']:.0f} MB after 200 -> {m['rss_at_end_mb']:.0f} MB at the end")


if __name__ == "__main__":
    sys.exit(main())
