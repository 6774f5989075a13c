"""Where an ONNX tensor's bytes are, and how they become the canonical bytes of its dtype.

As ``onnx.numpy_helper.to_array`` reads them: external data when ``data_location`` is
EXTERNAL, else ``raw_data`` when present, else the typed field of the data type
(``float_data`` for FLOAT/COMPLEX64, ``double_data`` for DOUBLE/COMPLEX128, ``int64_data``,
``uint64_data`` for UINT32/UINT64, ``int32_data`` for the rest, each value's low bits being
the element: FLOAT16/BFLOAT16/FLOAT8 as their bit patterns, INT4/UINT4 as packed bytes).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, UnsafePickleError
from ckptctl.formats.onnx import _schema as s
from ckptctl.formats.onnx._wire import LEN, VARINT, WireReader, corrupt
from ckptctl.model import ComputedData, FileData, Piece, PiecesData, TensorData

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.dtypes import DType
    from ckptctl.formats.onnx._parse import Piece as WirePiece
    from ckptctl.formats.onnx._parse import TensorInfo
    from ckptctl.sources import ByteSource

#: What to do about tensors outside the model's folder.
OUTSIDE_HINT = (
    "ONNX external data must be a relative path inside the model's folder; do not trust this "
    "model, or move the data file next to it and fix the location"
)


def stored_nbytes(info: TensorInfo, dtype: DType) -> int:
    """Bytes ``raw_data`` or external data hold for ``info`` (4-bit types two to a byte)."""
    if info.data_type in s.PACKED_4BIT:
        return (info.numel + 1) // 2
    return info.numel * dtype.itemsize


def unpack_4bit(packed: NDArray[np.uint8], numel: int, signed: bool) -> NDArray[np.generic]:
    """INT4/UINT4 bytes (first element in the low nibble) as one I8/U8 per element."""
    import numpy as np

    out = np.empty(packed.size * 2, dtype=np.uint8)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    out = out[:numel]
    if signed:
        return ((out ^ 8).astype(np.int8) - 8).astype(np.int8)
    return out


class ExternalFiles:
    """The external data files of one model: checked, opened once each, closed with it."""

    def __init__(self, model: ByteSource) -> None:
        self.model = model
        self.opened: dict[str, ByteSource] = {}

    def open(self, name: str, location: str) -> ByteSource:
        """The file ``location`` names, refused when it may lie outside the model's folder.

        Raises:
            UnsafePickleError: an absolute location, one with ``..``, or one that resolves
                (symlinks included) outside the model's folder; nothing of it is opened.
            CorruptCheckpointError: no location, or the file cannot be opened.
        """
        if not location or "\x00" in location:
            corrupt(f"tensor {name!r} keeps its data externally but names no valid location")
        parts = location.replace("\\", "/").split("/")
        absolute = location.startswith(("/", "\\")) or location[1:2] == ":"
        if absolute or os.path.isabs(location) or ".." in parts:
            raise UnsafePickleError(
                f"tensor {name!r} keeps its data in {location!r}, outside the model's folder",
                hint=OUTSIDE_HINT,
            )
        path = self._resolve(name, location)
        if path not in self.opened:
            from ckptctl.errors import InputError
            from ckptctl.sources import open_source

            try:
                self.opened[path] = open_source(path)
            except InputError as exc:
                raise CorruptCheckpointError(
                    f"tensor {name!r}: its external data file {location!r} cannot be opened: "
                    f"{exc.message}",
                    hint="keep the data files next to the model, as they were exported",
                ) from None
        return self.opened[path]

    def _resolve(self, name: str, location: str) -> str:
        if self.model.is_remote:
            return str(self.model.sibling(location))  # type: ignore[attr-defined]  # RemoteSource
        folder = os.path.realpath(os.path.dirname(os.path.abspath(self.model.path)))
        path = os.path.realpath(os.path.join(folder, location))
        if os.path.commonpath([folder, path]) != folder:
            raise UnsafePickleError(
                f"tensor {name!r} keeps its data in {location!r}, which resolves outside the "
                "model's folder (a symbolic link)",
                hint=OUTSIDE_HINT,
            )
        return path

    def close(self) -> None:
        """Close every file opened."""
        for source in self.opened.values():
            source.close()
        self.opened.clear()


def _number(info: TensorInfo, key: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isascii() or not value.isdigit():
        corrupt(f"tensor {info.name!r} has the external-data {key} {value!r}, not a number")
    return int(value)


def external_data(info: TensorInfo, files: ExternalFiles, nbytes: int) -> FileData:
    """The byte range of ``info``'s external data, checked against its file."""
    keys = dict(info.external or [])
    source = files.open(info.name, keys.get("location", ""))
    offset = _number(info, "offset", keys.get("offset")) or 0
    length = _number(info, "length", keys.get("length"))
    if offset > source.size:
        corrupt(
            f"tensor {info.name!r} starts at byte {offset} of {keys['location']!r}, which has "
            f"{source.size} bytes"
        )
    length = source.size - offset if length is None else length
    if length != nbytes or offset + length > source.size:
        corrupt(
            f"tensor {info.name!r} needs {nbytes} bytes but its external data is {length} bytes "
            f"at offset {offset} of {keys['location']!r} ({source.size} bytes)"
        )
    return FileData(source, offset, length)


def typed_data(source: ByteSource, info: TensorInfo, dtype: DType) -> tuple[TensorData, int]:
    """The data of a tensor kept in its typed field, and the bytes it has once decoded."""
    number = s.STORAGE_FIELD[info.data_type]
    pieces = info.typed.get(number, [])
    numel = info.numel
    if numel and not pieces:
        corrupt(f"tensor {info.name!r} has {numel} elements but no data")
    if number in (s.TENSOR_FLOAT_DATA, s.TENSOR_DOUBLE_DATA):
        return _fixed(source, info, pieces, dtype), numel * dtype.itemsize
    count = (numel + 1) // 2 if info.data_type in s.PACKED_4BIT else numel
    stored = sum(end - start for _, start, end in pieces)
    if count > stored:  # every varint has at least one byte
        corrupt(
            f"tensor {info.name!r} has {numel} elements but its {s.TYPED_FIELDS[number]} only "
            f"{stored} bytes"
        )
    decode = partial(_varint_array, source, info, pieces, count, dtype)
    return ComputedData(decode), numel * dtype.itemsize


def _fixed(
    source: ByteSource, info: TensorInfo, pieces: list[WirePiece], dtype: DType
) -> TensorData:
    """float_data / double_data: little-endian values, which are the canonical bytes."""
    size = 8 if info.data_type in (11, 15) else 4
    nbytes = info.numel * dtype.itemsize
    if all(wire == LEN for wire, _, _ in pieces):
        total = sum(end - start for _, start, end in pieces)
        if total != nbytes:
            corrupt(
                f"tensor {info.name!r} needs {nbytes} bytes but its "
                f"{s.TYPED_FIELDS[s.STORAGE_FIELD[info.data_type]]} holds {total}"
            )
        if len(pieces) == 1:
            return FileData(source, pieces[0][1], nbytes)
        parts = tuple(
            Piece(FileData(source, start, end - start), 0, end - start) for _, start, end in pieces
        )
        return PiecesData(parts, nbytes)
    wire = WireReader(source)
    chunks: list[bytes] = []
    for kind, start, end in pieces:
        if kind == LEN:
            chunks.append(source.read(start, end - start))
        else:
            chunks.extend(wire.source.read(f.start, size) for f in wire.fields(start, end))
    data = b"".join(chunks)
    if len(data) != nbytes:
        corrupt(
            f"tensor {info.name!r} needs {nbytes} bytes but its typed data holds {len(data)}",
            source.path,
        )
    return ComputedData(lambda: data)


def _decode_packed(data: bytes, at: int, path: str) -> NDArray[np.uint64]:
    """Every varint of a packed payload, vectorised."""
    import numpy as np

    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, dtype=np.uint64)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        corrupt(f"the packed field at byte {at} ends inside a varint", path)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if int(lengths.max()) > 10:
        corrupt(f"a varint in the packed field at byte {at} is longer than 10 bytes", path)
    place = np.arange(raw.size) - np.repeat(starts, lengths)
    bits = (raw & 0x7F).astype(np.uint64) << (place * 7).astype(np.uint64)
    values: NDArray[np.uint64] = np.bitwise_or.reduceat(bits, starts)
    return values


def _varint_array(
    source: ByteSource, info: TensorInfo, pieces: list[WirePiece], count: int, dtype: DType
) -> NDArray[np.generic]:
    import numpy as np

    wire = WireReader(source)
    parts: list[NDArray[np.uint64]] = []
    for kind, start, end in pieces:
        if kind == LEN:
            parts.append(_decode_packed(source.read(start, end - start), start, source.path))
        else:
            run = [f.value for f in wire.fields(start, end) if f.wire == VARINT]
            parts.append(np.array(run, dtype=np.uint64))
    values: NDArray[np.uint64] = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    if values.size != count:
        raise CorruptCheckpointError(
            f"tensor {info.name!r} needs {count} values but its "
            f"{s.TYPED_FIELDS[s.STORAGE_FIELD[info.data_type]]} holds {values.size}",
            path=source.path,
        )
    if info.data_type in s.PACKED_4BIT:
        return unpack_4bit(values.astype(np.uint8), info.numel, info.data_type == 22)
    low = values.astype(np.dtype(f"<u{dtype.itemsize}"))  # the low bits, as onnx keeps them
    out: NDArray[np.generic] = low.view(dtype.numpy).reshape(info.dims)
    return out


def packed_4bit(info: TensorInfo, stored: TensorData) -> ComputedData:
    """An INT4/UINT4 tensor's elements as I8/U8, one byte per element.

    ``stored`` is the packed bytes (raw or external data) or, for ``int32_data``, the
    elements already unpacked.
    """
    if isinstance(stored, ComputedData):
        return stored
    signed = info.data_type == 22

    def compute() -> NDArray[np.generic]:
        import numpy as np

        return unpack_4bit(np.frombuffer(stored.read(), dtype=np.uint8), info.numel, signed)

    return ComputedData(compute)
