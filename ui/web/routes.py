"""The browser console's routes: ``GET /`` (the page) and ``GET /static/{name}`` (its assets).

Mount with ``Litestar(route_handlers=[..., *console_routes()])``. The handlers carry
``opt={"exclude_from_auth": True}`` (the page and assets need no key; the page asks the
operator for one and sends it with every API call) and are left out of the OpenAPI schema.

Assets are the files of ``ui/web/static/`` plus ``plotly.min.js``, taken from the *installed*
plotly package (``plotly.offline.get_plotlyjs()``), never a CDN. Every response carries a
Content-Security-Policy that forbids any origin but the server's own, so even a mistake in
the page cannot make the browser reach out.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from typing import Any

from litestar import Response, get
from litestar.exceptions import NotFoundException
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

PLOTLY_JS = "plotly.min.js"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Bare media types: Litestar's Response appends ``; charset=utf-8`` (its ``encoding``) to every
# ``text/`` type itself, so a charset written here went out twice.
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_OPT: dict[str, Any] = {"exclude_from_auth": True}


@functools.cache
def _plotly_js() -> bytes:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs()).encode()


@functools.cache
def _static_names() -> frozenset[str]:
    """The names of the files ``static/`` holds with a web suffix, listed once: a client's
    name is looked up here and never reaches the filesystem (a name too long for it raised
    ``OSError`` per request, each a 500 and a traceback repeating the name)."""
    folder = resources.files("agentconsole.ui.web.static")
    return frozenset(
        entry.name
        for entry in folder.iterdir()
        if entry.is_file() and not entry.name.startswith(".") and _suffix(entry.name) in _TYPES
    )


def asset(name: str) -> bytes | None:
    """The bytes of one asset, or None when there is no such asset.

    Only the listed files of ``static/`` (plain names with a web suffix: no folders, no Python
    files) and the plotly bundle are served, so a crafted name cannot escape the folder, read
    the package's code or touch the filesystem at all. Not cached per name: a cache keyed by
    clients' names would grow with every name tried; the few real assets are cached below.
    """
    if name == PLOTLY_JS:
        return _plotly_js()
    if name not in _static_names():
        return None
    return _static_bytes(name)


@functools.cache
def _static_bytes(name: str) -> bytes:
    """One listed file's bytes (only :func:`_static_names`' names come here: bounded)."""
    return resources.files("agentconsole.ui.web.static").joinpath(name).read_bytes()


@functools.cache
def asset_version(name: str) -> str:
    """A short content hash, appended to asset URLs so browsers may cache them for long."""
    data = asset(name)
    return hashlib.sha256(data).hexdigest()[:12] if data is not None else "0"


def _suffix(name: str) -> str:
    return name[name.rfind(".") :] if "." in name else ""


def _content_type(name: str) -> str:
    return _TYPES.get(_suffix(name), "application/octet-stream")


def render_page() -> bytes:
    """``index.html`` with each ``{{asset:NAME}}`` replaced by its versioned URL."""
    page = asset("index.html")
    if page is None:
        raise NotFoundException("console page missing from the installed package")
    html = page.decode()
    names = (
        "app.css",
        "app.js",
        "dag.js",
        "views.js",
        "nodecancel.js",
        "models.js",
        "tools.js",
        "charts.js",
    )
    for name in (*names, PLOTLY_JS):
        html = html.replace("{{asset:" + name + "}}", f"/static/{name}?v={asset_version(name)}")
    return html.encode()


@get("/", include_in_schema=False, opt=_OPT, sync_to_thread=False)
def console_page() -> Response[bytes]:
    """The single-page console."""
    return Response(
        render_page(),
        media_type=_TYPES[".html"],
        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"},
    )


@get("/static/{name:str}", include_in_schema=False, opt=_OPT, sync_to_thread=False)
def console_static(name: FromPath[str]) -> Response[bytes]:
    """One asset; versioned URLs make long caching safe."""
    data = asset(name)
    if data is None:
        # the name is the client's, of any length: not echoed back
        raise NotFoundException("no such asset")
    return Response(
        data,
        media_type=_content_type(name),
        headers={
            "Cache-Control": "public, max-age=86400",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": CSP,
        },
    )


def console_routes() -> list[HTTPRouteHandler]:
    """The route handlers of the browser console, for the server app to mount; the static
    folder is listed here, once, so a listing that fails does so at start-up."""
    _static_names()
    return [console_page, console_static]
