"""The API's documentation pages, served with no internet: Swagger UI at `/docs`, ReDoc at `/redoc`.

Their scripts, styles and icon come from the `fastapi-offline` package (installed from PyPI with the
api) and are served by the api itself under `/docs/assets/`, so the pages load on an install that
reaches no CDN, and a Content-Security-Policy keeps them from fetching anything else. Both read
`/openapi.json`; Swagger UI's Authorize button takes an API key (the bearer scheme of `api.openapi`)
and keeps it across reloads.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/docs/assets"
# Swagger UI would otherwise ask validator.swagger.io about the document: nothing leaves the install.
SWAGGER_PARAMETERS = {"persistAuthorization": True, "validatorUrl": None}
# The pages may load nothing but the api's own URLs (ReDoc's menu shows a logo from its CDN otherwise);
# their inline start-up scripts and styles, and ReDoc's search worker (a blob URL), are allowed.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)


def assets_dir() -> Path:
    """The directory of the packaged Swagger UI and ReDoc assets."""
    return Path(str(files("fastapi_offline") / "static"))


def _own_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return page


def install_docs(app: FastAPI) -> None:
    """Serve `/docs`, `/redoc` and their assets (the app is made with `docs_url=None, redoc_url=None`)."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return _own_only(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} - Swagger UI",
                swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
                swagger_ui_parameters=SWAGGER_PARAMETERS,
            )
        )

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return _own_only(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )
