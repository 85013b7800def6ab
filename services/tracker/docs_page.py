"""`/docs`: the interactive API reference served from this server, never from a CDN.

FastAPI's default `/docs` page loads Swagger UI from jsDelivr, so it stays blank offline or behind
a firewall. The tracker serves the copy of Swagger UI that the `swagger-ui-bundle` package ships;
where that package is missing, `/docs` says so and points to the schema at `/openapi.json`.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/static/swagger"


def swagger_assets() -> str | None:
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    return swagger_ui_bundle.swagger_ui_path


def add_docs(app: FastAPI) -> None:
    """Serve `/docs` from local Swagger UI assets (or a page that says why it cannot)."""
    folder = swagger_assets()
    if folder is not None:
        app.mount(ASSETS, StaticFiles(directory=folder), name="swagger")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        if folder is None:
            return HTMLResponse(
                "<!doctype html><title>API docs</title><p>The interactive API docs need the "
                "<code>swagger-ui-bundle</code> package (<code>pip install swagger-ui-bundle</code>), which "
                "this server lacks; it does not load Swagger UI from a CDN. The API schema is at "
                '<a href="/openapi.json">/openapi.json</a>.</p>', status_code=503)
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} · API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon-32x32.png")
