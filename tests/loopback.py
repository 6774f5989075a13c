"""A loopback HTTP server for remote-read tests and benchmarks (never the internet).

Serves the files under ``root`` on 127.0.0.1 at a random port, with ``Range`` (206 and
``Content-Range``), ``ETag``/``Last-Modified`` and ``If-Match`` (412 when the file changed), 404,
403 for names in ``forbidden``, a no-range mode (``no_range``: 200 and the whole body), a fault
mode (``drop``: the next N requests lose their connection before any response) and the two
Hugging Face Hub routes ckptctl uses: ``/api/models/REPO/revision/REV`` (the file listing) and
``/REPO/resolve/REV/FILE`` (the file, served from ``root/REPO/FILE`` or else ``root/FILE``).

Misbehaving modes (issue 44), each for GET requests only (``HEAD`` stays honest): ``gzip_body``
answers a range with ``Content-Encoding: gzip`` and that body (a gzip bomb); ``bad_range``
answers a range starting at 4 KiB or later with another one (``shift``: the 4 KiB before it,
``total``: another file size, ``missing``: no ``Content-Range``); ``drip_seconds`` sends the body
one byte at a time, that many seconds apart, for at most ``DRIP_LIMIT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Longest a dripping answer lasts: the handler stops by itself even if the client waits on.
DRIP_LIMIT_SECONDS = 10.0
#: How far ``bad_range = "shift"`` moves a range back.
SHIFT_BYTES = 4096

_RESOLVE = re.compile(r"^/(?P<repo>.+?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>.+?)/revision/(?P<rev>[^/]+)$")


class LoopbackServer(ThreadingHTTPServer):
    """The server; tests change its modes between requests."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.no_range = False
        self.drop = 0
        self.forbidden: set[str] = set()
        self.required_token: str | None = None
        self.gzip_body: bytes | None = None
        self.bad_range: str | None = None
        self.drip_seconds = 0.0
        self.log: list[tuple[str, str, str | None, dict[str, str]]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet about clients that hang up (a refused answer, a deadline); loud otherwise."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]  # a socket

    def requests_for(self, name: str) -> int:
        return sum(1 for _, path, _, _ in self.log if path.endswith(name))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackServer

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every response
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:  # quiet tests
        pass

    def do_HEAD(self) -> None:  # http.server's naming
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        srv = self.server
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        with srv.lock:
            srv.log.append((self.command, path, self.headers.get("Range"), dict(self.headers)))
            drop = srv.drop > 0
            if drop:
                srv.drop -= 1
        if drop:  # a dropped connection: no status line at all
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        token = srv.required_token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._status(401)
            return
        api = _API.match(path)
        if api:
            self._listing(api.group("repo"), head)
            return
        resolve = _RESOLVE.match(path)
        if resolve:
            repo_file = srv.root / resolve.group("repo") / resolve.group("file")
            file = repo_file if repo_file.is_file() else srv.root / resolve.group("file")
            name = resolve.group("file")
        else:
            file = srv.root / path.lstrip("/")
            name = path.lstrip("/")
        if name in srv.forbidden:
            self._status(403)
            return
        if not file.resolve().is_relative_to(srv.root.resolve()) or not file.is_file():
            self._status(404)
            return
        self._file(file, head)

    def _status(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _listing(self, repo: str, head: bool) -> None:
        folder = self.server.root / repo
        if not folder.is_dir():
            folder = self.server.root
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
        body = json.dumps({"id": repo, "siblings": [{"rfilename": n} for n in names]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _file(self, file: Path, head: bool) -> None:
        st = file.stat()
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        modified = email.utils.formatdate(st.st_mtime, usegmt=True)
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match != etag:
            self._status(412)
            return
        start, end = 0, st.st_size
        ranged = False
        spec = self.headers.get("Range")
        if spec and not self.server.no_range:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", spec)
            if match:
                start = int(match.group(1))
                end = min(st.st_size, int(match.group(2)) + 1) if match.group(2) else st.st_size
                if start >= st.st_size:
                    self._status(416)
                    return
                ranged = True
        claimed = f"bytes {start}-{end - 1}/{st.st_size}"
        if ranged and not head:
            start, end, claimed = self._misbehave(start, end, st.st_size, claimed)
        gzip_body = self.server.gzip_body if ranged and not head else None
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(len(gzip_body) if gzip_body else end - start))
        if ranged and claimed:
            self.send_header("Content-Range", claimed)
        if gzip_body is not None:
            self.send_header("Content-Encoding", "gzip")
        if not self.server.no_range:
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", modified)
        self.end_headers()
        if head:
            return
        try:
            if gzip_body is not None:
                self.wfile.write(gzip_body)
            else:
                self._body(file, start, end)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _misbehave(self, start: int, end: int, size: int, claimed: str) -> tuple[int, int, str]:
        """The range a ``bad_range`` server sends instead of ``[start, end)``, and its header."""
        mode = self.server.bad_range
        if mode is None or start < SHIFT_BYTES:
            return start, end, claimed
        if mode == "shift":
            start, end = start - SHIFT_BYTES, end - SHIFT_BYTES
            return start, end, f"bytes {start}-{end - 1}/{size}"
        if mode == "total":
            return start, end, f"bytes {start}-{end - 1}/{size + 1}"
        return start, end, ""  # "missing"

    def _body(self, file: Path, start: int, end: int) -> None:
        drip = self.server.drip_seconds
        with open(file, "rb") as f:
            f.seek(start)
            left = end - start
            stop = time.monotonic() + DRIP_LIMIT_SECONDS
            while left and (not drip or time.monotonic() < stop):
                chunk = f.read(1 if drip else min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.wfile.flush()
                left -= len(chunk)
                if drip:
                    time.sleep(drip)


@contextlib.contextmanager
def serve(root: str | os.PathLike[str]) -> Iterator[LoopbackServer]:
    """Serve ``root`` for the duration of a ``with`` block."""
    server = LoopbackServer(Path(root))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
