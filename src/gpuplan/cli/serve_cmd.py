"""`gpuplan serve`: the web page and JSON API on this machine (needs the `web` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from . import positive_float, positive_int

EPILOG = """examples:
  gpuplan serve                      # http://127.0.0.1:8000
  gpuplan serve --port 8080
API: POST /api/plan, /api/estimate, /api/tco (fields: the flags, with underscores);
GET /api/catalog/{gpus,systems,offers,models}, /api/validate; schema at /openapi.json.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="a web page and JSON API for plan, estimate and tco (pip install "
        "'gpuplan[web]')",
        description="Serve the page (inputs, ranked plans, four charts, permalinks) and the JSON "
        "API on HOST:PORT. Binds to this machine only unless --host says otherwise.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--time-limit", type=positive_float, default=20.0, metavar="S",
                   help="longest a request may compute, in seconds (default 20)")
    p.add_argument("--workers", type=positive_int,
                   help="requests computed at once, each in its own worker process "
                   "(default: one per core)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import ConfigError

    try:
        import uvicorn

        from ..web.app import create_app
    except ImportError as err:
        raise ConfigError(f"`gpuplan serve` needs the web extra ({err.name} is missing): "
                          "pip install 'gpuplan[web]'") from None
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {args.port}")
    app = create_app(time_limit_s=args.time_limit, workers=args.workers, processes=True)
    print(f"gpuplan: serving on http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
