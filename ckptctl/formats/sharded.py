"""Sharded Hugging Face checkpoints: a ``*.index.json`` plus its shard files.

Format notes: ``docs/formats/safetensors.md#sharded-checkpoints``.

The index is a JSON object (written by ``transformers``' ``save_pretrained`` and
``huggingface_hub.save_torch_state_dict``)::

    {"metadata": {"total_size": 28966928384},
     "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}}

``weight_map`` maps each tensor name to the shard file holding it, relative to the index's
directory. Shards are safetensors files or, in the older ``pytorch_model.bin.index.json``
layout, flat PyTorch state_dicts; each is recognised by content. Opening an index opens every
shard and returns one checkpoint over all of them (``format`` is the first shard's;
``sharding`` names the index and the shards). Entries come
in shard order (the order shards first appear in ``weight_map``), and within a shard in
data-offset order, so reading them in order reads each file front to back.

Hard failures raise ``CorruptCheckpointError`` from :func:`open_index`: a shard path that is
absolute or leaves the index's directory, a missing shard, a tensor the index places in a shard
that lacks it, a tensor present in two shards. Softer problems (a shard tensor the index does not
list, a ``total_size`` that is not the sum of the tensor sizes) become ``Checkpoint.notes``;
:func:`check_index` reports both kinds as sentences for ``verify``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from ckptctl._io import atomic_write, refuse_sources
from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    InputError,
    SelectionError,
    UnsupportedError,
)
from ckptctl.fix import Command, Note
from ckptctl.formats import safetensors as st
from ckptctl.formats._base import SNIFF_BYTES, FormatSpec
from ckptctl.formats._lfs import pointer_error, read_pointer
from ckptctl.model import (
    Checkpoint,
    CheckpointKind,
    HeaderLayout,
    JSONValue,
    Region,
    RegionKind,
    Sharding,
)
from ckptctl.safety import PickleSafety, carried_safety
from ckptctl.sources import ByteSource, open_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from ckptctl.model import TensorEntry

__all__ = [
    "MAX_INDEX_BYTES",
    "SPEC",
    "IndexProblems",
    "check_index",
    "find_index_problems",
    "open_index",
    "sniff",
]

#: Largest index file read. Real ones are well under 1 MiB even for 1000-shard models.
MAX_INDEX_BYTES = 64 * 1024 * 1024

#: Fewest bytes a tensor takes in a shard: a safetensors header entry is over 40, a PyTorch
#: shard's pickle spends over 16 on each. An index placing more tensors in a shard than its size
#: allows is refused as soon as it does (two million names for one 80-byte shard took 18 s and
#: 783 MiB to list, issue 44).
MIN_TENSOR_BYTES = 16
#: Tensors any shard may be given whatever its size, so that a damaged small shard is reported
#: for what is wrong with it.
FEW_TENSORS = 1024

_WHITESPACE = b" \t\r\n"
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True)
class _Index:
    directory: str
    weight_map: dict[str, str]  # tensor name -> normalised shard name
    shards: tuple[str, ...]  # in order of first appearance
    total_size: JSONValue  # as declared (may be missing or of the wrong type)


def sniff(head: bytes, source: ByteSource) -> bool:
    """Is this a JSON object with a ``weight_map`` key? Never raises; reads at most 64 MiB, and
    parses it only up to that key."""
    try:
        if head.lstrip(_WHITESPACE)[:1] != b"{":
            return False
        if source.size > MAX_INDEX_BYTES:  # claim it only to say it is too large
            return b'"weight_map"' in head
        data = head if source.size <= SNIFF_BYTES else source.read(0, source.size)
        return _has_weight_map(data.decode("utf-8-sig"))
    except Exception:  # sniffing must never raise
        return False


def _has_weight_map(text: str) -> bool:
    """Is ``weight_map`` a key of the JSON object ``text``? Read up to that key, leniently
    (``open_index`` judges the rest)."""
    cursor = _Cursor(text, json.JSONDecoder())
    for key in cursor.members():
        if key == "weight_map":
            return True
        cursor.value()
    return False


class _Cursor:
    """A walk through a JSON text, one token at a time: the index's ``weight_map`` is read
    entry by entry (each checked as it comes, no list of pairs beside the mapping), the other
    values with ``decoder``."""

    def __init__(self, text: str, decoder: json.JSONDecoder) -> None:
        self.text = text
        self.pos = 0
        self.decoder = decoder

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end)."""
        match = _JSON_SPACE.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos
        return self.text[self.pos : self.pos + 1]

    def token(self, expected: str) -> str:
        """Consume the next character, one of ``expected``."""
        char = self.peek()
        if not char or char not in expected:
            raise json.JSONDecodeError(f"Expecting one of {expected!r}", self.text, self.pos)
        self.pos += 1
        return char

    def value(self) -> JSONValue:
        self.peek()
        value, self.pos = self.decoder.raw_decode(self.text, self.pos)
        return value

    def members(self) -> Iterator[str]:
        """The keys of the object at the cursor; the caller consumes each one's value."""
        self.token("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise json.JSONDecodeError("Expecting property name", self.text, self.pos)
            self.token(":")
            yield key
            if self.token(",}") == "}":
                return

    def end(self) -> None:
        if self.peek():
            raise json.JSONDecodeError("Extra data", self.text, self.pos)


def _shard_name(name: JSONValue, tensor: str) -> str:
    """Validate a weight_map value and return it normalised (``./a`` -> ``a``)."""
    if not isinstance(name, str) or not name:
        raise CorruptCheckpointError(
            f"the index gives tensor {tensor!r} the shard {name!r}, not a file name"
        )
    problem = st.check_tensor_name(name)
    if problem:
        raise CorruptCheckpointError(f"shard file name {name!r} {problem}")
    if os.path.isabs(name) or name.startswith(("/", "\\")) or name[1:2] == ":":
        raise CorruptCheckpointError(
            f"the index gives tensor {tensor!r} the absolute shard path {name!r}",
            hint="shard paths must be relative to the index's directory",
        )
    norm = os.path.normpath(name)
    if norm in (".", "..") or norm.startswith(".." + os.sep):
        raise CorruptCheckpointError(
            f"the index gives tensor {tensor!r} the shard path {name!r}, which leaves the "
            "index's directory",
            hint="shard paths must be relative to the index's directory",
        )
    return norm


def _read_index(source: ByteSource) -> _Index:
    if source.size > MAX_INDEX_BYTES:
        raise CorruptCheckpointError(
            f"the index has {source.size} bytes, more than the limit of {MAX_INDEX_BYTES}"
        )
    try:
        text = source.read(0, source.size).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"the index is not valid UTF-8 (byte {exc.start})") from None
    directory = _remote_dir(source) or os.path.dirname(os.path.abspath(source.path))
    cursor = _Cursor(text, st.STRICT_JSON)
    weight_map: dict[str, str] | None = None
    metadata: JSONValue = {}
    with st.strict_json_errors("index"):
        if cursor.peek() != "{":
            st.loads_strict(text, "index")  # not an object: only its JSON errors are news
            raise _no_weight_map()
        keys: set[str] = set()
        for key in cursor.members():
            if key in keys:
                raise CorruptCheckpointError(f"the JSON index has the key {key!r} twice")
            keys.add(key)
            if key == "weight_map" and cursor.peek() == "{":
                weight_map = _read_weight_map(cursor, _Capacity(directory, source.is_remote))
                continue
            value = cursor.value()  # a weight_map that is no object leaves weight_map None
            if key == "metadata":
                metadata = value
        cursor.end()
    if weight_map is None:
        raise _no_weight_map()
    if not isinstance(metadata, dict):
        raise CorruptCheckpointError("the index's metadata is not a JSON object")
    shards = tuple(dict.fromkeys(weight_map.values()))
    return _Index(directory, weight_map, shards, metadata.get("total_size"))


def _no_weight_map() -> CorruptCheckpointError:
    return CorruptCheckpointError(
        "the index has no weight_map object",
        hint='a sharded-checkpoint index looks like {"weight_map": {"name": "file"}}',
    )


def _read_weight_map(cursor: _Cursor, capacity: _Capacity) -> dict[str, str]:
    """The ``weight_map`` object at the cursor, each tensor name and shard checked as it comes.

    Raises:
        CorruptCheckpointError: a bad name or shard path, a name listed twice, more names in a
            shard than it can hold.
    """
    weight_map: dict[str, str] = {}
    norms: dict[str, str] = {}  # shard as written -> normalised (one string per shard)
    counts: dict[str, int] = {}
    for tensor in cursor.members():
        if tensor in weight_map:
            raise CorruptCheckpointError(f"the JSON index has the key {tensor!r} twice")
        problem = st.check_tensor_name(tensor)
        if problem:
            raise CorruptCheckpointError(f"tensor name {tensor!r} in the index {problem}")
        shard = cursor.value()
        norm = norms.get(shard) if isinstance(shard, str) else None
        if norm is None:
            norm = _shard_name(shard, tensor)
            norms[str(shard)] = norm
        weight_map[tensor] = norm
        counts[norm] = counts.get(norm, 0) + 1
        if counts[norm] > capacity.limit(norm):
            raise capacity.error(norm)
    return weight_map


class _Capacity:
    """How many tensors the index may place in each shard: ``FEW_TENSORS`` plus its size over
    ``MIN_TENSOR_BYTES`` (a local file), at most ``MAX_TENSORS``."""

    def __init__(self, directory: str, remote: bool) -> None:
        self.directory = directory
        self.remote = remote
        self.sizes: dict[str, int | None] = {}

    def size(self, shard: str) -> int | None:
        if shard not in self.sizes:
            path = os.path.join(self.directory, shard)
            self.sizes[shard] = None
            if not self.remote and os.path.isfile(path):
                with contextlib.suppress(OSError):
                    self.sizes[shard] = os.path.getsize(path)
        return self.sizes[shard]

    def limit(self, shard: str) -> int:
        size = self.size(shard)
        if size is None:
            return st.MAX_TENSORS
        return min(st.MAX_TENSORS, FEW_TENSORS + size // MIN_TENSOR_BYTES)

    def error(self, shard: str) -> CorruptCheckpointError:
        size, limit = self.size(shard), self.limit(shard)
        why = (
            f"more than the {limit} a checkpoint may hold"
            if size is None or limit == st.MAX_TENSORS
            else f"but its {size} bytes hold at most {size // MIN_TENSOR_BYTES} (a tensor takes "
            f"at least {MIN_TENSOR_BYTES} bytes of a shard)"
        )
        return CorruptCheckpointError(
            f"the index places more than {limit} tensors in shard {shard!r}, {why}",
            hint="the index does not describe these shards; regenerate it",
        )


def _remote_dir(source: ByteSource) -> str | None:
    """The URL prefix of a remote index's folder (shards are fetched next to it), else None."""
    if not source.is_remote:
        return None
    return source.sibling("")  # type: ignore[attr-defined, no-any-return]  # RemoteSource


def _shard_path(index: _Index, shard: str) -> str:
    if "://" in index.directory:  # a URL: joined so that no decoding leaves the folder
        from ckptctl.sources.remote import join_url

        return join_url(index.directory, shard)
    return os.path.join(index.directory, shard)


def _shard_opener(shard: str, source: ByteSource) -> Callable[[ByteSource], Checkpoint]:
    """safetensors shards (``model-00001-of-00002.safetensors``) or flat PyTorch state_dict
    shards (``pytorch_model-00001-of-00002.bin``), told apart by content."""
    head = source.read(0, min(source.size, SNIFF_BYTES))
    if st.sniff(head, source):
        return st.open_safetensors
    from ckptctl.formats.pytorch import SPEC as pytorch  # lazily: safetensors shards need none

    if pytorch.sniff(head, source):
        return pytorch.open
    pointer = read_pointer(head)
    if pointer is not None:  # the index is in git, its shards were never fetched (issue 44)
        raise pointer_error(pointer, f"shard {shard!r} is ")
    raise UnsupportedError(
        f"shard {shard!r} is neither safetensors nor a PyTorch checkpoint",
    )


def _open_shard(index: _Index, shard: str) -> tuple[ByteSource, Checkpoint]:
    path = _shard_path(index, shard)
    try:
        source = open_source(path)
    except InputError as exc:
        raise CorruptCheckpointError(
            f"shard {shard!r} listed in the index cannot be opened: {exc.message}",
            hint="download every shard next to the index",
        ) from None
    try:
        ckpt = _read_flat_shard(shard, source)
    except CkptError as exc:
        source.close()
        carried = carried_safety(exc)
        if carried is not None:  # name the shard in the verdict's stream names
            exc.safety = PickleSafety().merge(carried, prefix=f"{shard}: ")
        raise exc.with_path(source.path) from None
    except BaseException:
        source.close()
        raise
    return source, ckpt


def _read_flat_shard(shard: str, source: ByteSource) -> Checkpoint:
    ckpt = _shard_opener(shard, source)(source)
    if ckpt.kind not in (None, CheckpointKind.STATE_DICT):
        ckpt.close()
        raise UnsupportedError(
            f"shard {shard!r} is not a flat state_dict (it is {ckpt.kind})",
            hint="a sharded index maps tensor names to flat shards",
        )
    return ckpt


def _open_all(index: _Index) -> tuple[list[ByteSource], dict[str, Checkpoint]]:
    sources: list[ByteSource] = []
    opened: dict[str, Checkpoint] = {}
    try:
        if "://" in index.directory and len(index.shards) > 1:  # remote: headers in parallel
            _open_parallel(index, sources, opened)
        for shard in index.shards:
            if shard not in opened:
                source, opened[shard] = _open_shard(index, shard)
                sources.append(source)
    except BaseException:
        for source in sources:
            source.close()
        raise
    return sources, opened


#: Shard headers fetched at once from a remote index.
MAX_PARALLEL_SHARDS = 8


def _open_parallel(index: _Index, sources: list[ByteSource], opened: dict[str, Checkpoint]) -> None:
    """Open every shard in threads, in index order; the first error is raised after all end."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(MAX_PARALLEL_SHARDS, len(index.shards))) as pool:
        futures = [(s, pool.submit(_open_shard, index, s)) for s in index.shards]
    error: BaseException | None = None
    for shard, future in futures:
        try:
            source, opened[shard] = future.result()
            sources.append(source)
        except BaseException as exc:  # noqa: PERF203  # one per shard, not per byte
            error = error or exc
    if error is not None:
        raise error


def _try_open(index: _Index, shard: str) -> Checkpoint | str:
    """The opened shard, or the reason it cannot be opened."""
    try:
        return _open_shard(index, shard)[1]
    except CkptError as exc:
        prefix = f"shard {shard!r}"
        return exc.message if exc.message.startswith(prefix) else f"{prefix}: {exc.message}"


#: Problems described one by one; any beyond them are only counted.
MAX_PROBLEMS = 100


class IndexProblems:
    """The first ``MAX_PROBLEMS`` problems found, and how many more there are; ``len()`` counts
    them all."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.more = 0

    def add(self, problem: str) -> None:
        if len(self.shown) < MAX_PROBLEMS:
            self.shown.append(problem)
        else:
            self.more += 1

    def __len__(self) -> int:
        return len(self.shown) + self.more

    def sentences(self) -> list[str]:
        """The problems shown, then how many more there are (when there are)."""
        more = [f"and {self.more:,} more problems of these kinds"] if self.more else []
        return [*self.shown, *more]


def _raise_hard(hard: IndexProblems) -> None:
    if hard:
        more = f" ({len(hard) - 1} more problems)" if len(hard) > 1 else ""
        raise CorruptCheckpointError(
            hard.shown[0] + more, hint="re-download the checkpoint or regenerate its index"
        )


def _compare(index: _Index, shards: dict[str, Checkpoint]) -> tuple[IndexProblems, IndexProblems]:
    """Cross-check the index against the opened shards: (hard problems, soft problems).

    ``total_size`` is checked only when every shard is open (a missing one would make it wrong).
    """
    hard, soft = IndexProblems(), IndexProblems()
    found: dict[str, str] = {}  # tensor -> first shard holding it
    for shard, ckpt in shards.items():
        for name in ckpt:
            if name in found:
                hard.add(f"tensor {name!r} is in both shard {found[name]!r} and {shard!r}")
            else:
                found[name] = shard
    for name, shard in index.weight_map.items():
        if shard in shards and name not in shards[shard]:
            elsewhere = f" (it is in {found[name]!r})" if name in found else ""
            hard.add(
                f"the index places tensor {name!r} in shard {shard!r}, which has no such "
                f"tensor{elsewhere}"
            )
    for name, shard in found.items():
        if name not in index.weight_map:
            soft.add(f"tensor {name!r} in shard {shard!r} is not listed in the index")
    total = sum(entry.nbytes for ckpt in shards.values() for entry in ckpt.values())
    declared = index.total_size
    if declared is not None and len(shards) == len(index.shards):
        if isinstance(declared, bool) or not isinstance(declared, int):
            soft.add(f"the index's metadata.total_size is {declared!r}, not a byte count")
        elif declared != total:
            soft.add(
                f"the index's metadata.total_size is {declared} but the tensors hold {total} bytes"
            )
    return hard, soft


def open_index(source: ByteSource) -> Checkpoint:
    """Open a sharded checkpoint from its index: one lazy checkpoint over every shard.

    The returned checkpoint owns ``source`` and every shard file; closing it closes them all.

    Raises:
        CorruptCheckpointError: a bad index, a missing or corrupt shard, or an index that
            disagrees with its shards about where a tensor is.
        UnsupportedError: a shard is not a safetensors file, or uses an unsupported dtype.
    """
    index = _read_index(source)
    sources, opened = _open_all(index)
    try:
        hard, soft = _compare(index, opened)
        _raise_hard(hard)
        entries: list[TensorEntry] = [e for ckpt in opened.values() for e in ckpt.values()]
        metadata: dict[str, str] = {}
        for ckpt in opened.values():
            for key, value in ckpt.metadata.items():
                metadata.setdefault(key, value)
        first = next(iter(opened.values()), None)
        safety = None
        for shard, ckpt in opened.items():
            if ckpt.safety is not None:
                safety = (safety or PickleSafety()).merge(ckpt.safety, prefix=f"{shard}: ")
        return Checkpoint(
            entries,
            path=source.path,
            format="safetensors" if first is None else first.format,
            metadata=metadata,
            notes=[
                f"sharded across {len(index.shards)} files listed in this index",
                *soft.sentences(),
            ],
            sharding=Sharding(source.path, tuple(index.shards), index.total_size),
            sources=[source, *sources],
            safety=safety,
        )
    except BaseException:
        for shard_source in sources:
            shard_source.close()
        raise


def check_index(path: str | os.PathLike[str]) -> list[str]:
    """Every problem with a sharded checkpoint, as sentences; an empty list when consistent.
    Past ``MAX_PROBLEMS`` of them, the last sentence says how many more there are.

    :func:`find_index_problems` gives the same problems with their count.
    """
    return find_index_problems(path).sentences()


def find_index_problems(path: str | os.PathLike[str]) -> IndexProblems:
    """Every problem with a sharded checkpoint (none when consistent), the first
    ``MAX_PROBLEMS`` as sentences and the rest counted.

    Reports missing, unreadable or corrupt shards, tensors the index misplaces, tensors in two
    shards, shard tensors the index does not list, and a wrong ``metadata.total_size``.

    Args:
        path: the ``*.index.json`` file.

    Raises:
        InputError: the index itself cannot be read or is not a valid index.
    """
    with ByteSource(path) as source:
        try:
            index = _read_index(source)
        except CkptError as exc:
            raise exc.with_path(source.path) from None
    problems = IndexProblems()
    opened: dict[str, Checkpoint] = {}
    for shard in index.shards:
        result = _try_open(index, shard)
        if isinstance(result, str):
            problems.add(result)
        else:
            opened[shard] = result
    try:
        hard, soft = _compare(index, opened)
    finally:
        for ckpt in opened.values():
            ckpt.close()
    for found in (hard, soft):
        for problem in found.shown:
            problems.add(problem)
        problems.more += found.more
    return problems


def layout_index(source: ByteSource) -> HeaderLayout:
    """The index is one JSON document: its header view is the document, one metadata region.

    ``facts`` list the shards with their tensor counts and bytes on disk (``None`` when missing).
    """
    index = _read_index(source)
    counts: dict[str, int] = {}
    for shard in index.weight_map.values():
        counts[shard] = counts.get(shard, 0) + 1
    shards = []
    for shard in index.shards:
        path = _shard_path(index, shard)
        size = os.path.getsize(path) if os.path.isfile(path) else None
        shards.append({"shard": shard, "tensors": counts[shard], "bytes": size})
    header = {
        "metadata": {"total_size": index.total_size},
        "shards": shards,
        "tensors": len(index.weight_map),
    }
    region = Region(RegionKind.METADATA, 0, source.size, note="sharded-checkpoint index (JSON)")
    return HeaderLayout(
        "safetensors-index",
        source.size,
        header,
        (region,) if source.size else (),
        {
            "shards": len(shards),
            "hint": Note("run {fix0} on a shard for its byte layout", (Command("header"),)),
        },
    )


SPEC = FormatSpec(
    name="safetensors-index",
    extensions=(),
    sniff=sniff,
    open=open_index,
    layout=layout_index,
    write=None,
)

#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)


# --- writing -----------------------------------------------------------------------------------


def plan_shards(entries: Sequence[TensorEntry], max_bytes: int) -> list[list[TensorEntry]]:
    """Split entries, in order, into shards of at most ``max_bytes`` (bigger tensors go alone)."""
    shards: list[list[TensorEntry]] = []
    size = 0
    for entry in entries:
        if not shards or (size + entry.nbytes > max_bytes and shards[-1]):
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += entry.nbytes
    return shards or [[]]


def shard_paths(path: str, count: int) -> tuple[list[str], str]:
    """Hugging Face names: ``model.safetensors`` → ``model-00001-of-00002.safetensors`` ...
    and the index ``model.safetensors.index.json``."""
    base, ext = os.path.splitext(path)
    names = [f"{base}-{i:05d}-of-{count:05d}{ext}" for i in range(1, count + 1)]
    return names, path + ".index.json"


def write_index(
    out: IO[bytes], shards: Sequence[Sequence[TensorEntry]], names: Sequence[str]
) -> None:
    """Write the index JSON (sorted keys and 2-space indent, as transformers writes it)."""
    weight_map = {
        e.name: os.path.basename(n) for shard, n in zip(shards, names, strict=True) for e in shard
    }
    total = sum(e.nbytes for shard in shards for e in shard)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    out.write((json.dumps(index, indent=2, sort_keys=True) + "\n").encode())


def write_sharded(
    path: str | os.PathLike[str],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str] | None = None,
    *,
    max_shard_bytes: int,
    force: bool = False,
    sources: Sequence[str | os.PathLike[str]] = (),
    fsync: bool = True,
    jobs: int = 1,
    part: tuple[int, int] | None = None,
    index_only: bool = False,
) -> list[str]:
    """Write ``entries`` as Hugging Face sharded safetensors next to ``path``, all or nothing.

    Every shard and the index are written to temporary files first and renamed into place only
    when all of them were written, so a failure leaves no new file behind. With ``jobs`` > 1 up
    to that many shards are written (and flushed to disk) at once, in threads: the copies are
    system calls and the adapters numpy loops, both of which release the GIL. Each shard's bytes
    do not depend on the others, so the files are identical to ``jobs=1``'s; when several shards
    fail, the first one in shard order is reported.

    The shard plan depends on the entries and ``max_shard_bytes`` alone, so several runs (on
    several machines sharing the file system) can each write a share of it: ``part=(K, N)``
    writes shards K, K+N, K+2N ... (1-based) and no index, and a final ``index_only`` run writes
    the index and reads no tensor. Together they are the files of one whole run, byte for byte.

    Returns:
        The paths written, shards first, the index last (when written).

    Raises:
        SelectionError: ``path`` does not end in ``.safetensors``.
        OutputError: a destination exists (without ``force``), is a source, or cannot be written.
    """
    dest = os.fspath(path)
    if not dest.lower().endswith(".safetensors"):
        raise SelectionError(
            "sharded output must be .safetensors", path=dest, hint="name DST model.safetensors"
        )
    spec = st.SPEC
    assert spec.write is not None
    shards = plan_shards(entries, max_shard_bytes)
    names, index_path = shard_paths(dest, len(shards))
    refuse_sources([*names, index_path], sources)
    if index_only:
        with atomic_write(index_path, force=force, fsync=fsync) as out:
            write_index(out, shards, names)
        return [index_path]
    if part is not None:
        mine = [i for i in range(len(shards)) if i % part[1] == part[0] - 1]
        shards, names = [shards[i] for i in mine], [names[i] for i in mine]
        if not shards:
            return []
    targets = [*names, index_path] if part is None else list(names)
    # Contexts close last-in first-out: entered first, the index is renamed into place last.
    write = spec.write

    def write_shard(out: IO[bytes], shard: Sequence[TensorEntry], name: str) -> None:
        try:
            write(out, shard, dict(metadata or {}), {})
            if fsync and jobs > 1:  # in this thread, so the shards reach the disk in parallel
                out.flush()
                os.fsync(out.fileno())
        except CkptError as exc:
            raise exc.with_path(name) from None

    with contextlib.ExitStack() as stack:
        if part is None:
            out = stack.enter_context(atomic_write(index_path, force=force, fsync=fsync))
            write_index(out, shards, names)
        if jobs <= 1 or len(shards) == 1:
            for shard, name in zip(shards, names, strict=True):
                write_shard(stack.enter_context(atomic_write(name, force=force, fsync=fsync)),
                            shard, name)  # fmt: skip
            return targets
        outs = [stack.enter_context(atomic_write(n, force=force, fsync=fsync)) for n in names]
        _run_parallel(write_shard, list(zip(outs, shards, names, strict=True)), jobs)
    return targets


def _run_parallel(
    work: Callable[[IO[bytes], Sequence[TensorEntry], str], None],
    tasks: list[tuple[IO[bytes], Sequence[TensorEntry], str]],
    jobs: int,
) -> None:
    """Run ``work(*task)`` for every task on ``jobs`` threads; re-raise the first failure in
    task order once all have ended (so the temporary files are not yanked from under a writer)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, len(tasks))) as pool:
        futures = [pool.submit(work, *task) for task in tasks]
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
