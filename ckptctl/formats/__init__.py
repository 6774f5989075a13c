"""Format registry: detection by content, opening, and saving by extension.

Format notes: ``docs/formats/index.md``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl._io import atomic_write, refuse_sources
from ckptctl.errors import (
    CkptError,
    InputError,
    LfsPointerError,
    SelectionError,
    UnknownFormatError,
    UnsupportedError,
)
from ckptctl.fix import Note, Option, closest
from ckptctl.formats._base import SNIFF_BYTES, FormatSpec
from ckptctl.formats._lfs import pointer_error, read_pointer
from ckptctl.model import HeaderLayout, Region
from ckptctl.sources import PERMISSION_HINT, ByteSource, open_source

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ckptctl.model import Checkpoint, JSONValue, TensorEntry

__all__ = [
    "FormatSpec",
    "HeaderLayout",
    "Region",
    "detect_format",
    "format_for_output",
    "get_format",
    "open_checkpoint",
    "read_layout",
    "register_format",
    "save_checkpoint",
]

_REGISTRY: dict[str, FormatSpec] = {}
_LOADED = False


def register_format(spec: FormatSpec) -> None:
    """Add a format; detection tries formats in registration order, weak sniffers last."""
    _REGISTRY[spec.name] = spec


def _ensure_loaded() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    # Imported here so that `ckptctl --help` does not pay for numpy and cbor2. Each module lists
    # its formats in ``SPECS`` and never imports this package (no import circle).
    from ckptctl.formats import (
        burnpack,
        burnrecord,
        dcp,
        deepspeed,
        gguf,
        numpy,
        onnx,
        pytorch,
        safetensors,
        sharded,
    )

    # onnx last: its content sniff parses protobuf fields, which no other format's file has
    formats = (
        burnpack, burnrecord, dcp, deepspeed, gguf, numpy, pytorch, safetensors, sharded, onnx
    )  # fmt: skip
    for module in formats:
        for spec in module.SPECS:
            register_format(spec)


def get_format(name: str) -> FormatSpec:
    """The registered format called ``name``.

    Raises:
        SelectionError: no such format.
    """
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SelectionError(f"unknown format {name!r}") from None


def _sniff(source: ByteSource) -> FormatSpec:
    head = source.read(0, min(source.size, SNIFF_BYTES))
    # Stable sort: the order never depends on which format module was imported first.
    for spec in sorted(_REGISTRY.values(), key=lambda spec: spec.weak_sniff):
        if spec.sniff(head, source):
            return spec
    pointer = read_pointer(head)
    if pointer is not None:  # a clone without `git lfs pull` (issue 44)
        raise pointer_error(pointer).with_path(source.path)
    raise UnknownFormatError(_diagnose(head, source.size), path=source.path, hint=_hint(head))


#: File names a directory's checkpoint may have (a model directory as Hugging Face tools see it).
CHECKPOINT_SUFFIXES = (
    ".safetensors", ".bpk", ".pt", ".pth", ".bin", ".ckpt", ".mpk", ".mpk.gz", ".pkl",
)  # fmt: skip

#: File names that say "checkpoint" (issue 44): a file named so is weights or damaged weights,
#: never a config, tokenizer or README, so ``verify DIR`` checks every one it finds. Beyond
#: :data:`CHECKPOINT_SUFFIXES`, the names of exports a model directory keeps beside its weights
#: (GGUF, ONNX, NumPy), which :func:`resolve_path` leaves to be named, DCP rank files and
#: sharded-checkpoint indexes.
CHECKPOINT_NAMES = (
    *CHECKPOINT_SUFFIXES, ".gguf", ".onnx", ".npy", ".npz", ".distcp", ".index.json",
)  # fmt: skip


def is_checkpoint_name(path: str | os.PathLike[str]) -> bool:
    """Whether ``path``'s file name says checkpoint (:data:`CHECKPOINT_NAMES`, any case)."""
    return os.path.basename(os.fspath(path)).lower().endswith(CHECKPOINT_NAMES)


#: The metadata file that makes a directory a torch.distributed.checkpoint (``formats/dcp.py``).
DCP_METADATA = ".metadata"


def resolve_path(path: str | os.PathLike[str]) -> str:
    """``path``, or for a directory the checkpoint in it: a DCP directory's ``.metadata``, a
    DeepSpeed save's ``latest`` (a tag folder stays itself: see :func:`_open_resolved`), else
    its ``*.index.json``, else its one checkpoint file.

    Raises:
        InputError: the directory holds no checkpoint, or several (named, to choose from).
    """
    name = os.fspath(path)
    if "://" in name:  # a URL: a bare hf://ORG/REPO stands for its index or one checkpoint
        from ckptctl.sources.remote import is_url, resolve_url

        if is_url(name):
            return resolve_url(name, CHECKPOINT_SUFFIXES)
    if not os.path.isdir(name):
        return name
    from ckptctl.formats.deepspeed import find_checkpoint  # a DeepSpeed save, by its files

    deepspeed = find_checkpoint(name)
    if deepspeed is not None:
        return deepspeed
    try:
        listing = os.listdir(name)
    except PermissionError:
        raise InputError(
            "permission denied: the directory cannot be listed", path=name, hint=PERMISSION_HINT
        ) from None
    files = sorted(f for f in listing if os.path.isfile(os.path.join(name, f)))
    if DCP_METADATA in files:  # a torch.distributed.checkpoint directory: its metadata
        return os.path.join(name, DCP_METADATA)
    found = [f for f in files if f.endswith(".index.json")]
    if not found:
        found = [f for f in files if f.lower().endswith(CHECKPOINT_SUFFIXES)]
    if len(found) == 1:
        return os.path.join(name, found[0])
    if not found:
        raise InputError("is a directory with no checkpoint in it", path=name)
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    raise InputError(
        f"is a directory with {len(found)} checkpoints: {shown}",
        path=name,
        hint="name the file (shell globs work: several files are listed one after the other)",
    )


def _open_resolved(path: str | os.PathLike[str]) -> tuple[ByteSource, FormatSpec | None]:
    """The source to read for ``path`` and, when its format is not sniffed, that format: a
    DeepSpeed tag folder is read through its rank-0 model states file, which alone is a .pt."""
    resolved = resolve_path(path)
    if "://" not in resolved and os.path.isdir(resolved):
        from ckptctl.formats import deepspeed

        stand_in = deepspeed.stand_in(resolved)
        if stand_in is not None:
            return open_source(stand_in), deepspeed.SPEC
    return open_source(resolved), None


def detect_format(path: str | os.PathLike[str]) -> FormatSpec:
    """Detect a file's format from its content (never its extension).

    Raises:
        InputError: the file cannot be read.
        UnknownFormatError: no format recognises it; the message says what the file looks like.
    """
    _ensure_loaded()
    source, spec = _open_resolved(path)
    with source:
        try:
            return spec or _sniff(source)
        except UnknownFormatError as exc:
            raise _with_embedded(exc, source) from None


def open_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Open a checkpoint file lazily: parse its header, read no tensor bytes.

    Args:
        path: a ``.safetensors``, ``.bpk``, ``.pt``/``.pth``/``.bin`` file or a Hugging Face
            ``*.index.json``; the format is detected from the content.

    Returns:
        A :class:`~ckptctl.model.Checkpoint`; close it (or use ``with``) when done.

    Raises:
        InputError: unreadable, unknown, corrupt or unsafe input (exit 3).
        UnsupportedError: a valid file using something ckptctl cannot handle (exit 4).

    Example:
        >>> with open_checkpoint("model.safetensors") as ckpt:  # doctest: +SKIP
        ...     print(ckpt["fc.weight"].shape)
    """
    _ensure_loaded()
    source, spec = _open_resolved(path)
    try:
        spec = spec or _sniff(source)
        return spec.open(source)
    except UnknownFormatError as exc:
        try:
            raise _with_embedded(exc, source).with_path(source.path) from None
        finally:
            source.close()
    except CkptError as exc:
        source.close()
        raise exc.with_path(source.path) from None
    except BaseException:
        source.close()
        raise


def _with_embedded(exc: UnknownFormatError, source: ByteSource) -> UnknownFormatError:
    """``exc`` carrying the verdict of the pickles the file holds (an object-array ``.npy``, a
    zip with a pickle under another name), so ``verify`` judges them (issue 28). Not when the
    error is about another file than ``source`` (a DeepSpeed partition: the reader has closed
    ``source`` by then), nor for a git-lfs pointer (a few lines of text)."""
    about_source = exc.path is None or exc.path == source.path
    if exc.safety is None and about_source and not isinstance(exc, LfsPointerError):
        from ckptctl.formats.pytorch._embedded import embedded_pickles

        exc.safety = embedded_pickles(source)
    return exc


def read_layout(path: str | os.PathLike[str]) -> HeaderLayout:
    """Decode a file's raw header and account for every byte (what ``ckptctl header`` shows).

    Raises:
        InputError: unreadable, unknown or corrupt input.
        UnsupportedError: the format has no byte-level layout view.
    """
    _ensure_loaded()
    source, spec = _open_resolved(path)
    with source:
        spec = spec or _sniff(source)
        if spec.layout is None:
            raise UnsupportedError(f"no header view for {spec.name} files", path=source.path)
        try:
            return spec.layout(source)
        except CkptError as exc:
            raise exc.with_path(source.path) from None


#: Names ``--to`` accepts besides the registry's own (``pytorch``, ``safetensors``, ``burnpack``).
OUTPUT_ALIASES = {"pt": "pytorch", "pth": "pytorch", "bin": "pytorch", "torch": "pytorch",
                  "bpk": "burnpack", "burn": "burnpack", "st": "safetensors"}  # fmt: skip


def format_for_output(path: str | os.PathLike[str], to: str | None = None) -> FormatSpec:
    """The writable format named by ``to``, else selected by ``path``'s extension.

    Raises:
        SelectionError: ``to`` names no writable format, or (without ``to``) the extension does
            not tell.
    """
    _ensure_loaded()
    if to is not None:
        name = OUTPUT_ALIASES.get(to.strip().lower().lstrip("."), to.strip().lower())
        spec = _REGISTRY.get(name)
        if spec is None or spec.write is None:
            writable = sorted(s.name for s in _REGISTRY.values() if s.write)
            raise SelectionError(
                f"unknown output format {to!r}", hint="use one of " + ", ".join(writable)
            )
        return spec
    lower = os.fspath(path).lower()
    for spec in _REGISTRY.values():
        if spec.write is not None and lower.endswith(spec.extensions):
            return spec
    known = sorted(ext for s in _REGISTRY.values() if s.write for ext in s.extensions)
    stem, ext = os.path.splitext(os.fspath(path))
    guess = closest(ext, known) if ext else None
    raise SelectionError(
        f"cannot tell the output format from the extension of {os.fspath(path)!r}"
        + (f"; did you mean {stem + guess!r}?" if guess else ""),
        hint=Note(
            "use one of " + ", ".join(known) + ", or name it with {fix0}",
            (Option("to", takes_value=True),),
        ),
    )


def save_checkpoint(
    path: str | os.PathLike[str],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    *,
    scalars: Mapping[str, JSONValue] | None = None,
    force: bool = False,
    sources: Sequence[str | os.PathLike[str]] = (),
    fsync: bool = True,
    to: str | None = None,
) -> None:
    """Write ``entries`` to ``path`` atomically, in the format its extension selects.

    Plans the layout from metadata, then streams one tensor at a time. On any failure ``path`` is
    left as it was.

    Args:
        path: destination; ``.safetensors``, ``.bpk``, ``.pt``/``.pth``/``.bin``, ``.gguf``.
        entries: tensors in write order.
        metadata: string key/values to store where the format has room for them.
        scalars: typed values by key: burnpack's scalars; GGUF's key/values
            (``formats.gguf.StoredValue``, ``TypedValue`` or ``str``, in order, before the
            metadata strings).
        force: overwrite an existing destination.
        sources: input paths; writing over one of them is refused.
        fsync: flush the file to disk before renaming it into place.
        to: the output format by name (``safetensors``, ``burnpack``, ``pytorch``), when the
            extension does not tell.

    Raises:
        SelectionError: unknown output extension.
        OutputError: destination exists (without ``force``), is a source, or cannot be written.
    """
    spec = format_for_output(path, to)
    assert spec.write is not None
    refuse_sources([path], sources)
    try:
        with atomic_write(path, force=force, fsync=fsync) as out:
            spec.write(out, entries, dict(metadata or {}), dict(scalars or {}))
    except CkptError as exc:
        raise exc.with_path(path) from None


# --- diagnosis of files no format recognises -------------------------------------------------

#: What ckptctl reads, said after naming a file it does not.
READS = "ckptctl reads PyTorch, safetensors and Burn files"

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (
        b"version https://git-lfs.github.com/spec/",
        "this starts as a git-lfs pointer does, but git-lfs would not read it as one; it is not "
        "the weights either",
    ),
    (b"\x89HDF\r\n\x1a\n", f"this is an HDF5 file (Keras .h5); {READS}"),
    (
        b"TFL3",
        f"this is a TensorFlow Lite model; {READS}",
    ),
    (b"\x1f\x8b", "this is a gzip-compressed file"),
    (b"PYTORCH1", "this is a 2018 TorchScript preview container, which even torch refuses"),
    (b"\x28\xb5\x2f\xfd", "this is a zstd-compressed file"),
    (b"BZh", "this is a bzip2-compressed file"),
    (b"\xfd7zXZ\x00", "this is an xz-compressed file"),
)


def _diagnose(head: bytes, size: int) -> str:
    if size == 0:
        return "the file is empty"
    for magic, text in _SIGNATURES:
        if head.startswith(magic):
            return text
    protobuf = _protobuf_model(head)
    if protobuf is not None:
        return f"this is {protobuf}; {READS}"
    lowered = head[:512].lstrip().lower()
    if lowered.startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return "this is an HTML/XML page (a failed download?), not a checkpoint"
    if lowered.startswith((b"{", b"[")):
        return "this is a JSON file, but not a checkpoint or a sharded-checkpoint index"
    if size < 16:
        return f"the file has only {size} bytes, too short for any checkpoint format"
    return "not a checkpoint format ckptctl recognises (safetensors, burnpack, PyTorch)"


def _protobuf_model(head: bytes) -> str | None:
    """ONNX and TensorFlow models are protobufs: a varint field 1, then strings that say which."""
    if head[:1] != b"\x08":
        return None
    lowered = head.lower()
    if b"tensorflow" in lowered or b"serving_default" in lowered or b"saver_def" in lowered:
        return "a TensorFlow SavedModel (saved_model.pb)"
    if b"onnx" in lowered or b"pytorch" in lowered[:512]:
        return "an ONNX model"
    return None


def _hint(head: bytes) -> str | None:
    if head.startswith(b"version https://git-lfs.github.com/spec/"):
        return "download the file itself (a valid pointer would be fetched by `git lfs pull`)"
    if head.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"BZh", b"\xfd7zXZ\x00")):
        return "decompress it first"
    lowered = head[:512].lstrip().lower()
    if lowered.startswith((b"<!doctype", b"<html")):
        return "the download returned a web page; check the URL or your access token"
    return None
