"""Checkpoints behind a URL: a :class:`~ckptctl.sources.ByteSource` read by HTTP range requests.

``https://``, ``http://``, ``hf://ORG/REPO/FILE[@REVISION]`` (and a bare ``hf://ORG/REPO``, which
stands for its index or single checkpoint), ``s3://`` and any other protocol ``fsspec`` knows
(``gs://``, ``az://``) when its backend is installed. ``fsspec`` is the optional ``remote`` extra
(``pip install 'ckptctl[remote]'``); this module imports it only when a URL is opened, so local
paths and ``ckptctl --help`` never pay for it.

How bytes are fetched:

- one metadata request (``HEAD`` for HTTP) gives the size and the ``ETag``/``Last-Modified``;
- reads go through a block cache of ``BLOCK_BYTES`` blocks; a miss fetches the missing run of
  blocks in one range request plus ``READAHEAD_BLOCKS`` more, and a miss in the last blocks of
  the file fetches the whole tail (zip end records and central directory), so parsing a header
  costs two or three requests, not one per field;
- reads larger than ``DIRECT_READ_BYTES`` (tensor data) bypass the cache, in requests of at
  most ``MAX_REQUEST_BYTES``;
- HTTP answers are checked, never trusted: ``Accept-Encoding: identity`` is sent and any other
  ``Content-Encoding`` refused before the body is read (never decompressed); a 206 must carry
  the ``Content-Range`` asked for (start, end, size); a 200 serves only a read from byte 0, and
  only the bytes asked for are read; every request ends within ``CKPTCTL_REMOTE_DEADLINE``
  seconds (``CKPTCTL_REMOTE_TIMEOUT`` bounds each wait, which a byte at a time resets);
- names joined to a folder URL (shards, rank files: :func:`join_url`) and ``hf://`` paths
  have no ``.``/``..`` segment and no encoded dot or slash, and the path the client would
  request (decoded and normalised by yarl, as aiohttp sends it) stays in the folder;
- every range request carries ``If-Match`` (or ``If-Unmodified-Since``): a file replaced between
  requests answers 412, reported as changed (exit 3), never parsed as a mix of two files;
- dropped connections, timeouts, 429 and 5xx are retried ``MAX_ATTEMPTS`` times with backoff;
  404/403 are reported at once with the status and the URL (credentials removed).

``hf://`` is resolved to the Hub's ``/resolve/`` HTTPS URL (``HF_ENDPOINT``, default
``https://huggingface.co``) and authenticated with ``HF_TOKEN`` or the Hugging Face token file;
S3 credentials come from fsspec (``s3fs``: AWS environment and profiles). Tokens are sent as
headers, never printed; every message names the URL with credentials removed (:func:`redact`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import os
import posixpath
import re
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast

from ckptctl.errors import CkptError, ExitCode, InputError
from ckptctl.fix import Note, Option
from ckptctl.sources.local import CHUNK_BYTES, ByteSource

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence

logger = logging.getLogger(__name__)

#: Cache block size: the unit of range requests for header parsing.
BLOCK_BYTES = 128 * 1024
#: Blocks fetched past a miss (a header usually continues where the first read stopped).
READAHEAD_BLOCKS = 1
#: Blocks fetched at once when a read falls in the last blocks (zip end records + directory).
TAIL_BLOCKS = 4
#: Reads at least this large go straight to the server, uncached (tensor data).
DIRECT_READ_BYTES = 4 * BLOCK_BYTES
#: Most bytes the block cache keeps; least recently used blocks go first.
MAX_CACHE_BYTES = 64 * 1024 * 1024
#: Attempts per request when the connection drops, times out, or the server answers 429/5xx.
MAX_ATTEMPTS = 4
#: First retry delay; doubles each attempt.
RETRY_DELAY_SECONDS = 0.2
#: Files larger than this are fetched whole only with --yes (or --download).
MAX_UNCONFIRMED_FETCH_BYTES = 256 * 1024 * 1024
#: Seconds to wait for a connection or for the next bytes (``CKPTCTL_REMOTE_TIMEOUT``).
DEFAULT_TIMEOUT_SECONDS = 30.0
#: Seconds one HTTP request may take from sending it to its last byte
#: (``CKPTCTL_REMOTE_DEADLINE``): a server dripping one byte at a time never trips the timeout
#: above, which restarts with every byte.
DEFAULT_DEADLINE_SECONDS = 300.0
#: Most bytes one range request asks for: larger reads are split, so that each request's
#: deadline stands for a minimum rate (a whole-file fetch gets one deadline per this many bytes).
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Largest small document read whole (the Hub's file listing).
MAX_LISTING_BYTES = 16 * 1024 * 1024
#: The Hub, unless ``HF_ENDPOINT`` names another (a mirror, or a test server).
DEFAULT_HF_ENDPOINT = "https://huggingface.co"

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SECRET_PARAM = re.compile(r"sig|token|key|credential|auth|password|secret|^x-amz-", re.I)
_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` (a URL), false for local paths."""
    return isinstance(path, str) and _URL.match(path) is not None


def redact(url: str) -> str:
    """``url`` without credentials: no ``user:password@``, secret query values replaced.

    Example:
        >>> redact("https://u:p@host/a.pt?X-Amz-Signature=abc&v=1")
        'https://host/a.pt?X-Amz-Signature=REDACTED&v=1'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'REDACTED' if _SECRET_PARAM.search(k) else v}" for k, v in pairs)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


# --- errors -------------------------------------------------------------------------------


class RemoteUnavailableError(CkptError):
    """A URL was given but the ``remote`` extra (or the protocol's fsspec backend) is missing."""

    exit_code = ExitCode.USAGE


class ConfirmationRequiredError(CkptError):
    """Reading the input needs the whole remote file; it is large and --yes was not given."""

    exit_code = ExitCode.USAGE


class RemoteError(InputError):
    """A remote read failed: HTTP status, no range support, changed file, retries exhausted."""


# --- per-invocation policy and traffic ----------------------------------------------------------


@dataclass(frozen=True)
class RemotePolicy:
    """What the user allowed: ``download`` fetches every remote file whole before reading it;
    ``yes`` allows whole-file fetches above :data:`MAX_UNCONFIRMED_FETCH_BYTES`."""

    download: bool = False
    yes: bool = False


#: The policy of the running command (the CLI sets it from ``--download``/``--yes``).
POLICY: contextvars.ContextVar[RemotePolicy] = contextvars.ContextVar(
    "ckptctl_remote_policy",
    default=RemotePolicy(),  # noqa: B039  # frozen, never mutated
)


class Traffic:
    """Requests and bytes fetched since the last :meth:`take` (thread-safe; shards in parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_fetched = 0
        self.used = False

    def add(self, requests: int, nbytes: int) -> None:
        with self._lock:
            self.requests += requests
            self.bytes_fetched += nbytes
            self.used = True

    def take(self) -> dict[str, int] | None:
        """The counts since the last call (None when nothing remote was read), then reset."""
        with self._lock:
            if not self.used:
                return None
            out = {"requests": self.requests, "bytes_fetched": self.bytes_fetched}
            self.requests = self.bytes_fetched = 0
            self.used = False
            return out


#: Traffic of every remote source of this process; reports take it after each file.
TRAFFIC = Traffic()


# --- URL resolution -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubFile:
    """One file on the Hugging Face Hub: ``hf://REPO/FILE@REVISION``."""

    repo: str
    filename: str | None
    revision: str

    def url(self) -> str:
        """The HTTPS ``/resolve/`` URL of the file."""
        assert self.filename is not None
        rev = urllib.parse.quote(self.revision, safe="")
        return f"{hf_endpoint()}/{self.repo}/resolve/{rev}/{urllib.parse.quote(self.filename)}"

    def display(self) -> str:
        name = f"/{self.filename}" if self.filename else ""
        rev = "" if self.revision == "main" else f"@{self.revision}"
        return f"hf://{self.repo}{name}{rev}"


_HUB_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth", ".bpk", ".ckpt", ".mpk",
                      ".gz", ".pkl")  # fmt: skip


def parse_hf(url: str) -> HubFile:
    """Split ``hf://ORG/REPO/FILE[@REVISION]`` (also ``hf://ORG/REPO@REVISION/FILE`` and a bare
    ``hf://ORG/REPO``, ``filename`` None) into its parts.

    Raises:
        RemoteError: not a Hub URL.
    """
    rest = url[len("hf://") :].strip("/")
    if rest.startswith("models/"):
        rest = rest[len("models/") :]
    revision = "main"
    parts = rest.split("/")
    for index, part in enumerate(parts):
        if "@" in part:
            parts[index], revision = part.split("@", 1)
            if index < len(parts) - 1:  # ORG/REPO@REV/FILE: the revision ends at the next "/"
                break
    parts = [p for p in parts if p]
    revision = urllib.parse.unquote(revision)  # refs/pr/1 is written refs%2Fpr%2F1
    if not parts or revision == "":
        raise RemoteError("not a Hugging Face URL (hf://ORG/REPO/FILE[@REVISION])", path=url)
    _check_name("/".join(parts), url)
    if revision in (".", ".."):
        raise RemoteError(f"the revision {revision!r} is not a branch, tag or commit", path=url)
    # Repos are ORG/NAME (or a legacy NAME); a 2-part URL ending like a file is NAME/FILE.
    if len(parts) >= 3 or (len(parts) == 2 and parts[1].lower().endswith(_HUB_FILE_SUFFIXES)):
        split = 2 if len(parts) >= 3 else 1
        return HubFile("/".join(parts[:split]), "/".join(parts[split:]), revision)
    return HubFile("/".join(parts), None, revision)


_ENCODED_DOT_OR_SLASH = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


def _check_name(name: str, shown: str) -> None:
    """Refuse a relative name that could leave its folder once the URL library decodes and
    normalises it (``%2e%2e/`` becomes ``../``, which yarl then removes with the folder)."""
    segments = name.replace("\\", "/").split("/")
    if _ENCODED_DOT_OR_SLASH.search(name) or any(s in (".", "..") for s in segments):
        raise RemoteError(
            f"the name {name!r} could leave its folder (a '.' or '..' segment, or an encoded "
            "dot or slash)",
            path=shown,
            hint="file names in a remote checkpoint are plain relative paths",
        )


def _request_path(url: str) -> str:
    """The path a request for ``url`` asks for, as the HTTP client sends it (decoded, dot
    segments removed); for other protocols the same, computed by hand."""
    if url.startswith(("http://", "https://")):
        import yarl  # aiohttp's URL type: what it sends

        return yarl.URL(url).path
    return posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(url).path))


def _check_inside(url: str, folder: str, shown: str) -> None:
    inside = _request_path(folder).rstrip("/") + "/"
    if not (_request_path(url) + "/").startswith(inside):
        raise RemoteError(
            f"resolves to {_request_path(url)!r}, outside the folder {inside!r}", path=shown
        )


def join_url(folder: str, name: str) -> str:
    """The URL of the file ``name`` in the remote folder ``folder`` (a URL ending in ``/``).

    Raises:
        RemoteError: ``name`` has a ``.``/``..`` segment or an encoded dot or slash, or the
            URL a request would ask for is outside ``folder``.
    """
    _check_name(name, redact(folder))
    url = folder + name
    _check_inside(url, folder, redact(url))
    return url


def hf_endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` or https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_HF_ENDPOINT).rstrip("/")


def hf_token() -> str | None:
    """``HF_TOKEN`` (or the token file ``huggingface-cli login`` writes), or None."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token.strip()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def resolve_url(url: str, suffixes: Sequence[str]) -> str:
    """A URL naming one file: a bare ``hf://ORG/REPO`` becomes its ``*.index.json`` or its one
    checkpoint (a file ending in one of ``suffixes``); other URLs are returned as they are.

    Raises:
        RemoteError: the repository cannot be listed, or holds no checkpoint or several.
        RemoteUnavailableError: fsspec is not installed.
    """
    if not url.startswith("hf://"):
        return url
    hub = parse_hf(url)
    if hub.filename is not None:
        return url
    rev = urllib.parse.quote(hub.revision, safe="")
    api = f"{hf_endpoint()}/api/models/{hub.repo}/revision/{rev}"
    import json

    try:
        listing = json.loads(_get_small(api, hub.display()))
        files = sorted(str(s["rfilename"]) for s in listing.get("siblings", []))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise RemoteError("the Hub's file listing is not valid JSON", path=hub.display()) from None
    found = [f for f in files if f.endswith(".safetensors.index.json")]
    found = found or [f for f in files if f.endswith(".index.json")]
    if not found:
        found = [f for f in files if f.lower().endswith(tuple(suffixes))]
        preferred = [f for f in found if f == "model.safetensors"]
        found = preferred or found
    if len(found) != 1:
        what = ", ".join(found[:5]) if found else "none"
        raise RemoteError(
            f"the repository holds {len(found)} checkpoints ({what})",
            path=hub.display(),
            hint="name the file: hf://ORG/REPO/FILE",
        )
    return HubFile(hub.repo, found[0], hub.revision).display()


# --- fsspec access ---------------------------------------------------------------------------


def _fsspec() -> Any:  # noqa: ANN401  # fsspec is untyped
    try:
        import fsspec
    except ImportError:
        raise RemoteUnavailableError(
            "reading URLs needs the 'remote' extra: pip install 'ckptctl[remote]'"
        ) from None
    return fsspec


def _env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from the environment variable ``name``, else
    ``default``."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


def _timeout() -> float:
    return _env_seconds("CKPTCTL_REMOTE_TIMEOUT", DEFAULT_TIMEOUT_SECONDS)


def _deadline() -> float:
    return _env_seconds("CKPTCTL_REMOTE_DEADLINE", DEFAULT_DEADLINE_SECONDS)


@dataclass(frozen=True)
class _Target:
    """Where the bytes are: the fsspec URL, the headers to send, the name shown to users."""

    url: str
    headers: dict[str, str]
    display: str
    secrets: tuple[str, ...]

    @property
    def is_http(self) -> bool:
        return self.url.startswith(("http://", "https://"))


def _target(url: str) -> _Target:
    if url.startswith("hf://"):
        hub = parse_hf(url)
        if hub.filename is None:
            raise RemoteError("name a file in the repository", path=url)
        rev = urllib.parse.quote(hub.revision, safe="")
        _check_inside(hub.url(), f"{hf_endpoint()}/{hub.repo}/resolve/{rev}/", hub.display())
        token = hf_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return _Target(hub.url(), headers, hub.display(), (token,) if token else ())
    parts = urllib.parse.urlsplit(url)
    secrets = tuple(s for s in (parts.password, parts.query) if s)
    return _Target(url, {}, redact(url), secrets)


def _filesystem(target: _Target) -> tuple[Any, str]:
    fsspec = _fsspec()
    try:
        if target.is_http:
            import aiohttp

            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=_timeout(), sock_read=_timeout()
            )
            # never inflate: a gzip-encoded answer is refused (_checked_answer), not decoded
            client = {"timeout": timeout, "auto_decompress": False}
            return fsspec.filesystem("http", client_kwargs=client), target.url
        return fsspec.core.url_to_fs(target.url)  # type: ignore[no-any-return]  # untyped
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise RemoteUnavailableError(
            f"reading {target.display.split('://')[0]}:// URLs needs a backend that is not "
            f"installed ({missing})",
            hint="pip install 'ckptctl[remote]' (and s3fs for s3://, gcsfs for gs://, adlfs "
            "for az://)",
        ) from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise RemoteError(f"cannot read this URL: {exc}", path=target.display) from None


def _scrub(text: str, target: _Target) -> str:
    for secret in target.secrets:
        text = text.replace(secret, "***")
    return text.replace(target.url, target.display)


def _status(exc: BaseException) -> int | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status", None) or getattr(current, "code", None)
        if isinstance(status, int) and 100 <= status < 600:
            return status
        current = current.__cause__ or current.__context__
    return None


_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 410: "Gone",
            412: "Precondition Failed", 416: "Range Not Satisfiable"}  # fmt: skip


def _http_error(status: int, target: _Target) -> RemoteError:
    reason = _REASONS.get(status, "")
    if status == 412:
        return RemoteError(
            "the file changed on the server while it was being read (its ETag/Last-Modified "
            "no longer matches)",
            path=target.display,
            hint="run the command again",
        )
    hint: str | None = None
    if status in (401, 403):
        hint = (
            "set HF_TOKEN (or run `huggingface-cli login`) for gated or private repositories"
            if target.display.startswith("hf://")
            else "check the URL and your credentials"
        )
    elif status == 404:
        hint = (
            "check the repository, the file name and the revision"
            if target.display.startswith("hf://")
            else "check the URL"
        )
    return RemoteError(f"HTTP {status} {reason}".rstrip(), path=target.display, hint=hint)


def _permanent(exc: BaseException, target: _Target) -> CkptError | None:
    """The error to raise now, or None when ``exc`` is worth retrying."""
    if isinstance(exc, CkptError):
        return exc
    status = _status(exc)
    if status is not None and status not in _RETRY_STATUS:
        return _http_error(status, target)
    if isinstance(exc, FileNotFoundError) and status is None and exc.__cause__ is None:
        return _http_error(404, target)
    if isinstance(exc, ValueError) and "range requests" in str(exc):
        return _no_ranges(target)
    if isinstance(exc, PermissionError):
        return _http_error(403, target)
    return None


def _with_retries(call: Callable[[], Any], target: _Target, what: str) -> tuple[Any, int]:
    """``call()``, retried on transient failures; returns (result, attempts made)."""
    delay = RETRY_DELAY_SECONDS
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return call(), attempt
        except Exception as exc:  # noqa: PERF203  # a retry loop; the network dominates
            problem = _permanent(exc, target)
            if problem is not None:
                TRAFFIC.add(attempt, 0)
                raise problem from None
            reason = _scrub(f"{type(exc).__name__}: {exc}".rstrip(": "), target)
            logger.info("%s of %s failed (attempt %d): %s", what, target.display, attempt, reason)
            if attempt == MAX_ATTEMPTS:
                TRAFFIC.add(attempt, 0)
                raise RemoteError(
                    f"{what} failed {MAX_ATTEMPTS} times ({reason})",
                    path=target.display,
                    hint="check the network and run the command again "
                    "(CKPTCTL_REMOTE_TIMEOUT sets the timeout in seconds)",
                ) from None
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def _no_ranges(target: _Target) -> RemoteError:
    return RemoteError(
        "the server does not support range requests",
        path=target.display,
        hint=Note("pass {fix0} to fetch the whole file first", (Option("download"),)),
    )


# --- HTTP requests: what the server answers is checked, never trusted -----------------------


class _HttpStatus(Exception):  # carries a status for _status(), never shown
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


@dataclass(frozen=True)
class _Span:
    """What one GET asks for: bytes ``[start, end)`` of a file of ``size`` bytes, or with
    ``end`` None the whole body (no ``Range`` header), of at most ``size`` bytes."""

    start: int
    end: int | None
    size: int

    def describe(self) -> str:
        if self.end is None:
            return "the whole file"
        return f"bytes {self.start}-{self.end - 1}"


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _checked_range(headers: Any, span: _Span, target: _Target) -> None:  # noqa: ANN401  # aiohttp's multidict
    """A 206 must carry exactly the bytes asked for, of a file of the size first reported."""
    assert span.end is not None
    answered = str(headers.get("Content-Range", "")).strip()
    match = _CONTENT_RANGE.fullmatch(answered)
    if (
        match is not None
        and (int(match[1]), int(match[2])) == (span.start, span.end - 1)
        and (match[3] == "*" or int(match[3]) == span.size)
    ):
        return
    shown = answered or "no Content-Range"
    raise RemoteError(
        f"the server answered {shown} for a request of {span.describe()}/{span.size}",
        path=target.display,
        hint="the server (or a proxy) sends other bytes than asked for; run the command again",
    )


def _checked_answer(status: int, headers: Any, span: _Span, target: _Target) -> int:  # noqa: ANN401  # aiohttp's multidict
    """How many body bytes to read from an answer to ``span``, once its status, encoding and
    range are what was asked for.

    Raises:
        _HttpStatus: an error status (retried or reported by :func:`_permanent`).
        RemoteError: an encoded body, another range than asked for, a whole file for a range
            that does not start at 0.
    """
    if not 200 <= status < 300:
        raise _HttpStatus(status)
    encoding = str(headers.get("Content-Encoding", "identity")).strip().lower()
    if encoding not in ("", "identity"):
        raise RemoteError(
            f"the server answered {span.describe()} with Content-Encoding {encoding!r}; "
            "only unencoded bytes are read",
            path=target.display,
            hint="the server ignores Accept-Encoding: identity; try another mirror",
        )
    if span.end is None or status == 200:
        if status != 200:
            raise RemoteError(f"the server answered HTTP {status} for the whole file",
                              path=target.display)  # fmt: skip
        if span.start > 0:
            raise _no_ranges(target)
        return span.size if span.end is None else span.end  # a range from 0: only what was asked
    if status != 206:
        raise RemoteError(f"the server answered HTTP {status} for a range request",
                          path=target.display)  # fmt: skip
    _checked_range(headers, span, target)
    return span.end - span.start


async def _get(
    fs: Any,  # noqa: ANN401  # fsspec's HTTPFileSystem, untyped
    target: _Target,
    headers: dict[str, str],
    span: _Span,
    sink: Callable[[bytes], object],
) -> int:
    """GET ``span`` of ``target`` into ``sink``, reading no more body than the span holds;
    returns the bytes read. A whole body longer than ``span.size`` is refused."""
    session = await fs.set_session()
    sent = {**headers, "Accept-Encoding": "identity"}
    if span.end is not None:
        sent["Range"] = f"bytes={span.start}-{span.end - 1}"
    async with session.get(target.url, headers=sent) as answer:
        want = _checked_answer(answer.status, answer.headers, span, target)
        limit = want + 1 if span.end is None else want  # one byte more: the body is too long
        got = 0
        while got < limit and (chunk := await answer.content.read(min(CHUNK_BYTES, limit - got))):
            got += len(chunk)
            sink(chunk)
    if got > want:
        raise RemoteError(
            f"the server sent more than the {want} bytes of {span.describe()}",
            path=target.display,
            hint="the file changed or the server is broken; run the command again",
        )
    return got


def _run_http(
    fs: Any,  # noqa: ANN401  # fsspec's HTTPFileSystem, untyped
    target: _Target,
    what: str,
    seconds: float,
    make: Callable[[], Awaitable[Any]],
) -> Any:  # noqa: ANN401  # what make() returns
    """``make()`` on fsspec's event loop, given up after ``seconds``: the whole-request deadline
    (``CKPTCTL_REMOTE_TIMEOUT`` bounds each wait, which a byte at a time resets)."""
    from fsspec.asyn import sync

    async def bounded() -> Any:  # noqa: ANN401  # what make() returns
        task = asyncio.ensure_future(make())
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise RemoteError(
            f"{what} took longer than {seconds:g} s",
            path=target.display,
            hint="the server is too slow; CKPTCTL_REMOTE_DEADLINE sets the seconds a request "
            "may take",
        )

    return sync(fs.loop, bounded)


class _RemoteBuffer:
    """What readers slice like ``ByteSource.buffer``: ``len()`` and ``buf[a:b]``, fetched on demand.

    It has no buffer protocol, so parsers slice it (``struct.unpack(bytes(buf[a:b]))``) rather
    than ``struct.unpack_from(buf, a)``.
    """

    def __init__(self, source: RemoteSource) -> None:
        self._source = source

    def __len__(self) -> int:
        return self._source.size

    def __getitem__(self, key: slice) -> memoryview:
        if not isinstance(key, slice):
            raise TypeError("a remote buffer is read by slices")
        start, stop, step = key.indices(self._source.size)
        if step != 1:
            raise TypeError("a remote buffer is read by contiguous slices")
        return memoryview(self._source.read(start, max(0, stop - start)))


class RemoteSource(ByteSource):
    """A remote file read by range requests, with read-ahead and a block cache.

    Args:
        url: ``https://``, ``hf://``, ``s3://`` ... naming one file.

    Raises:
        RemoteUnavailableError: fsspec (or the protocol's backend) is not installed (exit 2).
        RemoteError: 404/403, no size, retries exhausted (exit 3).
    """

    is_remote = True

    def __init__(self, url: str) -> None:  # no super().__init__: there is no local file
        self._target = _target(url)
        self.path = self._target.display
        self.url = url
        self._fs, self._fspath = _filesystem(self._target)
        info, attempts = _with_retries(self._info, self._target, "reading the file's size")
        TRAFFIC.add(attempts, 0)
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise RemoteError(
                "the server does not report the file's size",
                path=self.path,
                hint=Note("pass {fix0} to fetch the whole file first", (Option("download"),)),
            )
        self.size = size
        self._condition = self._conditions(info)
        self._handle: Any = None
        self._blocks: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._local: ByteSource | None = None
        self._tmp: IO[bytes] | None = None
        if POLICY.get().download:
            self.fetch_all("--download was given", confirmed=True)

    def _info(self) -> dict[str, Any]:
        if not self._target.is_http:
            return self._fs.info(self._fspath)  # type: ignore[no-any-return]  # untyped
        fs, path, headers = self._fs, self._fspath, self._target.headers
        found = _run_http(fs, self._target, "reading the file's size", _deadline(),
                          lambda: fs._info(path, headers=headers))  # fmt: skip
        return found  # type: ignore[no-any-return]  # untyped

    def _conditions(self, info: dict[str, Any]) -> dict[str, str]:
        if not self._target.is_http:
            return {}
        etag = info.get("ETag")
        if isinstance(etag, str) and etag and not etag.startswith("W/"):
            return {"If-Match": etag}
        modified = info.get("Last-Modified")
        if isinstance(modified, str) and modified:
            return {"If-Unmodified-Since": modified}
        return {}

    # --- raw fetches --------------------------------------------------------------------

    def _open_handle(self) -> Any:  # noqa: ANN401  # an fsspec file, untyped
        if self._handle is None:  # not HTTP: the backend's own range reads (s3fs, gcsfs ...)
            self._handle = self._fs.open(self._fspath, "rb", cache_type="none")
        return self._handle

    def _fetch_once(self, start: int, end: int) -> bytes:
        if not self._target.is_http:
            return bytes(self._open_handle()._fetch_range(start, end))
        parts: list[bytes] = []
        # identity: a range of a gzip-encoded body would be a range of other bytes
        headers = {**self._target.headers, **self._condition}
        span = _Span(start, end, self.size)
        fs, target = self._fs, self._target
        _run_http(fs, target, f"reading {span.describe()}", _deadline(),
                  lambda: _get(fs, target, headers, span, parts.append))  # fmt: skip
        return b"".join(parts)

    def _fetch(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` in one range request (retried on transient failures)."""
        data: bytes
        data, attempts = _with_retries(
            lambda: self._fetch_once(start, end), self._target, f"reading bytes {start}-{end - 1}"
        )
        TRAFFIC.add(attempts, len(data))
        if len(data) != end - start:
            raise RemoteError(
                f"the server sent {len(data)} bytes for a range of {end - start} "
                f"(at byte {start} of {self.size}); the file changed or was truncated",
                path=self.path,
                hint="run the command again",
            )
        return data

    # --- ByteSource interface -------------------------------------------------------------

    def fileno(self) -> int:
        """Remote files have no descriptor (callers fall back to :meth:`view`)."""
        import io

        raise io.UnsupportedOperation("a remote file has no file descriptor")

    @property
    def buffer(self) -> memoryview:
        """The whole file, sliced on demand (a downloaded file: its memory map)."""
        if self._local is not None:
            return self._local.buffer
        # Readers only take len() and slices of a buffer; the cast keeps their annotations.
        return cast("memoryview", _RemoteBuffer(self))

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` from the cache, fetching missing blocks.

        Raises:
            CorruptCheckpointError: the range is not inside the file.
            RemoteError: the fetch failed.
        """
        self.check_range(offset, length, "read")
        if self._local is not None:
            return self._local.read(offset, length)
        if length == 0:
            return b""
        if length >= DIRECT_READ_BYTES:  # one request per MAX_REQUEST_BYTES: each has a deadline
            end = offset + length
            if length <= MAX_REQUEST_BYTES:
                return self._fetch(offset, end)
            return b"".join(
                self._fetch(start, min(end, start + MAX_REQUEST_BYTES))
                for start in range(offset, end, MAX_REQUEST_BYTES)
            )
        first, last = offset // BLOCK_BYTES, (offset + length - 1) // BLOCK_BYTES
        with self._lock:
            self._fill(first, last)
            data = b"".join(self._blocks[b] for b in range(first, last + 1))
            for b in range(first, last + 1):
                self._blocks.move_to_end(b)
        skip = offset - first * BLOCK_BYTES
        return data[skip : skip + length]

    def view(self, offset: int, length: int) -> memoryview:
        """``read`` as a memoryview (remote bytes are always a copy)."""
        if self._local is not None:
            return self._local.view(offset, length)
        return memoryview(self.read(offset, length))

    def _fill(self, first: int, last: int) -> None:
        blocks = self._blocks
        n_blocks = max(1, -(-self.size // BLOCK_BYTES))
        b = first
        while b <= last:
            if b in blocks:
                b += 1
                continue
            start = b
            while b <= last and b not in blocks:
                b += 1
            stop = b  # missing run [start, stop)
            if stop >= n_blocks - TAIL_BLOCKS:  # the tail: end records, directory
                start = min(start, max(0, n_blocks - TAIL_BLOCKS))
                stop = n_blocks
            else:
                stop = min(n_blocks, stop + READAHEAD_BLOCKS)
            while start < stop and start in blocks:
                start += 1
            while stop > start and (stop - 1) in blocks:
                stop -= 1
            data = self._fetch(start * BLOCK_BYTES, min(self.size, stop * BLOCK_BYTES))
            for i in range(start, stop):
                blocks[i] = data[(i - start) * BLOCK_BYTES : (i - start + 1) * BLOCK_BYTES]
            while len(blocks) * BLOCK_BYTES > MAX_CACHE_BYTES and len(blocks) > last - first + 1:
                oldest = next(iter(blocks))
                if first <= oldest <= last:
                    blocks.move_to_end(oldest)
                    continue
                del blocks[oldest]

    def fetch_all(self, reason: str, *, confirmed: bool = False) -> None:
        """Fetch the whole file into a temporary file, then read from there.

        Args:
            reason: why the whole file is needed (said when asking for ``--yes``).
            confirmed: the user asked for it (``--download``).

        Raises:
            ConfirmationRequiredError: larger than :data:`MAX_UNCONFIRMED_FETCH_BYTES` without
                ``--yes`` or ``--download`` (exit 2).
        """
        if self._local is not None:
            return
        policy = POLICY.get()
        if self.size > MAX_UNCONFIRMED_FETCH_BYTES and not (confirmed or policy.yes):
            raise ConfirmationRequiredError(
                f"{reason}: the whole file ({_human(self.size)}) must be fetched",
                path=self.path,
                hint=Note(
                    "pass {fix0} to fetch it (or {fix1} to keep a local copy first)",
                    (Option("yes"), Option("download")),
                ),
            )
        logger.info("fetching all %d bytes of %s: %s", self.size, self.path, reason)
        tmp = tempfile.NamedTemporaryFile(prefix=".ckptctl-remote-", suffix=".tmp")  # noqa: SIM115  # closed in close()
        try:
            _with_retries(lambda: self._download(tmp), self._target, "fetching the file")
            tmp.flush()
            self._local = ByteSource(tmp.name)
        except BaseException:
            tmp.close()
            raise
        self._tmp = tmp
        self._blocks.clear()

    def _download(self, out: IO[bytes]) -> None:
        out.seek(0)
        out.truncate()
        TRAFFIC.add(1, 0)

        def sink(chunk: bytes) -> None:
            out.write(chunk)
            TRAFFIC.add(0, len(chunk))

        if self._target.is_http:
            headers = {**self._target.headers, **self._condition}
            fs, target, whole = self._fs, self._target, _Span(0, None, self.size)
            rounds = max(1, -(-self.size // MAX_REQUEST_BYTES))  # the deadline of range reads
            done = _run_http(fs, target, "fetching the file", _deadline() * rounds,
                             lambda: _get(fs, target, headers, whole, sink))  # fmt: skip
        else:
            done = 0
            with self._fs.open(self._fspath, "rb") as stream:
                while chunk := stream.read(CHUNK_BYTES):
                    sink(chunk)
                    done += len(chunk)
        if done != self.size:
            raise RemoteError(
                f"fetched {done} bytes, the server said {self.size}; the file changed",
                path=self.path,
                hint="run the command again",
            )

    def sibling(self, name: str) -> str:
        """The URL of ``name`` next to this file (shards next to their index)."""
        if self.url.startswith("hf://"):
            hub = parse_hf(self.url)
            assert hub.filename is not None
            folder = hub.filename.rsplit("/", 1)[0] + "/" if "/" in hub.filename else ""
            return join_url(f"hf://{hub.repo}@{hub.revision}/{folder}", name)
        return join_url(self.url.split("?", 1)[0].rsplit("/", 1)[0] + "/", name)

    def close(self) -> None:
        """Drop the cache and any downloaded copy."""
        self._blocks.clear()
        if self._handle is not None:
            with contextlib.suppress(Exception):
                self._handle.close()
            self._handle = None
        if self._local is not None:
            self._local.close()
            self._local = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.close()
            self._tmp = None

    def __enter__(self) -> RemoteSource:
        return self


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def open_remote(url: str) -> RemoteSource:
    """Open ``url`` as a byte source (see :class:`RemoteSource`)."""
    return RemoteSource(url)


@contextlib.contextmanager
def policy(download: bool = False, yes: bool = False) -> Iterator[None]:
    """Run a block with ``--download``/``--yes`` in effect."""
    token = POLICY.set(RemotePolicy(download=download, yes=yes))
    try:
        yield
    finally:
        POLICY.reset(token)


def _get_small(url: str, display: str) -> bytes:
    """GET a small document (the Hub's file listing) with the Hub token, retried."""
    target = _Target(url, {}, display, ())
    token = hf_token()
    if token:
        target = _Target(url, {"Authorization": f"Bearer {token}"}, display, (token,))
    fs, _ = _filesystem(target)
    listing = _Span(0, None, MAX_LISTING_BYTES)

    def once() -> bytes:
        parts: list[bytes] = []
        _run_http(fs, target, "listing the repository", _deadline(),
                  lambda: _get(fs, target, target.headers, listing, parts.append))  # fmt: skip
        return b"".join(parts)

    data, attempts = _with_retries(once, target, "listing the repository")
    TRAFFIC.add(attempts, len(data))
    return data  # type: ignore[no-any-return]  # _with_retries is untyped
