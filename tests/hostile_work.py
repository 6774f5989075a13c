"""Builders of inputs that ask for unbounded work (issue 44, part 3), written without torch.

A DCP ``.metadata`` is a pickle of torch's dataclasses: :func:`dcp_metadata` writes the opcodes
torch 2.13's pickler writes for them (protocol 4, ``STACK_GLOBAL``, ``NEWOBJ`` then ``BUILD`` of
the field dict; compare ``fixtures/valid/distributed/*/.metadata``, made by torch in
``fixtures/make_distributed.py``), and each rank-file item is a ``torch.save`` archive of one
float32 chunk (:func:`torch_save_tensor`). The other builders make a sharded index and a gzip
record.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

DCP = "torch.distributed.checkpoint.metadata"
FILESYSTEM = "torch.distributed.checkpoint.filesystem"


@dataclass(frozen=True)
class Global:
    module: str
    name: str


@dataclass(frozen=True, eq=False)
class Obj:
    """``cls.__new__(cls)`` then ``BUILD`` with ``state``."""

    cls: Global
    state: object


@dataclass(frozen=True)
class Reduce:
    func: Global
    args: tuple[object, ...]


@dataclass(frozen=True)
class PersId:
    """A persistent id (``BINPERSID``): a storage of a ``torch.save`` archive."""

    value: tuple[object, ...]


@dataclass(frozen=True, eq=False)
class Shared:
    """A value pickled once and referenced (``LONG_BINGET``) wherever it appears again."""

    value: object


@dataclass
class _Pickler:
    out: bytearray = field(default_factory=bytearray)
    memo: dict[int, int] = field(default_factory=dict)

    def memoize(self) -> int:
        self.out += b"\x94"  # MEMOIZE
        return len(self.memo)

    def save(self, obj: object) -> None:  # one branch per kind of value
        out = self.out
        if isinstance(obj, Shared):
            if id(obj) in self.memo:
                out += b"j" + struct.pack("<I", self.memo[id(obj)])  # LONG_BINGET
                return
            self.save(obj.value)
            self.memo[id(obj)] = self.memoize()
        elif obj is None:
            out += b"N"
        elif obj is True or obj is False:
            out += b"\x88" if obj else b"\x89"
        elif isinstance(obj, int):
            out += b"J" + struct.pack("<i", obj) if -(2**31) <= obj < 2**31 else _long(obj)
        elif isinstance(obj, str):
            raw = obj.encode()
            out += b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE
        elif isinstance(obj, Global):
            self.save(obj.module)
            self.save(obj.name)
            out += b"\x93"  # STACK_GLOBAL
        elif isinstance(obj, Obj):
            self.save(obj.cls)
            out += b")\x81"  # EMPTY_TUPLE NEWOBJ
            self.save(obj.state)
            out += b"b"  # BUILD
        elif isinstance(obj, PersId):
            self.save(obj.value)
            out += b"Q"  # BINPERSID
        elif isinstance(obj, Reduce):
            self.save(obj.func)
            self.save(obj.args)
            out += b"R"
        elif isinstance(obj, tuple):
            out += b"("
            for item in obj:
                self.save(item)
            out += b"t"
        elif isinstance(obj, list):
            out += b"]("
            for item in obj:
                self.save(item)
            out += b"e"  # APPENDS
        elif isinstance(obj, dict):
            out += b"}("
            for key, value in obj.items():
                self.save(key)
                self.save(value)
            out += b"u"  # SETITEMS
        else:
            raise TypeError(type(obj))


def _long(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1


def dumps(obj: object) -> bytes:
    """Protocol-4 pickle bytes of ``obj`` (see :class:`Obj`, :class:`Reduce`, :class:`Shared`)."""
    pickler = _Pickler()
    pickler.out += b"\x80\x04"
    pickler.save(obj)
    pickler.out += b"."
    return bytes(pickler.out)


def _size(values: tuple[int, ...]) -> Reduce:
    return Reduce(Global("torch", "Size"), (tuple(values),))


def _properties(dtype: str = "float32") -> Obj:
    layout = Reduce(Global("torch.serialization", "_get_layout"), ("torch.strided",))
    memory = Reduce(Global("torch.serialization", "_MEM_FORMAT_ENCODING"), (0,))
    return Obj(
        Global(DCP, "TensorProperties"), (Global("torch", dtype), layout, False, memory, False)
    )


@dataclass(frozen=True)
class Chunk:
    """A chunk of a tensor, stored in ``file`` (``offset``/``length`` filled in when written)."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str = "__0_0.distcp"


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    chunks: tuple[Chunk, ...]


def dcp_metadata(
    tensors: list[Tensor],
    places: dict[tuple[str, tuple[int, ...]], tuple[str, int, int]],
    planner: dict[str, object] | None = None,
) -> bytes:
    """The ``.metadata`` of ``tensors`` (float32), each chunk stored at ``places[(name,
    offsets)] = (file, offset, length)``; ``planner`` is ``planner_data`` (default: each name's
    path is the name alone)."""
    described = {
        t.name: Obj(
            Global(DCP, "TensorStorageMetadata"),
            {
                "properties": _properties(),
                "size": _size(t.shape),
                "chunks": [
                    Obj(
                        Global(DCP, "ChunkStorageMetadata"),
                        {"offsets": _size(c.offsets), "sizes": _size(c.sizes)},
                    )
                    for c in t.chunks
                ],
            },
        )
        for t in tensors
    }
    storage: dict[object, object] = {}
    for t in tensors:
        for number, c in enumerate(t.chunks):
            file, offset, length = places[(t.name, c.offsets)]
            key = Obj(
                Global(DCP, "MetadataIndex"),
                {"fqn": t.name, "offset": _size(c.offsets), "index": number},
            )
            info = {"relative_path": file, "offset": offset, "length": length}
            storage[key] = Obj(Global(FILESYSTEM, "_StorageInfo"), info)
    metadata = {
        "state_dict_metadata": described,
        "planner_data": {t.name: (t.name,) for t in tensors} if planner is None else planner,
        "storage_data": storage,
    }
    return dumps(Obj(Global(DCP, "Metadata"), metadata))


def torch_save_tensor(values: np.ndarray) -> bytes:
    """``torch.save`` of one contiguous float32 tensor (records stored, as torch writes them)."""
    shape = values.shape
    stride = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    storage = ("storage", Global("torch", "FloatStorage"), "0", "cpu", int(values.size))
    pickle = dumps(
        Reduce(
            Global("torch._utils", "_rebuild_tensor_v2"),
            (PersId(storage), 0, tuple(shape), stride, False, Reduce(_ORDERED_DICT, ())),
        )
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in (
            ("archive/data.pkl", pickle),
            ("archive/byteorder", b"little"),
            ("archive/data/0", values.astype("<f4").tobytes()),
            ("archive/version", b"3\n"),
        ):
            zf.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_STORED)
    return buf.getvalue()


_ORDERED_DICT = Global("collections", "OrderedDict")


def write_dcp(
    directory: Path,
    tensors: list[Tensor],
    planner: dict[str, object] | None = None,
    *,
    same_item: bool = False,
) -> dict[str, np.ndarray]:
    """Write a DCP directory of float32 ``tensors`` (values ``arange`` of each tensor), each
    chunk a ``torch.save`` archive in its rank file; return the tensors' values. With
    ``same_item``, every chunk's archive holds the same bytes (zeros of its sizes): fast to
    build for thousands of equal chunks."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytearray] = {}
    places: dict[tuple[str, tuple[int, ...]], tuple[str, int, int]] = {}
    expected: dict[str, np.ndarray] = {}
    cache: dict[tuple[int, ...], bytes] = {}
    for t in tensors:
        full = np.arange(int(np.prod(t.shape)), dtype="<f4").reshape(t.shape)
        expected[t.name] = full
        for c in t.chunks:
            if same_item:
                if c.sizes not in cache:
                    cache[c.sizes] = torch_save_tensor(np.zeros(c.sizes, "<f4"))
                item = cache[c.sizes]
            else:
                part = full[tuple(slice(o, o + s) for o, s in zip(c.offsets, c.sizes, strict=True))]
                item = torch_save_tensor(np.ascontiguousarray(part))
            out = files.setdefault(c.file, bytearray())
            places[(t.name, c.offsets)] = (c.file, len(out), len(item))
            out += item
    for name, data in files.items():
        (directory / name).write_bytes(data)
    (directory / ".metadata").write_bytes(dcp_metadata(tensors, places, planner))
    return expected


# --- a sharded index ---------------------------------------------------------------------------


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """A safetensors file of float32 ``tensors``."""
    header: dict[str, object] = {}
    data = bytearray()
    for name, array in tensors.items():
        raw = array.astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


def write_index(directory: Path, names: int, shard: str = "model.safetensors") -> Path:
    """``model.safetensors.index.json`` listing ``names`` tensors, all in ``shard``, which holds
    only the first of them (``t0``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / shard).write_bytes(safetensors_bytes({"t0": np.arange(4, dtype="<f4")}))
    quoted = json.dumps(shard)
    body = ",".join(f'"t{i}":{quoted}' for i in range(names))
    index = directory / "model.safetensors.index.json"
    index.write_text('{"metadata":{},"weight_map":{' + body + "}}", encoding="utf-8")
    return index


# --- a gzip record -----------------------------------------------------------------------------


def gzip_of_zeros(parts: list[bytes | int]) -> bytes:
    """One gzip member of ``parts``: bytes as they are, an int as that many zero bytes (a
    multiple of 1 MiB), built from one compressed MiB repeated (each part ends in a full flush,
    so the parts are independent deflate blocks), with the right CRC and length."""
    mib = 1 << 20
    block = bytes(mib)
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    body, crc, size = bytearray(), 0, 0
    for part in parts:
        if isinstance(part, int):
            assert part % mib == 0
            body += packed * (part // mib)
            for _ in range(part // mib):
                crc = zlib.crc32(block, crc)
            size += part
        else:
            packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
            body += packer.compress(part) + packer.flush(zlib.Z_FULL_FLUSH)
            crc, size = zlib.crc32(part, crc), size + len(part)
    body += zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS).flush(zlib.Z_FINISH)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + bytes(body) + struct.pack("<II", crc, size & 0xFFFFFFFF)


def burn_record_of_zeros(records: ModuleType, sizes: list[int]) -> list[bytes | int]:
    """A NamedMpkGzFileRecorder record (``records``: fixtures/make_burn_records.py) of U8
    tensors ``t0``, ``t1`` ... of ``sizes`` zero bytes each, as :func:`gzip_of_zeros` parts."""
    marks = [records.Bin(f"@@zeros{i}@@".encode()) for i in range(len(sizes))]
    item = {
        f"t{i}": {"id": records.param_id_text(i + 1), "param": {
            "bytes": mark, "shape": [size], "dtype": "U8"}}
        for i, (mark, size) in enumerate(zip(marks, sizes, strict=True))
    }  # fmt: skip
    raw = records.mpk(records.record(item, recorder="NamedMpkGzFileRecorder"))
    parts: list[bytes | int] = []
    for mark, size in zip(marks, sizes, strict=True):
        head, raw = raw.split(b"\xc4" + bytes([len(mark)]) + mark)
        parts += [head + b"\xc6" + struct.pack(">I", size), size]
    return [*parts, raw]
