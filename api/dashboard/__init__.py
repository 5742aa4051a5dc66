"""The web dashboard (README: Dashboard): static files of this package, served at ``/`` by the API app.

The pages are plain ES modules talking only to the public ``/v1`` API; the charting library is the
Plotly.js bundle shipped inside the pinned ``plotly`` wheel (installed with the project, nothing
fetched at run time). Assets are read once, gzip-compressed once, and served from memory with a
strong ETag, so a reload costs a 304 and the 4.8 MB chart bundle is compressed once per process,
not once per request."""
from __future__ import annotations

import gzip
import hashlib
import mimetypes
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

STATIC = Path(__file__).with_name("static")
VENDOR = {"plotly.min.js": ("plotly", "package_data/plotly.min.js"),   # served name: (package, file in it)
          # the API docs' pages (/docs, /redoc), from the pinned fastapi-offline wheel: FastAPI's own fetch them
          # from a CDN, and show nothing on a host without the internet
          "swagger-ui-bundle.js": ("fastapi_offline", "static/swagger-ui-bundle.js"),
          "swagger-ui.css": ("fastapi_offline", "static/swagger-ui.css"),
          "redoc.standalone.js": ("fastapi_offline", "static/redoc.standalone.js"),
          "docs-favicon.png": ("fastapi_offline", "static/favicon.png")}
MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
               ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    etag: str
    media_type: str


@cache
def _asset(name: str) -> Asset | None:
    if name in VENDOR:
        package, inner = VENDOR[name]
        path = Path(str(resources.files(package).joinpath(inner)))
    else:
        path = (STATIC / name).resolve()
        if STATIC.resolve() not in path.parents:   # no ../ out of the static folder
            return None
    if not path.is_file():
        return None
    body = path.read_bytes()
    media_type = MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Asset(body, gzip.compress(body, compresslevel=6, mtime=0),
                 f'"{hashlib.sha256(body).hexdigest()[:32]}"', media_type)


def _serve(request: Request, name: str, cache_control: str) -> Response:
    asset = _asset(name)
    if asset is None:
        raise HTTPException(status_code=404, detail=f"no dashboard file {name!r}")
    headers = {"ETag": asset.etag, "Cache-Control": cache_control, "Vary": "Accept-Encoding"}
    if asset.etag in {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(asset.gzipped, media_type=asset.media_type, headers={**headers, "Content-Encoding": "gzip"})
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get("/")
def index(request: Request) -> Response:
    """The single page; its routes are URL fragments (#/experiments/ID …)."""
    return _serve(request, "index.html", "no-cache")


@router.get("/docs")
def swagger_ui() -> Response:
    """The OpenAPI schema as Swagger UI, its scripts served from here (FastAPI's default page loads them from a
    CDN)."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="SMD Lab API", swagger_js_url="/ui/swagger-ui-bundle.js",
                               swagger_css_url="/ui/swagger-ui.css", swagger_favicon_url="/ui/docs-favicon.png")


@router.get("/redoc")
def redoc() -> Response:
    """The OpenAPI schema as ReDoc, served from here, without web fonts."""
    return get_redoc_html(openapi_url="/openapi.json", title="SMD Lab API", redoc_js_url="/ui/redoc.standalone.js",
                          redoc_favicon_url="/ui/docs-favicon.png", with_google_fonts=False)


@router.get("/ui/{name:path}")
def asset(request: Request, name: str) -> Response:
    # no-cache: revalidated on every load (a 304 when unchanged), so an upgraded service is never
    # shown with stale scripts
    return _serve(request, name, "no-cache")
