"""The web UI: server-rendered pages over the services, under ``/`` (docs/web.md).

Pages are Jinja2 templates (autoescaped) with a small script and stylesheet shipped in this
package (``static/``); every page reads without the script, which adds the live parts (the
form's prediction, following a log, refreshing a job's state).
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

__all__ = ["install_web"]


def install_web(app: FastAPI) -> None:
    """Mount the pages and their static files on ``app`` (made by ``create_app``)."""
    from gpuyard.web import datasets, images, interactive, jobs, pool

    static = files("gpuyard.web") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    app.include_router(pool.router)
    app.include_router(interactive.router)
    app.include_router(jobs.router)
    app.include_router(images.router)
    app.include_router(datasets.router)
