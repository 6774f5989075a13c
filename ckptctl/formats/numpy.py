"""NumPy's ``.npy`` arrays and ``.npz`` archives, read without unpickling anything (issue 46).

Format notes: ``docs/formats/numpy.md``.

``.npy`` byte layout (``numpy/lib/format.py``, versions 1.0, 2.0 and 3.0)::

    0       6 bytes   magic "\\x93NUMPY"
    6       u8, u8    major and minor version
    8       u16 LE    H, the header length (version 1.0); u32 LE from 10 (2.0 and 3.0)
    10/12   H bytes   a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)},
                      padded with spaces and one newline so the data starts aligned (64 bytes)
    then    the array's bytes: C or Fortran order, in the byte order ``descr`` says

The header is parsed by numpy's own ``numpy.lib.format.read_array_header_1_0`` / ``_2_0``
(a ``literal_eval``, never ``eval``; headers over ``MAX_NPY_HEADER_BYTES`` are refused). Version
3.0 differs from 2.0 only in allowing UTF-8 in structured field names, which ckptctl does not
read. A ``.npy`` lists one tensor named after the file (``weights.npy``: ``weights``).

An ``.npz`` is a zip of ``NAME.npy`` records (``np.savez`` stores them, ``np.savez_compressed``
deflates them); each record is one tensor named ``NAME``, Flax-style ``/`` paths kept. A stored
record's array is a byte range of the archive; a compressed one is inflated when read.

Entries give canonical bytes (little-endian, C order): an array stored so is a plain byte range
(a view of the file's memory map), a big-endian or Fortran-order one is converted when loaded.
An object array (``descr`` ``|O``) is a pickle that ``np.load(allow_pickle=True)`` would run: it is
judged by the pickle verdict and refused as unsafe, never unpickled. Other dtypes ckptctl has no
name for (strings, structured records, datetimes, ``float128``) are unsupported (exit 4).
"""

from __future__ import annotations

import io
import math
import os
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from ckptctl.dtypes import DType
from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    TruncatedError,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats._base import FormatSpec, tile_regions
from ckptctl.model import (
    Checkpoint,
    ComputedData,
    FileData,
    HeaderLayout,
    Region,
    RegionKind,
    TensorData,
    TensorEntry,
)

if TYPE_CHECKING:
    import numpy as np

    from ckptctl.formats.pytorch._zipdir import ZipRecord, ZipRecords
    from ckptctl.sources import ByteSource

__all__ = ["MAX_NPY_HEADER_BYTES", "NPY_MAGIC", "SPECS", "layout_numpy", "open_numpy"]

NPY_MAGIC = b"\x93NUMPY"
#: Longest ``.npy`` header accepted (numpy's own ``_MAX_HEADER_SIZE``).
MAX_NPY_HEADER_BYTES = 10_000
#: Most records an ``.npz`` may hold (each is a tensor).
MAX_NPZ_MEMBERS = 1_000_000
#: Largest dimension count accepted (numpy's own ``NPY_MAXDIMS`` is 64).
MAX_NDIM = 64
#: Most bytes of an object array's pickle read to judge it (a longer one is judged on its head,
#: and refused as unsafe all the same).
MAX_PICKLE_BYTES = 64 << 20

#: numpy dtype (kind, itemsize) -> DType; anything else is unsupported.
_DTYPES = {
    ("f", 8): DType.F64, ("f", 4): DType.F32, ("f", 2): DType.F16,
    ("i", 8): DType.I64, ("i", 4): DType.I32, ("i", 2): DType.I16, ("i", 1): DType.I8,
    ("u", 8): DType.U64, ("u", 4): DType.U32, ("u", 2): DType.U16, ("u", 1): DType.U8,
    ("b", 1): DType.BOOL, ("c", 8): DType.C64, ("c", 16): DType.C128,
}  # fmt: skip
_TRUNCATED_HINT = "the file looks truncated; re-download or re-save it"


class _Array(NamedTuple):
    """One parsed ``.npy`` header: where its data starts (relative to the ``.npy``)."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fortran: bool
    version: tuple[int, int]
    prefix: int  # magic, version and length field
    header_end: int  # the dict literal and its padding end here: the data starts
    dict_end: int  # the dict literal ends here (then spaces and a newline)

    @property
    def data_bytes(self) -> int:
        """The bytes of the array's data, as the header declares it."""
        return math.prod(self.shape) * self.dtype.itemsize


# --- detection ------------------------------------------------------------------------------


def _sniff_npy(head: bytes, source: ByteSource) -> bool:
    return head.startswith(NPY_MAGIC)


def _sniff_npz(head: bytes, source: ByteSource) -> bool:
    """A zip whose first local record is named ``*.npy`` (``np.savez``'s output), or an empty zip
    (``np.savez`` of no arrays). Never raises."""
    if head.startswith(b"PK\x05\x06") and len(head) == 22:
        return True
    if not head.startswith(b"PK\x03\x04") or len(head) < 30:
        return False
    name_length = int.from_bytes(head[26:28], "little")
    return head[30 : 30 + name_length].endswith(b".npy")


# --- .npy headers ---------------------------------------------------------------------------


def _parse_header(head: bytes, where: str) -> _Array:
    """The header of the ``.npy`` at the start of ``head`` (which holds at least its header when
    the file is long enough), by numpy's own parser."""
    from numpy.lib import format as npformat

    if len(head) < 10 or not head.startswith(NPY_MAGIC):
        raise TruncatedError(f"{where}: the .npy header is cut short", hint=_TRUNCATED_HINT)
    version = (head[6], head[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise UnsupportedError(
            f"{where}: .npy format version {version[0]}.{version[1]} (ckptctl reads 1.0 to 3.0)"
        )
    prefix = 10 if version == (1, 0) else 12
    length = struct.unpack_from("<H" if prefix == 10 else "<I", head.ljust(12, b"\0"), 8)[0]
    if length > MAX_NPY_HEADER_BYTES:
        raise CorruptCheckpointError(
            f"{where}: the .npy header claims {length} bytes (most accepted: "
            f"{MAX_NPY_HEADER_BYTES})"
        )
    if len(head) < prefix + length:
        raise TruncatedError(f"{where}: the .npy header is cut short", hint=_TRUNCATED_HINT)
    read = npformat.read_array_header_1_0 if prefix == 10 else npformat.read_array_header_2_0
    stream = io.BytesIO(head[8 : prefix + length])
    try:
        shape, fortran, dtype = read(stream, max_header_size=MAX_NPY_HEADER_BYTES)
    except Exception as exc:  # numpy's parser: ValueError, SyntaxError, tokenize.TokenError ...
        raise CorruptCheckpointError(f"{where}: the .npy header is not valid: {exc}") from None
    if len(shape) > MAX_NDIM or any(dim < 0 for dim in shape):
        raise CorruptCheckpointError(f"{where}: the .npy header's shape {shape} is not valid")
    text = head[prefix : prefix + length]
    dict_end = prefix + len(text.rstrip(b" \n\x00"))
    return _Array(dtype, tuple(shape), bool(fortran), version, prefix, prefix + length, dict_end)


def _stored_header(source: ByteSource, start: int, size: int, where: str) -> _Array:
    """The header of the ``.npy`` of ``size`` bytes at ``start``, reading no byte past it."""
    first = source.read(start, min(size, 12))
    length = _header_length(first)
    return _parse_header(source.read(start, min(size, length)), where)


def _header_length(first: bytes) -> int:
    """Magic, version, length field and header: the bytes before the data (0: not a .npy)."""
    if len(first) < 10 or not first.startswith(NPY_MAGIC):
        return 12
    if first[6] == 1:
        return 10 + int.from_bytes(first[8:10], "little")
    return 12 + min(int.from_bytes(first[8:12].ljust(4, b"\0"), "little"), MAX_NPY_HEADER_BYTES)


def _dtype_of(array: _Array, where: str) -> DType:
    dtype = array.dtype
    if dtype.hasobject:
        raise AssertionError("object arrays are judged before")  # pragma: no cover
    found = _DTYPES.get((dtype.kind, dtype.itemsize)) if dtype.fields is None else None
    if found is None or dtype.subdtype is not None:
        raise UnsupportedError(
            f"{where}: arrays of dtype {dtype.str!r} ({dtype}) have no tensor dtype",
            hint="ckptctl reads numeric and bool arrays; save this one as another dtype",
        )
    return found


def _object_array(data: bytes, where: str, path: str) -> UnsafePickleError:
    """The refusal of an object array, carrying the verdict of its pickle (never unpickled)."""
    from ckptctl.formats.pytorch._embedded import judge_npy
    from ckptctl.safety import PickleSafety, Problem, Verdict

    problem = Problem(
        "an object array is a pickle that np.load(allow_pickle=True) runs",
        Verdict.UNSAFE,
        where,
    )
    judged = judge_npy(data, where) or PickleSafety()
    safety = PickleSafety((), (problem,)).merge(judged)
    return UnsafePickleError(
        f"{where} is an object array: a pickle, not tensor data (never unpickled)",
        path=path,
        hint="save the array with a numeric dtype (np.save(arr.astype(np.float32)))",
        safety=safety,
    )


# --- entries --------------------------------------------------------------------------------


def _entry(
    name: str, array: _Array, data: TensorData, offset: int | None, where: str
) -> TensorEntry:
    dtype = _dtype_of(array, where)
    nbytes = math.prod(array.shape) * dtype.itemsize
    native = array.dtype.byteorder in ("<", "|", "=") and not (
        array.fortran and len(array.shape) > 1
    )
    if not native:
        stored = data
        data = ComputedData(lambda: _canonical(stored, array, dtype))
    return TensorEntry(
        name=name,
        dtype=dtype,
        shape=array.shape,
        nbytes=nbytes,
        offset=offset if native else None,
        data=data,
        source_dtype=array.dtype.str,
    )


def _canonical(data: TensorData, array: _Array, dtype: DType) -> np.ndarray[Any, Any]:
    """The array's values as little-endian, C-order bytes."""
    import numpy as np

    raw = np.frombuffer(data.read(), dtype=array.dtype)
    values = raw.reshape(array.shape, order="F" if array.fortran else "C")
    return np.ascontiguousarray(values, dtype=dtype.numpy)


def _checked_data(source: ByteSource, start: int, array: _Array, end: int, where: str) -> int:
    """The data's byte count, refusing an array that runs past ``end``."""
    count = array.data_bytes
    if start + count > end:
        raise _short(source, start, count, end, where)
    return count


def _short(source: ByteSource, start: int, count: int, end: int, where: str) -> TruncatedError:
    return TruncatedError(
        f"{where}: the array's {count} bytes end at byte {start + count} but only "
        f"{end - start} follow the header",
        path=source.path,
        hint=_TRUNCATED_HINT,
    )


def _npy_name(path: str) -> str:
    base = os.path.basename(path.rstrip("/").split("?", 1)[0]) or "array"
    return base[: -len(".npy")] if base.endswith(".npy") and len(base) > 4 else base


def _open_npy(source: ByteSource) -> Checkpoint:
    name = _npy_name(source.path)
    array = _stored_header(source, 0, source.size, "the array")
    if array.dtype.hasobject:
        data = source.read(0, min(source.size, MAX_PICKLE_BYTES))
        raise _object_array(data, "the array", source.path)
    nbytes = _checked_data(source, array.header_end, array, source.size, name)
    entry = _entry(name, array, FileData(source, array.header_end, nbytes), array.header_end, name)
    return Checkpoint([entry], path=source.path, format="npy", sources=[source])


def _open_npz(source: ByteSource) -> Checkpoint:
    records = _npz_records(source)
    entries = [_member(records, info) for info in records.infos.values()]
    return Checkpoint(entries, path=source.path, format="npz", sources=[source])


def _npz_records(source: ByteSource) -> ZipRecords:
    from ckptctl.formats.pytorch._zipdir import ZipRecords

    records = ZipRecords(source)
    if len(records.infos) > MAX_NPZ_MEMBERS:
        raise CorruptCheckpointError(f"the archive lists {len(records.infos)} records")
    stray = [name for name in records.infos if not name.endswith(".npy")]
    if stray:
        raise UnsupportedError(
            f"zip record {stray[0]!r} is not a .npy array: not an .npz archive as np.savez "
            "writes it",
            hint="an .npz holds only NAME.npy records",
        )
    return records


def _member(records: ZipRecords, info: ZipRecord) -> TensorEntry:
    name = info.name[: -len(".npy")]
    where = f"member {name!r}"
    stored = records.is_stored(info)
    if stored:
        start = records.data_offset(info)
        array = _stored_header(records.source, start, info.file_size, where)
    else:
        array = _parse_header(_record_head(records, info, 12 + MAX_NPY_HEADER_BYTES), where)
    if array.dtype.hasobject:
        raise _object_array(_record_head(records, info), where, records.source.path)
    nbytes = _checked_data(records.source, array.header_end, array, info.file_size, where)
    if stored:
        offset = start + array.header_end
        return _entry(name, array, FileData(records.source, offset, nbytes), offset, where)
    compressed = ComputedData(lambda: _inflated(records, info, array.header_end, nbytes))
    return _entry(name, array, compressed, None, where)


def _record_head(records: ZipRecords, info: ZipRecord, cap: int = MAX_PICKLE_BYTES) -> bytes:
    """A record's first ``cap`` bytes, decompressed (never more, whatever the record claims)."""
    from ckptctl.formats.pytorch._zipdir import inflate

    offset = records.data_offset(info)
    raw = records.source.view(offset, info.compress_size)
    try:
        return bytes(inflate(info.method, raw, min(info.file_size, cap)))
    except NotImplementedError:
        raise UnsupportedError(
            f"zip record {info.name!r} uses compression method {info.method}"
        ) from None
    except Exception as exc:  # zlib.error, EOFError, lzma.LZMAError
        raise CorruptCheckpointError(
            f"zip record {info.name!r} cannot be decompressed: {exc}"
        ) from None


def _inflated(records: ZipRecords, info: ZipRecord, start: int, nbytes: int) -> memoryview:
    try:
        data = records.decompress(info, info.file_size)
    except CkptError as exc:
        raise exc.with_path(records.source.path) from None
    return memoryview(data)[start : start + nbytes]


def open_numpy(source: ByteSource) -> Checkpoint:
    """A lazy checkpoint over an ``.npy`` or ``.npz`` file (see the module docstring).

    Raises:
        CorruptCheckpointError: a header, record or size that is not valid.
        UnsafePickleError: an object array (its pickle's verdict in the error's ``safety``).
        UnsupportedError: a dtype with no tensor dtype, or a version or compression unknown.
    """
    head = source.read(0, min(source.size, len(NPY_MAGIC)))
    return _open_npy(source) if head == NPY_MAGIC else _open_npz(source)


# --- header layout --------------------------------------------------------------------------


def _npy_regions(array: _Array, base: int, data_bytes: int, name: str) -> list[Region]:
    return [
        Region(RegionKind.HEADER, base, base + array.prefix, note=".npy magic, version, length"),
        Region(RegionKind.METADATA, base + array.prefix, base + array.dict_end, note=".npy header"),
        Region(
            RegionKind.PADDING,
            base + array.dict_end,
            base + array.header_end,
            note="spaces and a newline aligning the data",
        ),
        Region(
            RegionKind.TENSOR,
            base + array.header_end,
            base + array.header_end + data_bytes,
            name=name,
        ),
    ]


def _header_json(array: _Array) -> dict[str, Any]:
    return {
        "version": f"{array.version[0]}.{array.version[1]}",
        "descr": array.dtype.str,
        "fortran_order": array.fortran,
        "shape": list(array.shape),
    }


def layout_numpy(source: ByteSource) -> HeaderLayout:
    """Every byte of an ``.npy`` or ``.npz`` file in a region (``ckptctl header``).

    Raises:
        CorruptCheckpointError: a header or record that is not valid.
    """
    if source.read(0, min(source.size, len(NPY_MAGIC))) == NPY_MAGIC:
        name = _npy_name(source.path)
        array = _stored_header(source, 0, source.size, "the array")
        declared = array.data_bytes
        count = min(declared, source.size - array.header_end)
        regions = tile_regions(_npy_regions(array, 0, count, name), source.size)
        layout = HeaderLayout(
            "npy",
            source.size,
            _header_json(array),
            tuple(regions),
            {"data_start": array.header_end, "tensor_bytes": count},
        )
        if count < declared:
            error = _short(source, array.header_end, declared, source.size, "the array")
            error.layout = layout
            raise error
        return layout
    return _npz_layout(source)


def _npz_layout(source: ByteSource) -> HeaderLayout:
    records = _npz_records(source)
    directory = records.directory
    regions: list[Region] = []
    members = []
    for info in sorted(records.infos.values(), key=lambda r: r.header_offset):
        regions += _member_regions(records, info)
        members.append(
            {
                "name": info.name,
                "method": info.method,
                "size": info.file_size,
                "compressed_size": info.compress_size,
            }
        )
    regions.append(
        Region(
            RegionKind.HEADER,
            directory.cd_start,
            directory.cd_end,
            note=f"zip central directory ({len(directory.records)} entries)",
        )
    )
    for span, what in (
        (directory.zip64_end, "zip64 end of central directory"),
        (directory.zip64_locator, "zip64 end of central directory locator"),
        (directory.eocd, "zip end of central directory"),
    ):
        if span is not None:
            regions.append(Region(RegionKind.HEADER, *span, note=what))
    tiled = tile_regions(regions, source.size)
    tensor_bytes = sum(r.size for r in tiled if r.kind == RegionKind.TENSOR)
    return HeaderLayout(
        "npz",
        source.size,
        {"container": "zip", "members": members},
        tuple(tiled),
        {"members": len(members), "tensor_bytes": tensor_bytes},
    )


def _member_regions(records: ZipRecords, info: ZipRecord) -> list[Region]:
    start = info.header_offset
    data = records.data_offset(info)
    regions = [Region(RegionKind.HEADER, start, data, note=f"zip local header of {info.name!r}")]
    name = info.name[: -len(".npy")]
    if not records.is_stored(info):
        note = f"compressed with method {info.method}"
        return [
            *regions,
            Region(RegionKind.TENSOR, data, data + info.compress_size, name=name, note=note),
        ]
    array = _stored_header(records.source, data, info.file_size, f"member {name!r}")
    count = min(array.data_bytes, info.file_size - array.header_end)
    return regions + _npy_regions(array, data, count, name)


SPECS = (
    FormatSpec(name="npy", extensions=(), sniff=_sniff_npy, open=open_numpy, layout=layout_numpy),
    FormatSpec(name="npz", extensions=(), sniff=_sniff_npz, open=open_numpy, layout=layout_numpy),
)
