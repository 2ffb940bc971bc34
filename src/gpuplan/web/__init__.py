"""The web layer (L6): a JSON API mirroring the CLI and one page, served by `gpuplan serve`.

Needs the `web` extra (starlette, uvicorn); nothing here is imported by the CLI unless `serve`
runs. `app.create_app()` is the ASGI app; `adapter.run(command, body)` is its one door into
gpuplan.
"""
