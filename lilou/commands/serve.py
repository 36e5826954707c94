"""`lilou serve`: the HTTP prediction service and web page (lilou.serve), run by uvicorn."""
from __future__ import annotations

import argparse
import ipaddress
import json
import os

from lilou.commands._common import warn
from lilou.docs import doc


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="HTTP prediction service (/v1/predict, /v1/rank, ...) and a web page at /",
        description="Serve predictions over HTTP (FastAPI + uvicorn): POST /v1/predict, /v1/rank, /v1/plan, "
                    "/v1/llm with an ONNX upload or a file under --models-root; GET /v1/gpus, /v1/healthz; "
                    f"the page at /. Binds to loopback unless --host says otherwise. See {doc('service.md')}.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="server processes (default 1); each loads the checkpoints and keeps its own cache")
    parser.add_argument("--threads", type=int, default=4, metavar="N",
                        help="threads per process that read and group models not cached yet (default 4); two more "
                             "serve cached models, so those never wait behind a large upload")
    parser.add_argument("--max-upload-mb", type=float, default=256, metavar="MB",
                        help="largest request body accepted, MiB (default 256)")
    parser.add_argument("--max-uploads", type=int, default=16, metavar="N",
                        help="uploads in progress at once; one more is answered 503 (default 16): with "
                             "--max-upload-mb, the most disk uploads hold")
    parser.add_argument("--models-root", default=None, metavar="DIR",
                        help="folder whose ONNX files JSON requests may name (default: none, uploads only)")
    parser.add_argument("--cache-size", type=int, default=64, metavar="N",
                        help="parsed graphs kept in memory, least recently used dropped first (default 64)")
    parser.add_argument("--cache-mb", type=float, default=1024.0, metavar="MB",
                        help="memory the cached graphs may take, estimated from their node counts, least recently "
                             "used dropped first (default 1024)")
    parser.add_argument("--time-budget-s", type=float, default=60.0, metavar="S",
                        help="per-request time budget; past it the answer is 503 (default 60)")
    parser.add_argument("--upload-timeout-s", type=float, default=120.0, metavar="S",
                        help="time a request's body may take to arrive; past it the answer is 408 (default 120)")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="let pages of ORIGIN (e.g. https://dash.example.com; * for any) call the API from a "
                             "browser and read the Lilou-Warnings header (CORS); repeat it or give a comma list. "
                             "Default: none (the service has no authentication, so only its own page may call it)")
    parser.add_argument("--access-log", action="store_true",
                        help="log one line per request (method, path, status) at level info (default: off)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default info)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from lilou.errors import LilouInputError
    from lilou.serve.app import SETTINGS_ENV, create_app

    if not 0 <= args.port <= 65535:
        raise LilouInputError(f"--port {args.port}: not a TCP port (0-65535)")
    if args.workers < 1 or args.threads < 1:
        raise LilouInputError("--workers and --threads must be at least 1")
    if not _is_loopback(args.host):
        warn(f"binding to {args.host}: the service is reachable from other machines; it has no authentication")
    options = {"models_root": None if args.models_root is None else os.path.abspath(args.models_root),
               "max_upload_mb": args.max_upload_mb, "max_uploads": args.max_uploads, "cache_size": args.cache_size,
               "cache_mb": args.cache_mb,
               "time_budget_s": args.time_budget_s, "threads": args.threads, "upload_timeout_s": args.upload_timeout_s,
               "cors_origins": args.cors_origin}
    create_app(**options)  # bad options fail here, with one line and exit status 2, before uvicorn starts
    # and so do missing or unreadable checkpoints: each server process loads them in its ASGI lifespan, where the
    # error was uvicorn's traceback and exit status 3
    from lilou.api import Predictor

    Predictor()
    _check_bindable(args.host, args.port)
    os.environ[SETTINGS_ENV] = json.dumps(options)
    uvicorn.run("lilou.serve.app:app_from_environment", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level, server_header=False, access_log=args.access_log)
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_bindable(host: str, port: int) -> None:
    """A port in use (or an address this machine does not have) is one line and exit status 2, not uvicorn's five
    log lines and exit status 3."""
    import socket

    from lilou.errors import LilouInputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise LilouInputError(f"--host {host}: cannot be resolved ({error.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            raise LilouInputError(f"cannot listen on {host}:{port}: {error.strerror or error} (is another server "
                                  "on that port? give --port another)") from None
