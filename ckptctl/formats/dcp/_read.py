"""Opening a DCP directory and decoding its header (``ckptctl.formats.dcp`` says what it is;
this module is imported only when one is opened)."""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import TYPE_CHECKING

from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    InputError,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats.dcp._assemble import AssembledData, LazyChunk, absolute
from ckptctl.formats.dcp._files import RankFiles, open_files
from ckptctl.formats.dcp._metadata import (
    FILES_SHOWN,
    MAX_VALUES,
    Chunk,
    DcpMetadata,
    Item,
    TensorMeta,
    ValueMeta,
    all_items,
    beside,
    chunk_what,
    items_by_file,
    read_metadata,
)
from ckptctl.formats.dcp._transform import check_transforms, decode, no_decoder, zstd_module
from ckptctl.model import (
    OMITTED_KEY,
    Checkpoint,
    CheckpointKind,
    HeaderLayout,
    Region,
    RegionKind,
    Sharding,
    Structure,
    TensorEntry,
    describe_groups,
)
from ckptctl.safety import GlobalUse, PickleSafety, Problem, carried_safety
from ckptctl.sources import ByteSource, MemorySource, SliceSource

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ckptctl.model import JSONValue

__all__ = ["layout_dcp", "open_dcp"]


# --- opening ----------------------------------------------------------------------------------


class _Opened:
    """The rank files of one checkpoint, opened once each, and the verdicts of its items."""

    def __init__(self, source: ByteSource, meta: DcpMetadata) -> None:
        from ckptctl.formats.pytorch._producers import DCP

        self.metadata = source
        #: whose loader reads the directory (Megatron-core's, once its metadata.json is found)
        self.producer = DCP
        self.files = RankFiles({}, {})
        self.globals: dict[tuple[str, str, bool], GlobalUse] = {}
        self.problems: dict[tuple[str, str], Problem] = {}
        transforms: set[str] = set()
        for what, item in all_items(meta):  # before anything is read: exit 4, not a late failure
            if item.transforms:
                check_transforms(item.transforms, what, beside(source, item.file))
                transforms.update(item.transforms)
        #: the stream transforms any item is stored with (``stream.zstd/1``)
        self.transforms = sorted(transforms)
        #: what could not be read for want of a decoder (values left out of the objects)
        self.undecoded: UnsupportedError | None = None
        # every rank file now, so the checkpoint owns (and closes) them all
        self.files = open_files(source, meta)
        self.sources = self.files.sources

    def path(self, item: Item) -> str:
        """The rank file of ``item`` (for messages)."""
        return self.sources[item.file].path

    def slice(self, item: Item, limit: int, what: str) -> ByteSource:
        """The bytes of ``item``: a range of its rank file, or, for an item stored with a
        stream transform, its decoded bytes (at most ``limit``) in memory."""
        name = f"{item.file}@{item.offset}"
        raw = SliceSource(self.sources[item.file], item.offset, item.length, name)
        if not item.transforms:
            return raw
        decoded = decode(raw.read(0, raw.size), item.transforms, limit, what, self.path(item))
        return MemorySource(decoded, name)

    def release(self, item: Item) -> None:
        """Unmap the pages of ``item``'s rank file that a parse touched. Items are parsed
        through the file's map, where the kernel maps whole page-cache folios (up to 2 MiB) and
        their neighbours for a few header bytes; tensor bytes are copied with reads. Released
        after every parse, the resident set stays at one parse's pages, not one per item
        (4 GiB in 128 items: 183 -> 30 MiB peak RSS)."""
        file = self.sources[item.file]
        file.release_pages(0, file.size)

    def judged(self, safety: PickleSafety | None, what: str) -> None:
        """Keep an item's verdict; a use or problem repeated by later items is kept once."""
        if safety is None:
            return
        from dataclasses import replace

        for use in safety.globals:
            self.globals.setdefault(
                (use.name, use.verdict.value, use.reached),
                replace(use, where=f"{what}: {use.where}"),
            )
        for problem in safety.problems:
            self.problems.setdefault(
                (problem.message, problem.verdict.value),
                replace(problem, where=f"{what}: {problem.where}"),
            )

    def safety(self, meta: DcpMetadata) -> PickleSafety:
        """The verdict over ``.metadata`` and every item (and ``common.pt``) judged so far, for
        the loader that reads them (``PickleSafety.written_by``)."""
        items = PickleSafety(tuple(self.globals.values()), tuple(self.problems.values()))
        return meta.safety.merge(items).written_by(self.producer)

    def close(self) -> None:
        self.files.close()


def _read_item(opened: _Opened, item: Item, what: str, limit: int) -> Checkpoint:
    """Open one item as the torch.save archive it is (at most ``limit`` bytes decoded)."""
    from ckptctl.formats.pytorch import open_pytorch

    try:
        source = opened.slice(item, limit, what)
        ckpt = open_pytorch(source)
    except CkptError as exc:
        opened.judged(carried_safety(exc), f"{item.file} ({what})")
        where = f"bytes {item.offset}..{item.offset + item.length} of {item.file}"
        exc.message = f"{what} ({where}): {exc.message}"
        exc.path = opened.path(item)
        raise
    finally:
        opened.release(item)
    opened.judged(ckpt.safety, f"{item.file} ({what})")
    return ckpt


def _chunk_entry(opened: _Opened, tensor: TensorMeta, chunk: Chunk) -> TensorEntry:
    blob = opened.files.blobs.get(chunk.item.file)
    if blob is not None:  # the safetensors variant: checked against .metadata on opening
        return blob.tensors[tensor.name]
    what = chunk_what(tensor, chunk)
    limit = math.prod(chunk.sizes) * tensor.dtype.itemsize + MAX_ITEM_OVERHEAD
    ckpt = _read_item(opened, chunk.item, what, limit)
    entries = ckpt.entries()
    if ckpt.kind is not CheckpointKind.TENSOR or len(entries) != 1:
        raise CorruptCheckpointError(
            f"{what}: the item holds {ckpt.kind}, not one tensor",
            path=opened.path(chunk.item),
        )
    entry = entries[0]
    if entry.dtype is not tensor.dtype or entry.shape != chunk.sizes:
        raise CorruptCheckpointError(
            f"{what}: the item holds a {entry.dtype} tensor of shape {list(entry.shape)}, "
            f".metadata says {tensor.dtype} {list(chunk.sizes)}",
            path=opened.path(chunk.item),
        )
    where = entry.data.file_range()
    if where is not None and isinstance(where[0], SliceSource):
        return absolute(entry, where[0])
    return entry


#: What a chunk's ``torch.save`` archive may hold beyond its bytes (records, pickle, padding).
MAX_ITEM_OVERHEAD = 1 << 20
#: What the objects table shows for a value compressed with zstd when no decoder is installed.
NOT_DECODED = "<not read: compressed with zstd, and no zstd decoder is installed>"
#: Least a non-tensor value's item may decode to (32 x its stored length when that is more, as
#: the pickle budget of compressed archives).
MAX_VALUE_BYTES = 64 << 20


def _judge(chunk: LazyChunk) -> None:
    """Open ``chunk`` (checked and judged); an unsafe one only leaves its verdict behind."""
    try:
        chunk.entry  # noqa: B018  # opening it is the check
    except UnsafePickleError:
        return  # its verdict is kept (``_read_item``)


def _value(opened: _Opened, value: ValueMeta) -> object:
    """A non-tensor value, as plain data for the objects table (``<qualname>`` otherwise)."""
    from ckptctl.formats.pytorch._containers import read_zip
    from ckptctl.formats.pytorch._structure import plain_value
    from ckptctl.formats.pytorch._verdict import Ledger

    what = f"value {value.name!r}"
    if value.item.transforms and zstd_module() is None:  # listed without it; verify fails
        opened.undecoded = opened.undecoded or no_decoder(
            value.item.transforms, what, opened.path(value.item)
        )
        return NOT_DECODED
    ledger = Ledger()
    try:
        source = opened.slice(value.item, max(MAX_VALUE_BYTES, 32 * value.item.length), what)
        parsed = read_zip(source, ledger)
    except CkptError as exc:
        exc.message = f"{what} (bytes {value.item.offset}..): {exc.message}"
        exc.path = opened.path(value.item)
        raise
    finally:
        opened.judged(ledger.safety, f"{value.item.file} ({what})")
        opened.release(value.item)
    return plain_value(parsed.root)


def _objects(pairs: Iterable[tuple[tuple[str, ...], object]]) -> dict[str, object]:
    """Values nested by their key paths (one mapping per container), at most ``MAX_VALUES``."""
    out: dict[str, object] = {}
    omitted = 0
    for number, (path, value) in enumerate(pairs):
        if number >= MAX_VALUES:
            omitted += 1
            continue
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    if omitted:
        out[OMITTED_KEY] = omitted
    return out


def _structure(meta: DcpMetadata) -> tuple[CheckpointKind, Structure, list[str]]:
    top = sum(1 for t in meta.tensors if len(t.path) == 1)
    containers = dict(Counter(".".join(t.path[:-1]) for t in meta.tensors if len(t.path) > 1))
    paths = [t.path for t in meta.tensors] + [v.path for v in meta.values]
    keys = tuple(dict.fromkeys(p[0] for p in paths))[:100]
    structure = Structure(top, containers, None, keys)
    if not meta.tensors:
        return CheckpointKind.EMPTY, structure, ["the checkpoint holds no tensors"]
    if top == len(meta.tensors):
        return CheckpointKind.STATE_DICT, structure, []
    note = f"nested checkpoint: tensors are under {describe_groups(structure.groups)}"
    return CheckpointKind.NESTED, structure, [note]


def _describe(meta: DcpMetadata, files: RankFiles, transforms: list[str]) -> str:
    chunks = sum(len(t.chunks) for t in meta.tensors)
    shown = ", ".join(meta.files[:FILES_SHOWN])
    more = f" and {len(meta.files) - FILES_SHOWN} more" if len(meta.files) > FILES_SHOWN else ""
    split = sum(1 for t in meta.tensors if len(t.chunks) > 1)
    split_note = f", {_count(split, 'tensor')} split into several" if split else ""
    compressed = f", items compressed ({', '.join(transforms)})" if transforms else ""
    blobs = len(files.blobs)
    some = "" if blobs == len(meta.files) else f" ({blobs} of the rank files)"
    variant = (
        f", the safetensors variant{some} (SerializationFormat.SAFETENSORS: the tensors of each "
        "rank file in one safetensors blob)"
        if blobs
        else ""
    )
    return (
        f"a torch.distributed.checkpoint directory: {_count(len(meta.tensors), 'tensor')} in "
        f"{_count(chunks, 'chunk')}{split_note}, {_count(len(meta.values), 'other value')}, "
        f"in {_count(len(meta.files), 'rank file')} ({shown}{more}){compressed}{variant}"
    )


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def open_dcp(source: ByteSource) -> Checkpoint:
    """Open a DCP directory from its ``.metadata``: one lazy checkpoint over every rank file.

    The returned checkpoint owns ``source`` and every rank file.

    Raises:
        UnsafePickleError: ``.metadata`` or an item is an unsafe pickle.
        CorruptCheckpointError: inconsistent metadata, a missing or truncated rank file, an item
            that is not what ``.metadata`` says.
        UnsupportedError: a dtype or stream transform ckptctl cannot read.
    """
    meta = read_metadata(source)
    opened = _Opened(source, meta)
    try:
        entries: list[TensorEntry] = []
        chunks_of: list[tuple[LazyChunk, ...]] = []
        for tensor in meta.tensors:
            chunks = tuple(
                LazyChunk(c.offsets, c.sizes, functools.partial(_chunk_entry, opened, tensor, c),
                          keep=not c.item.transforms)
                for c in tensor.chunks
            )  # fmt: skip
            decoded = any(c.item.transforms for c in tensor.chunks)
            data = AssembledData(chunks, tensor.dtype, tensor.shape, decoded)
            chunks_of.append(chunks)
            files = len({c.item.file for c in tensor.chunks})
            entries.append(
                TensorEntry(
                    tensor.name,
                    tensor.dtype,
                    tensor.shape,
                    data.nbytes,
                    None,
                    data,
                    extra={"chunks": str(len(tensor.chunks)), "rank_files": str(files)},
                )
            )
        objects = _objects((v.path, _value(opened, v)) for v in meta.values)
    except BaseException:
        opened.close()
        raise
    kind, structure, notes = _structure(meta)
    try:
        megatron_notes, common, common_safety = _megatron(source, opened)
    except BaseException:
        opened.close()
        raise
    notes = [*megatron_notes, *notes]
    objects.update((k, v) for k, v in common.items() if k not in objects)
    opened.judged(common_safety, MEGATRON_COMMON)

    def check_rest() -> PickleSafety:
        """Open every tensor chunk not opened yet: checked against ``.metadata`` and judged
        (an unsafe one is kept in the verdict and the others still judged); a damaged one
        raises, carrying the verdict over everything judged before it."""
        try:
            if opened.undecoded is not None:  # a value nobody judged: the verdict is not whole
                raise opened.undecoded
            for chunks in chunks_of:
                for chunk in chunks:
                    _judge(chunk)
        except CkptError as exc:
            exc.safety = opened.safety(meta)
            raise
        return opened.safety(meta)

    return Checkpoint(
        entries,
        path=source.path,
        format="dcp",
        # The metadata version stays in the header view: it is no user metadata a converted
        # file should carry (safetensors' save_file of the same tensors writes none).
        metadata={},
        kind=kind,
        notes=[
            _describe(meta, opened.files, opened.transforms),
            *notes,
            *([TORCH_CANNOT_READ, TORCH_READS_VALUES] if opened.files.blobs else [TORCH_READS]),
        ],
        structure=structure,
        objects=objects,
        sharding=Sharding(source.path, meta.files),
        sources=[source, *opened.sources.values()],
        safety=opened.safety(meta),
        check_rest=check_rest,
    )


#: Megatron-core's ``torch_dist`` format adds these beside the DCP files
#: (``megatron/core/dist_checkpointing/core.py`` and ``serialization.py``, 0.16.1): a JSON config
#: naming the backends, and ``torch.save`` of the state that is not sharded.
MEGATRON_CONFIG = "metadata.json"
MEGATRON_COMMON = "common.pt"
#: Largest ``metadata.json`` read (Megatron's has four keys).
MAX_CONFIG_BYTES = 1 << 20


def _megatron(
    source: ByteSource, opened: _Opened
) -> tuple[list[str], dict[str, object], PickleSafety | None]:
    """Notes, the objects of ``common.pt`` and its verdict, for a Megatron-core ``torch_dist``
    directory (whose files ``opened`` then judges as Megatron-core's); nothing for a plain DCP
    one.

    Raises:
        UnsafePickleError: ``common.pt`` is unsafe (Megatron loads it with ``torch.load``).
        CorruptCheckpointError: ``common.pt`` is damaged.
    """
    import json

    from ckptctl.formats.pytorch import open_pytorch
    from ckptctl.sources import open_source

    try:
        config_source = open_source(beside(source, MEGATRON_CONFIG))
    except InputError:  # no metadata.json (a URL answers 404): a plain DCP directory
        return [], {}, None
    with config_source:
        try:
            raw = config_source.read(0, min(config_source.size, MAX_CONFIG_BYTES))
            config = json.loads(raw)
        except (CkptError, ValueError):
            config = None
    if not isinstance(config, dict) or "sharded_backend" not in config:
        return [f"{MEGATRON_CONFIG} is there but is no Megatron-core config (ignored)"], {}, None
    from ckptctl.formats.pytorch._producers import MEGATRON

    opened.producer = MEGATRON
    notes = [
        f"a Megatron-core {config.get('sharded_backend')} checkpoint ({MEGATRON_CONFIG}: "
        f"sharded backend {config.get('sharded_backend')} v{config.get('sharded_backend_version')}"
        f", common backend {config.get('common_backend')} v{config.get('common_backend_version')})"
    ]
    try:
        common = open_source(beside(source, MEGATRON_COMMON))
    except InputError:
        notes.append(f"{MEGATRON_COMMON} is missing: the state that is not sharded is not here")
        return notes, {}, None
    with common:
        try:
            ckpt = open_pytorch(common)
        except CkptError as exc:
            raise exc.with_path(common.path) from None
        with ckpt:
            objects = dict(ckpt.objects)
            if len(ckpt):
                notes.append(
                    f"{MEGATRON_COMMON} holds {_count(len(ckpt), 'tensor')} beside the sharded "
                    f"state, not listed here (ckptctl ls lists them from {MEGATRON_COMMON})"
                )
            return notes, objects, ckpt.safety


#: How torch itself reads the metadata (said in every listing).
TORCH_READS_VALUES = (
    "torch's DCP reader loads .metadata and the non-tensor values with plain pickle.load (full "
    "trust); ckptctl judged them and read them as inert data"
)
TORCH_READS = (
    f"{TORCH_READS_VALUES}. Tensor chunks (which torch loads with weights_only=True) are opened "
    "and judged when their bytes are read"
)
#: What torch 2.13 does with the safetensors variant (run on the fixtures: ``dcp.load`` and
#: ``dcp_to_torch_save``; ``HuggingFaceStorageReader`` and ``consolidate_safetensors_files``
#: list only ``*.safetensors`` files).
TORCH_CANNOT_READ = (
    "torch 2.13's DCP reader cannot load this directory: FileSystemReader torch.loads each "
    "tensor's byte range, which starts at the safetensors header, and fails (\"Weights only load "
    'failed ... Unsupported operand"; dcp.load and dcp_to_torch_save raise CheckpointException), '
    "and its Hugging Face reader (HuggingFaceStorageReader, consolidate_safetensors_files) reads "
    "only *.safetensors files, so it finds no tensors here. ckptctl reads the blobs (no pickle "
    "in them)"
)


# --- header -----------------------------------------------------------------------------------


def _item_json(item: Item) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {"file": item.file, "offset": item.offset, "length": item.length}
    if item.transforms:
        out["transforms"] = list(item.transforms)
    return out


def layout_dcp(source: ByteSource) -> HeaderLayout:
    """The decoded ``.metadata`` and how every byte of every rank file is used.

    ``header`` holds the tensors (dtype, global shape, chunks with their items), the values and
    the rank files, each with its size, the bytes its items cover and any bytes they do not.
    The regions are those of ``.metadata`` itself (one pickle).

    Raises:
        UnsafePickleError: ``.metadata`` is unsafe.
        CorruptCheckpointError: inconsistent metadata, a missing or truncated rank file.
    """
    meta = read_metadata(source)
    rank_files = open_files(source, meta)
    sizes = {name: f.size for name, f in rank_files.sources.items()}
    rank_files.close()
    files: list[dict[str, JSONValue]] = []
    unaccounted = 0
    by_file = items_by_file(meta)
    for file in meta.files:
        items = [i for _, i in by_file[file]]
        blob = rank_files.blobs.get(file)
        facts: dict[str, JSONValue] = {"file": file, "bytes": sizes[file], "items": len(items)}
        if blob is None:
            covered = sum(i.length for i in items)
        else:  # the tensor items are the blob's entries: its bytes, once
            covered = sum(i.length for i in items if i.offset < blob.offset) + blob.length
            facts["safetensors_blob"] = {
                "offset": blob.offset,
                "bytes": blob.length,
                "header_bytes": blob.header_bytes,
                "tensors": len(blob.tensors),
                "dcp_version": blob.version,
            }
        files.append({**facts, "item_bytes": covered, "unaccounted_bytes": sizes[file] - covered})
        unaccounted += sizes[file] - covered
    header = {
        "version": meta.version,
        "tensors": [
            {
                "name": t.name,
                "path": list(t.path),
                "dtype": t.dtype.value,
                "shape": list(t.shape),
                "chunks": [
                    {"offsets": list(c.offsets), "sizes": list(c.sizes), **_item_json(c.item)}
                    for c in t.chunks
                ],
            }
            for t in meta.tensors
        ],
        "values": [
            {"name": v.name, "path": list(v.path), **_item_json(v.item)} for v in meta.values
        ],
        "files": files,
    }
    region = Region(RegionKind.METADATA, 0, source.size, note="DCP metadata (pickle)")
    return HeaderLayout(
        "dcp",
        source.size,
        header,
        (region,) if source.size else (),
        {
            "tensors": len(meta.tensors),
            "chunks": sum(len(t.chunks) for t in meta.tensors),
            "values": len(meta.values),
            "rank_files": len(meta.files),
            "unaccounted_bytes": unaccounted,
        },
    )
