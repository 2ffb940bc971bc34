"""The ASGI app (Starlette): the JSON API, its OpenAPI schema and the page at `/`.

Starlette rather than FastAPI: two small dependencies (starlette, and uvicorn to serve), and
the request fields already have one definition, the CLI's argparse parser, from which
`openapi.py` writes the schema; pydantic models would be a second copy.

Limits: a request body of at most 1 MiB; at most `workers` computations at once (worker
processes, one per core by default: `worker.py`) and `max_queue` waiting (429 past that); each
answer within `time_limit_s` (422 past it; the search itself is bounded by its search-space cap,
so abandoned work ends by itself). Bad input is a 4xx whose `error` is the CLI's one line; no
traceback ever leaves the server (a worker process that dies is a 503, and a new pool serves
the next request). The JSON of `/api/plan` is the search and its JSON alone: the charts, the
per-plan estimates and the TCO are computed only for `?charts=1` (the page) and the reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from concurrent.futures import BrokenExecutor, Executor
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from . import adapter, worker
from .adapter import RequestError

MAX_BODY_BYTES = 1 << 20
POSTED = ("plan", "estimate", "tco")
STATIC = {"app.js": "text/javascript", "style.css": "text/css"}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


async def _body(request: Request) -> dict[str, Any]:
    size = request.headers.get("content-length")
    if size and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise RequestError(413, "request body larger than 1 MiB")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise RequestError(413, "request body larger than 1 MiB")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise RequestError(422, "the request body must be a JSON object of CLI flag names "
                                "with underscores, e.g. {\"model\": \"llama3-8b\"}")
    return body


def _query_body(request: Request, command: str) -> dict[str, Any]:
    known = adapter.fields(command)
    body: dict[str, Any] = {}
    for name in request.query_params:
        f = known.get(name)
        values = request.query_params.getlist(name)
        if f is None:
            body[name] = values[-1]  # the adapter names the unknown field
        elif f.kind == "array":
            body[name] = values
        elif f.kind == "boolean":
            body[name] = values[-1].lower() in ("1", "true", "yes", "on")
        else:
            body[name] = values[-1]
    return body


class Api:
    """Runs adapter calls on a bounded pool (`worker.make_pool`: processes or threads), at most
    `workers` at once and `max_queue` waiting, each answered within a time limit."""

    def __init__(self, time_limit_s: float = 20.0, workers: int | None = None,
                 max_queue: int = 32, processes: bool = False) -> None:
        self.time_limit_s, self.max_queue = time_limit_s, max_queue
        self.workers, self.processes = workers or worker.default_workers(), processes
        self.pool: Executor | None = None  # made at the first call (or at start-up)
        self.pending = 0

    def _pool(self) -> Executor:
        if self.pool is None:
            self.pool = worker.make_pool(self.workers, self.processes)
        return self.pool

    async def start(self) -> None:
        """Start and warm every worker process now, so that none starts under load."""
        if self.processes:
            pool = self._pool()
            await asyncio.gather(*[asyncio.wrap_future(pool.submit(worker.ready))
                                   for _ in range(self.workers)])

    def close(self, wait: bool = True) -> None:
        """Stop the pool: queued calls are cancelled; `wait` for the running ones to end (at
        server shutdown, so the worker processes exit cleanly before the server does)."""
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
            self.pool = None

    async def call(self, fn: Any, *args: Any, meta: dict[str, Any] | None = None,
                   key: str | None = None) -> Any:
        """fn(*args) in the pool; `meta` receives the worker's search-cache state ('cache') and
        the computation's CPU seconds ('cpu_s'); `key`: a plan's request shape, for the pool
        of worker processes to route it by (`worker.Routed`)."""
        if self.pending >= self.max_queue:
            raise RequestError(429, "the server is busy; try again in a moment")
        self.pending += 1
        pool = self._pool()
        try:
            fut = asyncio.wrap_future(pool.submit(worker.call, fn, *args, key=key)
                                      if isinstance(pool, worker.Routed) else
                                      pool.submit(worker.call, fn, *args))
        except BrokenExecutor:
            self.pending -= 1
            raise self._broken(pool) from None
        fut.add_done_callback(lambda _: self._done())
        try:
            outcome = await asyncio.wait_for(asyncio.shield(fut), self.time_limit_s)
            if meta is not None and outcome[0] == "ok":
                meta.update(cache=outcome[2], cpu_s=outcome[3])
            return worker.unwrap(outcome)
        except TimeoutError:
            raise RequestError(422, f"this request needs more than the server's "
                                    f"{self.time_limit_s:g} s limit; narrow the search (gpu, "
                                    f"vendor, max_gpus) or run the same command locally") from None
        except BrokenExecutor:
            raise self._broken(pool) from None

    def _broken(self, pool: Executor) -> RequestError:
        """A worker process died (killed, out of memory): a new pool serves the next request."""
        if self.pool is pool:
            self.close(wait=False)
        return RequestError(503, "a worker process stopped while computing; try again")

    def _done(self) -> None:
        self.pending -= 1

    async def handle(self, fn: Any, *args: Any, key: str | None = None) -> Response:
        meta: dict[str, Any] = {}
        try:
            value = await self.call(fn, *args, meta=meta, key=key)
            # the worker's CPU time (standard Server-Timing) and, for plans, whether the search
            # found its request shape in the worker's cache (hit or miss)
            headers = {"Server-Timing": f"cpu;dur={meta['cpu_s'] * 1e3:.1f}"}
            if meta.get("cache"):
                headers["X-Gpuplan-Search-Cache"] = meta["cache"]
            return JSONResponse(value, headers=headers)
        except RequestError as err:
            return _error(err.status, err.message)
        except Exception as err:  # a bug here, not in the worker: one line, no traceback
            return _error(500, f"internal error ({type(err).__name__}); the same request on "
                               "the command line shows where")


async def _openapi(request: Request) -> Response:
    from .openapi import schema

    return JSONResponse(schema())

async def _page(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    if name != "index.html" and name not in STATIC:
        return _error(404, f"no file '{name}'")
    text = resources.files("gpuplan.web").joinpath("static", name).read_text()
    return Response(text, media_type=STATIC.get(name, "text/html"))

async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")


def _key(command: str, body: dict[str, Any]) -> str | None:
    """A plan's request shape, by which the worker processes route it (`worker.Routed`)."""
    return worker.plan_key(body) if command == "plan" else None


def create_app(time_limit_s: float = 20.0, workers: int | None = None,
               processes: bool = False) -> Starlette:
    """The app; `workers` computations at once (default: one per core), in worker processes
    when `processes` (what `gpuplan serve` runs), else in threads of this process."""
    api = Api(time_limit_s=time_limit_s, workers=workers, processes=processes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await api.start()
        try:
            yield
        finally:
            api.close()

    async def compute(request: Request) -> Response:
        command = request.path_params["command"]
        if command not in POSTED:
            return _error(404, f"no command '{command}'; POST to /api/plan, /api/estimate or "
                               "/api/tco")
        try:
            body = await _body(request)
        except RequestError as err:
            return _error(err.status, err.message)
        if request.query_params.get("charts") in ("1", "true"):
            from .views import VIEWS

            return await api.handle(VIEWS[command], body, key=_key(command, body))
        return await api.handle(adapter.run, command, body, key=_key(command, body))

    async def listing(request: Request) -> Response:
        what = request.path_params.get("what")
        command = f"catalog/{what}" if what else "validate"
        if command not in adapter.COMMANDS:
            return _error(404, f"no catalog '{what}'; choose gpus, systems, offers or models")
        return await api.handle(adapter.run, command, _query_body(request, command))

    async def report(request: Request) -> Response:
        from .views import report_html

        command = request.path_params["command"]
        if command not in POSTED:
            return _error(404, f"no report '{command}'; choose plan, estimate or tco")
        try:  # rendered in the worker too: the event loop only moves bytes
            return HTMLResponse(await api.call(report_html, command, await _body(request)))
        except RequestError as err:
            return _error(err.status, err.message)

    routes = [
        Route("/", _page),
        Route("/static/{name}", _page),
        Route("/openapi.json", _openapi),
        Route("/api/{command:str}", compute, methods=["POST"]),
        Route("/api/report/{command:str}", report, methods=["POST"]),
        Route("/api/catalog/{what:str}", listing),
        Route("/api/validate", listing),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error},
                    lifespan=lifespan)
    app.state.api = api
    return app
