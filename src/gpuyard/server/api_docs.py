"""The API's interactive documentation at ``/api/docs`` and the pool's ``/favicon.ico``,
served from installed packages so that they work on an air-gapped cluster (docs/web.md).

FastAPI's own docs page loads Swagger UI from a CDN, which is a blank page without the
internet. Here the same page (FastAPI's ``get_swagger_ui_html``, its documented self-hosting
recipe) points at Swagger UI's files as the ``fastapi-offline`` package ships them (Swagger UI
5, which reads OpenAPI 3.1), mounted under :data:`ASSETS`; nothing on the page is fetched from
outside the pool. Only the package's files are used, not its ``FastAPIOffline`` class.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.staticfiles import StaticFiles

__all__ = ["ASSETS", "DOCS", "FAVICON", "install_api_docs"]

DOCS = "/api/docs"
ASSETS = "/api/docs/assets"
FAVICON = "/favicon.ico"


def install_api_docs(app: FastAPI) -> None:
    """Serve the docs page for ``app.openapi_url``, its assets and the favicon."""
    openapi_url = app.openapi_url or "/api/v1/openapi.json"
    icon = files("gpuyard.web") / "static" / "favicon.ico"
    swagger_ui = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui)), name="api-docs-assets")

    @app.get(DOCS, include_in_schema=False)
    async def api_docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=FAVICON,
        )

    @app.get(FAVICON, include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(str(icon), media_type="image/x-icon")
