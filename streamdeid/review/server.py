"""The review page's web server: 127.0.0.1 only, a free port, a random token in every URL.

Why Starlette + uvicorn (the ``review`` extra): both are small, widely used and actively maintained; the
page needs a video that seeks, and Starlette's ``FileResponse`` answers HTTP range requests (206, 416,
If-Range) itself, while uvicorn serves the video stream and the page's other requests at once on one
thread (asyncio) and stops cleanly on Ctrl-C. The standard library's http.server has no range support;
bottle's default server is single-threaded, so a playing video would block every other request.

Security: the socket is bound to 127.0.0.1 (never 0.0.0.0) on a port the OS picks; every path starts with
``/TOKEN/`` (``secrets.token_urlsafe``, compared in constant time), and a request without it, or with a
Host header that is not this address (DNS rebinding), gets 403, as does a connection another local user
makes (review/peer.py: the browser's command line shows the token to every user). A Save's body is read up to
MAX_BODY and no further. Pages and files are sent with
``Cache-Control: no-store``, ``Referrer-Policy: no-referrer`` and a Content-Security-Policy that allows
nothing from another origin: the page loads no CDN and uploads nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
import webbrowser
from collections.abc import Callable
from importlib import resources

from .peer import peer_uid

HOST = "127.0.0.1"
STATIC_FILES = {"index.html": "text/html; charset=utf-8", "review.js": "text/javascript; charset=utf-8",
                "review.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"}
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "content-security-policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "media-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'"),
}
MAX_BODY = 4 * 1024 * 1024  # bytes of a Save request


def _missing_extra(exc: ImportError):
    from ..types import StreamdeidError

    return StreamdeidError(f"streamdeid review needs the review extra: pip install \"streamdeid[review]\" ({exc})")


def require_extra() -> None:
    """Fail at once when the review extra is not installed: before, a review tracked the whole source and
    scanned it again (seconds to minutes) and only then said so."""
    from importlib.util import find_spec

    for name in ("starlette", "uvicorn"):
        if find_spec(name) is None:
            raise _missing_extra(ImportError(f"No module named {name!r}"))


def static_text(name: str) -> bytes:
    return resources.files("streamdeid.review").joinpath("static", name).read_bytes()


class TokenGate:
    """ASGI middleware: only ``/TOKEN/...`` on this host and port passes, with the prefix taken off."""

    def __init__(self, app, token: str, port: int) -> None:
        self.app = app
        self.prefix = f"/{token}".encode()
        self.hosts = {f"{HOST}:{port}".encode(), f"localhost:{port}".encode()}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not served
            return await self.app(scope, receive, send)
        if not _this_users(scope):
            return await _plain(send, 403, b"403 Forbidden: this review page is its own user's\n")
        head, sep, rest = scope["path"][1:].partition("/")
        host = dict(scope.get("headers") or []).get(b"host", b"")
        if not (secrets.compare_digest(("/" + head).encode("utf-8", "replace"), self.prefix) and host in self.hosts):
            return await _plain(send, 403, b"403 Forbidden: this review page needs the URL streamdeid printed\n")
        if not sep:  # /TOKEN -> /TOKEN/ (relative links need the slash)
            return await _redirect(send, self.prefix.decode() + "/")
        inner = dict(scope, path="/" + rest, raw_path=("/" + rest).encode("utf-8"))
        return await self.app(inner, receive, send)


def _this_users(scope) -> bool:
    """Whether the connection comes from a socket of the user running the review (or the table cannot say:
    review/peer.py)."""
    return _same_user(scope.get("client"), scope.get("server"))


def _same_user(client, server) -> bool:
    """``_this_users`` for a (host, port) pair each side; True when either is unknown."""
    if not client or not server:
        return True
    uid = peer_uid(int(client[1]), int(server[1]))
    return uid is None or uid == os.geteuid()


def _local_user_protocol():
    """uvicorn's HTTP/1.1 protocol, closing a connection another local user opened as soon as it is accepted.
    Refusing its requests (``_this_users``) still left the socket open: uvicorn waits for a first request
    without a timeout, so another user's idle connections used up the review's file descriptors."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LocalUserOnly(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not _same_user(transport.get_extra_info("peername"), transport.get_extra_info("sockname")):
                transport.close()

    return LocalUserOnly


async def _plain(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items())]})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send, location: str) -> None:
    await send({"type": "http.response.start", "status": 307,
                "headers": [(b"location", location.encode()), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _bounded_body(request) -> bytes | None:
    """The request's body, or None once it passes MAX_BODY (read no further: a 400 MB Save took 885 MB)."""
    try:
        if int(request.headers.get("content-length") or 0) > MAX_BODY:
            return None
    except ValueError:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(review, token: str, port: int):
    """The Starlette app behind the token gate. ``review``: a prepared session.Review."""
    from ..types import StreamdeidError

    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
        from starlette.routing import Route
    except ImportError as exc:
        raise _missing_extra(exc) from None

    state = review.state()  # computed once, but for the edits saved so far (read again on each load)

    def secure(response):
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    async def page(request: Request):
        return secure(Response(static_text("index.html"), media_type=STATIC_FILES["index.html"]))

    async def static(request: Request):
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return secure(PlainTextResponse("not found", status_code=404))
        return secure(Response(static_text(name), media_type=STATIC_FILES[name]))

    async def api_state(request: Request):
        body = {**state, "edits": {"path": str(review.edits_path), **review.existing_edits()}}
        return secure(Response(json.dumps(body, separators=(",", ":")).encode(), media_type="application/json"))

    async def api_edits(request: Request):
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return secure(JSONResponse({"error": "send JSON"}, status_code=415))
        body = await _bounded_body(request)
        if body is None:
            return secure(JSONResponse({"error": "too large"}, status_code=413))
        try:
            try:
                payload = json.loads(body)
            except RecursionError:  # (a RuntimeError: it read as "not available", 501)
                raise ValueError("the JSON is nested too deep") from None
            if not isinstance(payload, dict):
                raise ValueError("a JSON object is expected")
            saved = await asyncio.to_thread(review.save, payload)
        except (ValueError, KeyError, TypeError) as exc:
            return secure(JSONResponse({"error": str(exc)}, status_code=400))
        except RuntimeError as exc:
            return secure(JSONResponse({"error": str(exc)}, status_code=501))
        except StreamdeidError as exc:  # the edits file cannot be written
            return secure(JSONResponse({"error": str(exc)}, status_code=500))
        return secure(JSONResponse(saved))

    async def thumb(request: Request):
        data = review.thumbs.get(request.path_params["name"])
        if data is None:
            return secure(PlainTextResponse("not found", status_code=404))
        return secure(Response(data, media_type="image/jpeg"))

    async def video(request: Request):
        # FileResponse answers Range requests (206 with Content-Range), so the browser seeks
        return secure(FileResponse(review.video_file, media_type="video/mp4" if review.video_file.suffix in
                                   (".mp4", ".m4v", ".mov") else "video/webm"))

    async def audit(request: Request):
        if review.audit_log is None:
            return secure(PlainTextResponse("no audit log", status_code=404))
        return secure(FileResponse(review.audit_log, media_type="text/plain; charset=utf-8"))

    routes = [
        Route("/", page),
        Route("/static/{name}", static),
        Route("/api/review", api_state),
        Route("/api/edits", api_edits, methods=["POST"]),
        Route("/thumb/{name}.jpg", thumb),
        Route("/video", video),
        Route("/audit.jsonl", audit),
    ]
    return TokenGate(Starlette(routes=routes), token, port)


def bind_local(port: int = 0) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: a free one); a port in use is a StreamdeidError."""
    from ..types import StreamdeidError

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise StreamdeidError(f"cannot serve the review on {HOST}:{port}: {exc.strerror or exc} "
                              "(give another --port, or 0 for a free one)") from None
    return sock


class ReviewServer:
    """uvicorn on a socket bound to 127.0.0.1 and a free port; ``url`` carries the token."""

    def __init__(self, review, *, port: int = 0, sock: socket.socket | None = None) -> None:
        """``sock``: one ``bind_local`` bound already (before the review's long preparation, so a busy port
        is reported at once); else one is bound to ``port`` here."""
        try:
            import uvicorn
        except ImportError as exc:
            raise _missing_extra(exc) from None
        self.token = secrets.token_urlsafe(24)
        self.sock = sock or bind_local(port)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}/{self.token}/"
        app = build_app(review, self.token, self.port)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=2, server_header=False, http=_local_user_protocol())
        self.server = uvicorn.Server(config)

    def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve until Ctrl-C (or ``stop``). ``on_ready``: called once the server accepts requests."""
        if on_ready is not None:
            def wait() -> None:
                while not self.server.started and not self.server.should_exit:
                    threading.Event().wait(0.02)
                if self.server.started:
                    on_ready()
            threading.Thread(target=wait, daemon=True).start()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def stop(self) -> None:
        self.server.should_exit = True


def open_browser(url: str) -> bool:
    """Open ``url`` in the user's graphical browser when there is one (webbrowser finds none on a bare
    server). A console browser (lynx, w3m: what webbrowser offers without a display) would take the
    terminal the server prints to, and cannot play the video: not opened."""
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    if type(browser) is webbrowser.GenericBrowser:
        return False
    try:
        return bool(webbrowser.open(url, new=2))
    except Exception:
        return False
