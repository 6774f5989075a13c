"""Burnpack reader, writer and layout against burn's bytes (docs/formats/burnpack.md).

Ground truth here is independent of ckptctl's writer: the golden vectors of the research notes
on burnpack (hex dumps and SHA-256 sums, transcribed below), their ParamId table, and files
assembled with plain ``cbor2.dumps`` (which matches burn byte for byte when there are no floats).
``reference_files()`` and ``hostile_files()`` also generate the committed fixtures; a test checks
they are current.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cbor2
import numpy as np
import pytest

from ckptctl import (
    CkptError,
    CorruptCheckpointError,
    DType,
    SelectionError,
    UnknownFormatError,
    UnsupportedError,
    open_checkpoint,
    read_layout,
    save_checkpoint,
)
from ckptctl.formats.burnpack import (
    format_param_id,
    open_burnpack,
    parse_param_id,
    plan_layout,
    write_burnpack,
)
from ckptctl.formats.burnpack._cbor import encode_cbor
from ckptctl.model import ComputedData, TensorEntry
from ckptctl.sources import ByteSource
from tests.conftest import CORPUS, HOSTILE, VALID
from tests.contract import FormatContract

VALID_DIR = VALID / "burnpack"
HOSTILE_DIR = HOSTILE / "burnpack"

BURNPACK_DTYPES = (
    DType.F64, DType.F32, DType.F16, DType.BF16, DType.I64, DType.I32, DType.I16, DType.I8,
    DType.U64, DType.U32, DType.U16, DType.U8, DType.BOOL,
)  # fmt: skip

# --- ground truth from the research notes -------------------------------------------------------

#: Golden vectors: (size, SHA-256, non-zero 16-byte lines of the research notes' hex dumps).
SPEC_VECTORS: dict[str, tuple[int, str, dict[int, str]]] = {
    "net.bpk": (
        792,
        "f7bcf44dec097d65cdfa2d1605d3cf1af2e16b6602876f1e17c6528e9429953c",
        {
            0x000: "4e5255420100d2000000a16774656e73",
            0x010: "6f7273a36766632e62696173a4656474",
            0x020: "7970656346333265736861706581036c",
            0x030: "646174615f6f66667365747382190100",
            0x040: "19010c68706172616d5f69641b112210",
            0x050: "f47de981156966632e776569676874a4",
            0x060: "65647479706563463332657368617065",
            0x070: "8204036c646174615f6f666673657473",
            0x080: "8200183068706172616d5f69641bc3b2",
            0x090: "c8b2d241f4576b686561642e77656967",
            0x0A0: "6874a465647479706563463332657368",
            0x0B0: "6170658203026c646174615f6f666673",
            0x0C0: "6574738219020019021868706172616d",
            0x0D0: "5f69641b891087b8e3b70cb100000000",
            0x100: "0000803f000000400000404000008040",
            0x110: "0000a0400000c0400000e04000000041",
            0x120: "00001041000020410000304100004041",
            0x200: "0000003f000080bf0000004000000000",
            0x300: "0000803f000080bf00000040000000c0",
            0x310: "00004040000040c0",
        },
    ),
    "empty.bpk": (
        256,
        "d51cafc1a9901c1d26d289a9e29457bb4bb041f704ee783577e890d516927813",
        {0x000: "4e52554201000a000000a16774656e736f7273a0"},
    ),
    "single.bpk": (
        264,
        "6195289adac6da8ef87c24a0aa76c1a99d7584bdb45deb7ee112d422ad638ba1",
        {
            0x000: "4e52554201002f000000a16774656e73",
            0x010: "6f7273a16177a3656474797065634633",
            0x020: "3265736861706581026c646174615f6f",
            0x030: "66667365747382000800000000000000",
            0x100: "0000803f00000040",
        },
    ),
    "meta_scalars.bpk": (
        264,
        "8f4652bc67f922a8e63baf62c6eb7714dbd905b463acc6abb6f082f01103dce8",
        {
            0x000: "4e5255420100b8000000a36774656e73",
            0x010: "6f7273a16177a3656474797065634633",
            0x020: "3265736861706581026c646174615f6f",
            0x030: "666673657473820008686d6574616461",
            0x040: "7461a266666f726d6174686275726e70",
            0x050: "61636b6870726f647563657264627572",
            0x060: "6e677363616c617273a663626967a165",
            0x070: "466c6f6174fa501502f964666c6167a1",
            0x080: "64426f6f6cf56468616c66a165466c6f",
            0x090: "6174f93800626c72a165466c6f6174fb",
            0x0A0: "3f50624dd2f1a9fc666f6666736574a1",
            0x0B0: "63496e74226473746570a16455496e74",
            0x0C0: "182a0000000000000000000000000000",
            0x100: "0000803f00000040",
        },
    ),
    "mixed.bpk": (
        776,
        "4eca5301b284219042748ec7475c935168a58798740284f565ad777bdc32f91f",
        {
            0x000: "4e52554201008c000000a16774656e73",
            0x010: "6f7273a36168a3656474797065634631",
            0x020: "3665736861706581026c646174615f6f",
            0x030: "66667365747382190100190104646d61",
            0x040: "736ba3656474797065a164426f6f6c66",
            0x050: "4e617469766565736861706581046c64",
            0x060: "6174615f6f6666736574738200046173",
            0x070: "a3656474797065634636346573686170",
            0x080: "65806c646174615f6f66667365747382",
            0x090: "19020019020800000000000000000000",
            0x100: "0100000100",
            0x200: "003c00c000",
            0x300: "0000000000000c40",
        },
    ),
    # the "scalar-only record" vector: the metadata bytes are given, the file is 256 bytes.
    "scalar_only.bpk": (
        256,
        "",
        {
            0x000: "4e525542010027000000a26774656e736f7273a0677363616c617273a1"
            "6c63757272656e745f69746572a16455496e7405"
        },
    ),
}

#: Quantization schemes, whole dtype values (docs/formats/burnpack.md#dtypes).
QFLOAT_CURRENT_HEX = (
    "a16651466c6f6174a56576616c7565635138466573746f7265a1695061636b656455333200646d6f6465"
    "6953796d6d65747269636674656e736f72f665626c6f636bf6"
)
QFLOAT_0_20_HEX = (
    "a16651466c6f6174a56576616c75656351384665706172616d634633326573746f7265a1695061636b65"
    "6455333200656c6576656c6654656e736f72646d6f64656953796d6d6574726963"
)
QFLOAT_CURRENT = {
    "QFloat": {
        "value": "Q8F",
        "store": {"PackedU32": 0},
        "mode": "Symmetric",
        "tensor": None,
        "block": None,
    }
}
QFLOAT_0_20 = {
    "QFloat": {
        "value": "Q8F",
        "param": "F32",
        "store": {"PackedU32": 0},
        "level": "Tensor",
        "mode": "Symmetric",
    }
}

#: ParamId printed forms (docs/formats/burnpack.md#paramids).
PARAM_IDS = [
    (0, "0000000000000"),
    (1, "0400000000000"),
    (123456, "83h0200000000"),
    (18446744073709551615, "vvvvvvvvvvvvu"),
    (14101554053607715927, "avq43klip2pc6"),
    (1234567890123456789, "2m0uivfk20h12"),
    (9876543210987654321, "m46bfotogs88i"),
    (10777079075451239370, "pbtp1m2hs27pa"),
]

NET_IDS = {
    "fc.weight": 14101554053607715927,
    "fc.bias": 1234567890123456789,
    "head.weight": 9876543210987654321,
}


def spec_bytes(name: str) -> bytes:
    """Assemble a golden vector from its hex-dump lines (everything else is zero)."""
    size, _, lines = SPEC_VECTORS[name]
    buf = bytearray(size)
    for offset, text in lines.items():
        raw = bytes.fromhex(text)
        buf[offset : offset + len(raw)] = raw
    return bytes(buf)


def pack(
    top: dict[str, Any],
    payloads: dict[int, bytes],
    *,
    aligned: bool = True,
    size: int | None = None,
    version: int = 1,
) -> bytes:
    """A burnpack file assembled with plain cbor2, independent of ckptctl's writer.

    ``payloads`` maps offsets relative to the data section to bytes.
    """
    meta = cbor2.dumps(top)
    unpadded = 10 + len(meta)
    start = -(-unpadded // 256) * 256 if aligned else unpadded
    end = max((off + len(raw) for off, raw in payloads.items()), default=0)
    buf = bytearray(start + end if size is None else size)
    buf[:unpadded] = b"NRUB" + struct.pack("<HI", version, len(meta)) + meta
    for off, raw in payloads.items():
        buf[start + off : start + off + len(raw)] = raw
    return bytes(buf)


def desc(dtype: Any, shape: Any, start: int, end: int, pid: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}
    if pid is not None:
        out["param_id"] = pid
    return out


def f32(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


LEGACY_META = {"format": "burnpack", "producer": "burn", "version": "0.19.1"}
Q_PAYLOAD = bytes(range(1, 9)) + f32(0.25)  # 8 packed i8 values + one f32 scale
Q_OLD_PAYLOAD = bytes([1, 2, 3, 4]) + f32(0.5)


def reference_files() -> dict[str, bytes]:
    """Every valid fixture, from the research notes' bytes or assembled with plain cbor2."""
    files = {name: spec_bytes(name) for name in SPEC_VECTORS}
    files["zero_len.bpk"] = pack(
        {
            "tensors": {
                "a": desc("U8", [3], 0, 3),
                "e": desc("F32", [0], 256, 256),
                "z": desc("U8", [1], 256, 257),
            }
        },
        {0: b"\x01\x02\x03", 256: b"\xff"},
    )
    files["zero_len_last.bpk"] = pack(
        {"tensors": {"a": desc("U8", [3], 0, 3), "e": desc("F32", [0, 4], 256, 256)}},
        {0: b"\x01\x02\x03"},
        size=512,
    )
    files["bool_stores.bpk"] = pack(
        {
            "tensors": {
                "n": desc({"Bool": "Native"}, [3], 512, 515),
                "u8": desc({"Bool": "U8"}, [2, 2], 256, 260),
                "w32": desc({"Bool": "U32"}, [3], 0, 12),
            }
        },
        {0: struct.pack("<3I", 1, 0, 1), 256: b"\x00\x01\x01\x00", 512: b"\x01\x01\x00"},
    )
    files["bool_legacy_0_20.bpk"] = pack(
        {
            "tensors": {"mask": desc("Bool", [4], 0, 4, 7)},
            "metadata": {"format": "burnpack", "producer": "burn", "version": "0.20.1"},
        },
        {0: b"\x01\x00\x00\x01"},
    )
    files["flex32.bpk"] = pack(
        {
            "tensors": {
                "x": desc("Flex32", [2, 2], 0, 16, 42),
                "y": desc("BF16", [2], 256, 260),
            }
        },
        {0: f32(1.0, -2.0, 0.5, 3.0), 256: b"\x80\x3f\x00\xc0"},  # bf16 [1.0, -2.0]
    )
    files["quantized.bpk"] = pack(
        {
            "tensors": {
                "bias": desc("F32", [2], 512, 520),
                "q": desc(QFLOAT_CURRENT, [2, 4], 0, 12, 5),
                "q_old": desc(QFLOAT_0_20, [4], 256, 264),
            }
        },
        {0: Q_PAYLOAD, 256: Q_OLD_PAYLOAD, 512: f32(0.5, 1.5)},
    )
    # burn 0.19: no padding, payloads contiguous from the end of the metadata
    # (docs/formats/burnpack.md#burn-019-files).
    files["legacy_0_19.bpk"] = pack(
        {
            "tensors": {
                "fc.bias": desc("F32", [3], 48, 60),
                "fc.weight": desc("F32", [4, 3], 0, 48),
                "mask": desc("Bool", [4], 60, 64),
            },
            "metadata": LEGACY_META,
        },
        {0: f32(*range(1, 13)), 48: f32(0.5, -1.0, 2.0), 60: b"\x01\x00\x00\x01"},
        aligned=False,
    )
    files["legacy_0_19_single.bpk"] = pack(
        {"tensors": {"w": desc("F32", [2], 0, 8)}, "metadata": LEGACY_META},
        {0: f32(1.0, 2.0)},
        aligned=False,
    )
    return files


def hostile_files() -> dict[str, tuple[bytes, type[CkptError], str]]:
    """Crafted bad files: bytes, the error they must raise, a fragment of its message."""
    single = spec_bytes("single.bpk")
    w = {"w": desc("F32", [2], 0, 8)}

    def one(d: dict[str, Any], payload: bytes = f32(1.0, 2.0)) -> bytes:
        return pack({"tensors": {"w": d}}, {0: payload})

    tensors_w = cbor2.dumps("tensors") + b"\xa1" + cbor2.dumps("w")
    dup = b"\xa1" + cbor2.dumps("tensors") + b"\xa2"
    dup += (cbor2.dumps("w") + cbor2.dumps(desc("F32", [2], 0, 8))) * 2
    bignum_id = b"\xc2\x49\x01" + bytes(8)  # tag 2 (bignum) 2**64
    big_id_meta = tensors_w + b"\xa4" + cbor2.dumps("dtype") + cbor2.dumps("F32")
    big_id_meta += cbor2.dumps("shape") + cbor2.dumps([2]) + cbor2.dumps("data_offsets")
    big_id_meta += cbor2.dumps([0, 8]) + cbor2.dumps("param_id") + bignum_id
    deep = b"\xa2" + cbor2.dumps("tensors") + b"\xa0" + cbor2.dumps("x") + b"\x81" * 10000 + b"\x00"

    def raw(meta: bytes, tail: bytes = b"") -> bytes:
        head = b"NRUB" + struct.pack("<HI", 1, len(meta)) + meta
        return head + bytes(-len(head) % 256) + tail

    corrupt = CorruptCheckpointError
    return {
        "short_header.bpk": (b"NRUB\x01\x00\x0a\x00", corrupt, "fewer than the 10-byte"),
        "bad_magic.bpk": (b"BURN" + single[4:], corrupt, "bad magic b'BURN'"),
        "version_2.bpk": (single[:4] + b"\x02\x00" + single[6:], UnsupportedError, "version 2"),
        "metadata_too_large.bpk": (
            b"NRUB\x01\x00" + struct.pack("<I", 100 * 1024 * 1024 + 1) + bytes(22),
            corrupt,
            "exceeds the limit",
        ),
        "metadata_past_eof.bpk": (
            single[:6] + struct.pack("<I", 1000) + single[10:60],
            corrupt,
            "runs past the end",
        ),
        "invalid_cbor.bpk": (raw(b"\xa1\x67tens"), corrupt, "invalid CBOR metadata"),
        "deep_nesting.bpk": (raw(deep), corrupt, "nesting depth"),
        "not_a_map.bpk": (raw(cbor2.dumps([1, 2])), corrupt, "not a map"),
        "no_tensors.bpk": (raw(cbor2.dumps({"metadata": {"a": "b"}})), corrupt, "no 'tensors'"),
        "duplicate_names.bpk": (raw(dup, f32(1, 2)), corrupt, "uplicate"),
        "dtype_wrong_type.bpk": (one(desc(5, [2], 0, 8)), corrupt, "neither a text string"),
        "shape_wrong_type.bpk": (one(desc("F32", "2", 0, 8)), corrupt, "shape '2'"),
        "offsets_not_pair.bpk": (
            pack(
                {"tensors": {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 16]}}},
                {0: f32(1, 2)},
            ),
            corrupt,
            "data_offsets [0, 8, 16]",
        ),
        "offsets_past_eof.bpk": (
            pack({"tensors": w}, {0: f32(1)}, size=260),
            corrupt,
            "ends at byte 264",
        ),
        "end_before_start.bpk": (one(desc("F32", [2], 8, 0)), corrupt, "end 0 is before start 8"),
        "overlap.bpk": (
            pack(
                {"tensors": {"a": desc("F32", [4], 0, 16), "b": desc("F32", [2], 8, 16)}},
                {0: f32(1, 2, 3, 4)},
                aligned=False,  # 'b' starts at 8, which only the 0.19 layout allows
            ),
            corrupt,
            "overlap",
        ),
        "length_mismatch.bpk": (one(desc("F32", [3], 0, 8)), corrupt, "needs 12"),
        "control_char_name.bpk": (
            pack({"tensors": {"w\x1b[2J": desc("F32", [2], 0, 8)}}, {0: f32(1, 2)}),
            corrupt,
            "control characters",
        ),
        "empty_name.bpk": (
            pack({"tensors": {"": desc("F32", [2], 0, 8)}}, {0: f32(1, 2)}),
            corrupt,
            "is empty",
        ),
        "param_id_2_64.bpk": (raw(b"\xa1" + big_id_meta, f32(1, 2)), corrupt, "param_id"),
        "param_id_negative.bpk": (one(desc("F32", [2], 0, 8, -1)), corrupt, "param_id -1"),
        "metadata_not_text.bpk": (
            pack({"tensors": w, "metadata": {"a": 1}}, {0: f32(1, 2)}),
            corrupt,
            "not text to text",
        ),
        "scalar_wrong_type.bpk": (
            pack({"tensors": {}, "scalars": {"lr": {"Float": 1}}}, {}),
            corrupt,
            "not a valid Float",
        ),
        "unknown_dtype.bpk": (
            one(desc("F8E4M3", [2], 0, 2), b"\x01\x02"),
            UnsupportedError,
            "tensor 'w' has dtype 'F8E4M3'",
        ),
        "unknown_bool_store.bpk": (
            one(desc({"Bool": "U16"}, [2], 0, 4), bytes(4)),
            UnsupportedError,
            "bool store 'U16'",
        ),
    }


# --- helpers --------------------------------------------------------------------------------


def entry(
    name: str,
    dtype: DType,
    shape: tuple[int, ...],
    raw: bytes,
    *,
    param_id: int | None = None,
    source_dtype: Any = None,
    extra: Mapping[str, str] | None = None,
) -> TensorEntry:
    return TensorEntry(
        name=name,
        dtype=dtype,
        shape=shape,
        nbytes=len(raw),
        offset=None,
        data=ComputedData(lambda: raw),
        param_id=param_id,
        source_dtype=source_dtype,
        extra=dict(extra or {}),
    )


def net_entries() -> list[TensorEntry]:
    """The ``Net`` vector: Net { fc: Linear(4→3), head: Linear(3→2, no bias) }, traversal order."""
    return [
        entry("fc.weight", DType.F32, (4, 3), f32(*range(1, 13)), param_id=NET_IDS["fc.weight"]),
        entry("fc.bias", DType.F32, (3,), f32(0.5, -1, 2), param_id=NET_IDS["fc.bias"]),
        entry(
            "head.weight",
            DType.F32,
            (3, 2),
            f32(1, -1, 2, -2, 3, -3),
            param_id=NET_IDS["head.weight"],
        ),
    ]


SPEC_SCALARS = {
    "step": {"UInt": 42},
    "lr": {"Float": 0.001},
    "flag": {"Bool": True},
    "offset": {"Int": -3},
    "half": {"Float": 0.5},
    "big": {"Float": 1e10},
}

#: What ckptctl is asked to write for each golden vector: (entries, metadata, scalars).
WRITE_CASES: dict[str, tuple[list[TensorEntry], dict[str, str], dict[str, Any]]] = {
    "net.bpk": (net_entries(), {}, {}),
    "empty.bpk": ([], {}, {}),
    "single.bpk": ([entry("w", DType.F32, (2,), f32(1, 2))], {}, {}),
    "meta_scalars.bpk": (
        [entry("w", DType.F32, (2,), f32(1, 2))],
        {"producer": "burn", "format": "burnpack"},
        SPEC_SCALARS,
    ),
    "mixed.bpk": (
        [
            entry("mask", DType.BOOL, (4,), b"\x01\x00\x00\x01"),
            entry("h", DType.F16, (2,), np.array([1.0, -2.0], "<f2").tobytes()),
            entry("s", DType.F64, (), struct.pack("<d", 3.5)),
        ],
        {},
        {},
    ),
    "scalar_only.bpk": ([], {}, {"current_iter": {"UInt": 5}}),
    "zero_len.bpk": (
        [
            entry("a", DType.U8, (3,), b"\x01\x02\x03"),
            entry("e", DType.F32, (0,), b""),
            entry("z", DType.U8, (1,), b"\xff"),
        ],
        {},
        {},
    ),
    "zero_len_last.bpk": (
        [entry("a", DType.U8, (3,), b"\x01\x02\x03"), entry("e", DType.F32, (0, 4), b"")],
        {},
        {},
    ),
    "bool_stores.bpk": (
        [
            entry("w32", DType.BOOL, (3,), b"\x01\x00\x01", source_dtype={"Bool": "U32"}),
            entry("u8", DType.BOOL, (2, 2), b"\x00\x01\x01\x00", source_dtype={"Bool": "U8"}),
            entry("n", DType.BOOL, (3,), b"\x01\x01\x00"),
        ],
        {},
        {},
    ),
    "flex32.bpk": (
        [
            entry("x", DType.F32, (2, 2), f32(1, -2, 0.5, 3), param_id=42, source_dtype="Flex32"),
            entry("y", DType.BF16, (2,), b"\x80\x3f\x00\xc0"),
        ],
        {},
        {},
    ),
    "quantized.bpk": (
        [
            entry(
                "q",
                DType.U8,
                (12,),
                Q_PAYLOAD,
                param_id=5,
                source_dtype=QFLOAT_CURRENT,
                extra={"quantized": "Q8F", "logical_shape": "[2, 4]"},
            ),
            entry(
                "q_old",
                DType.U8,
                (8,),
                Q_OLD_PAYLOAD,
                source_dtype=QFLOAT_0_20,
                extra={"quantized": "Q8F", "logical_shape": "[4]"},
            ),
            entry("bias", DType.F32, (2,), f32(0.5, 1.5)),
        ],
        {},
        {},
    ),
}

ALIGNED_FIXTURES = sorted(set(reference_files()) - {"legacy_0_19.bpk", "legacy_0_19_single.bpk"})


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_bytes(tmp_path: Path, entries: list[TensorEntry], **kw: Any) -> bytes:
    path = tmp_path / "written.bpk"
    save_checkpoint(path, entries, force=True, **kw)
    return path.read_bytes()


def check_tiling(regions: tuple[Any, ...], size: int) -> None:
    pos = 0
    for region in regions:
        assert region.start == pos, region
        assert region.end >= region.start, region
        pos = region.end
    assert pos == size


# --- contract -------------------------------------------------------------------------------


class TestBurnpackContract(FormatContract):
    fmt = "burnpack"
    ext = ".bpk"
    dtypes = BURNPACK_DTYPES
    keeps_metadata = True

    def make_unknown_dtype_file(self, path: Path) -> None:
        path.write_bytes(
            pack({"tensors": {"w": desc("Complex64", [1], 0, 8)}}, {0: bytes(8)}),
        )


# --- golden vectors -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in SPEC_VECTORS if SPEC_VECTORS[n][1]])
def test_spec_vectors_match_their_sha256(name: str) -> None:
    """The transcription of the hex dumps is exact."""
    assert sha256(spec_bytes(name)) == SPEC_VECTORS[name][1]


def test_qfloat_dtype_encodings_match_spec() -> None:
    assert cbor2.dumps(QFLOAT_CURRENT).hex() == QFLOAT_CURRENT_HEX
    assert cbor2.dumps(QFLOAT_0_20).hex() == QFLOAT_0_20_HEX
    assert encode_cbor(QFLOAT_CURRENT).hex() == QFLOAT_CURRENT_HEX


@pytest.mark.parametrize("name", sorted(WRITE_CASES))
def test_writer_is_byte_identical_to_reference(tmp_path: Path, name: str) -> None:
    entries, metadata, scalars = WRITE_CASES[name]
    written = write_bytes(tmp_path, entries, metadata=metadata, scalars=scalars)
    expected = reference_files()[name]
    assert sha256(written) == sha256(expected)
    assert written == expected
    if SPEC_VECTORS.get(name, (0, ""))[1]:
        assert sha256(written) == SPEC_VECTORS[name][1]


@pytest.mark.parametrize("name", [n for n in ALIGNED_FIXTURES if "bool_legacy" not in n])
def test_burnpack_copy_is_byte_identical(tmp_path: Path, name: str) -> None:
    src = tmp_path / name
    src.write_bytes(reference_files()[name])
    with open_checkpoint(src) as ckpt:
        copied = write_bytes(tmp_path, ckpt.entries(), metadata=ckpt.metadata, scalars=ckpt.scalars)
    assert copied == src.read_bytes()


def test_legacy_bool_is_written_in_the_current_encoding(tmp_path: Path) -> None:
    # burn 0.19-0.20 wrote a bare "Bool"; current burn rejects it, so a copy converts it (issue 13)
    src = tmp_path / "bool_legacy_0_20.bpk"
    src.write_bytes(reference_files()["bool_legacy_0_20.bpk"])
    with open_checkpoint(src) as ckpt:
        values = {name: bytes(e.data.read()) for name, e in ckpt.items()}
        copied = write_bytes(tmp_path, ckpt.entries(), metadata=ckpt.metadata, scalars=ckpt.scalars)
    length = struct.unpack_from("<I", copied, 6)[0]
    tensors = cbor2.loads(copied[10 : 10 + length])["tensors"]
    bools = [d for d in tensors.values() if "Bool" in str(d["dtype"])]
    assert bools
    assert all(d["dtype"] == {"Bool": "Native"} for d in bools)
    out = tmp_path / "copy.bpk"
    out.write_bytes(copied)
    with open_checkpoint(out) as again:
        assert {name: bytes(e.data.read()) for name, e in again.items()} == values


def test_writer_streams_into_a_file_without_fileno() -> None:
    out = io.BytesIO()
    entries, metadata, scalars = WRITE_CASES["meta_scalars.bpk"]
    write_burnpack(out, entries, metadata, scalars)
    assert out.getvalue() == spec_bytes("meta_scalars.bpk")


def test_plan_reports_offsets_before_writing() -> None:
    plan = plan_layout(net_entries(), {}, {})
    assert plan.metadata_length == 210
    assert plan.data_start == 256
    assert plan.file_size == 792
    assert plan.offsets == (("fc.weight", 0, 48), ("fc.bias", 256, 268), ("head.weight", 512, 536))
    assert plan.head == spec_bytes("net.bpk")[:256]


@pytest.mark.parametrize(
    ("value", "hex_bytes"),
    [
        (0.5, "f93800"),
        (1e10, "fa501502f9"),
        (0.001, "fb3f50624dd2f1a9fc"),
        (float("inf"), "f97c00"),
        (float("nan"), "f97e00"),
        (-float("nan"), "f9fe00"),
        (-3, "22"),
        (1 << 40, "1b0000010000000000"),
    ],
)
def test_cbor_encoding_rules(value: float, hex_bytes: str) -> None:
    """docs/formats/burnpack.md#metadata: shortest floats and integers, exactly as ciborium writes
    them."""
    assert encode_cbor(value).hex() == hex_bytes


# --- reading --------------------------------------------------------------------------------


def open_reference(tmp_path: Path, name: str) -> Any:
    path = tmp_path / name
    path.write_bytes(reference_files()[name])
    return open_checkpoint(path)


def test_net_reads_values_and_param_ids_in_data_order(tmp_path: Path) -> None:
    with open_reference(tmp_path, "net.bpk") as ckpt:
        assert ckpt.format == "burnpack"
        assert list(ckpt) == ["fc.weight", "fc.bias", "head.weight"]  # data order, not name order
        assert {e.name: e.param_id for e in ckpt.values()} == NET_IDS
        np.testing.assert_array_equal(
            ckpt["fc.weight"].load(), np.arange(1, 13, dtype="<f4").reshape(4, 3)
        )
        np.testing.assert_array_equal(ckpt["fc.bias"].load(), [0.5, -1.0, 2.0])
        np.testing.assert_array_equal(ckpt["head.weight"].load(), [[1, -1], [2, -2], [3, -3]])
        assert [e.offset for e in ckpt.values()] == [256, 512, 768]
        assert ckpt.metadata == {}
    assert read_layout(tmp_path / "net.bpk").facts["layout"] == "aligned"


def test_metadata_and_scalars_are_read_raw(tmp_path: Path) -> None:
    with open_reference(tmp_path, "meta_scalars.bpk") as ckpt:
        assert ckpt.metadata == {"format": "burnpack", "producer": "burn"}
        assert ckpt.scalars == SPEC_SCALARS
        assert isinstance(ckpt.scalars["step"]["UInt"], int)


def test_mixed_dtypes(tmp_path: Path) -> None:
    with open_reference(tmp_path, "mixed.bpk") as ckpt:
        assert list(ckpt) == ["mask", "h", "s"]
        assert ckpt["mask"].dtype is DType.BOOL
        assert ckpt["mask"].load().tolist() == [True, False, False, True]
        assert ckpt["h"].load().tolist() == [1.0, -2.0]
        assert ckpt["s"].shape == ()
        assert ckpt["s"].load().item() == 3.5


def test_bool_stores(tmp_path: Path) -> None:
    with open_reference(tmp_path, "bool_stores.bpk") as ckpt:
        w32 = ckpt["w32"]
        assert (w32.dtype, w32.nbytes, w32.offset) == (DType.BOOL, 3, None)
        assert w32.source_dtype == {"Bool": "U32"}
        assert bytes(w32.data.read()) == b"\x01\x00\x01"
        assert w32.load().tolist() == [True, False, True]
        assert ckpt["u8"].source_dtype == {"Bool": "U8"}
        assert ckpt["u8"].load().tolist() == [[False, True], [True, False]]
        assert ckpt["n"].source_dtype == {"Bool": "Native"}
    with open_reference(tmp_path, "bool_legacy_0_20.bpk") as ckpt:
        assert ckpt["mask"].source_dtype == "Bool"
        assert ckpt["mask"].load().tolist() == [True, False, False, True]
        assert ckpt["mask"].param_id == 7


def test_plain_bool_is_written_as_native_store(tmp_path: Path) -> None:
    """Converting into burnpack without a source spelling writes the current native store."""
    written = write_bytes(tmp_path, [entry("m", DType.BOOL, (2,), b"\x01\x00")])
    assert cbor2.loads(written[10 : 10 + struct.unpack_from("<I", written, 6)[0]]) == {
        "tensors": {"m": desc({"Bool": "Native"}, [2], 0, 2)}
    }


def test_flex32_reads_as_f32(tmp_path: Path) -> None:
    with open_reference(tmp_path, "flex32.bpk") as ckpt:
        assert ckpt["x"].dtype is DType.F32
        assert ckpt["x"].source_dtype == "Flex32"
        assert ckpt["x"].load().tolist() == [[1.0, -2.0], [0.5, 3.0]]
        assert ckpt["y"].dtype is DType.BF16
        assert ckpt["y"].source_dtype is None
        assert ckpt["y"].load().tolist() == [0x3F80, 0xC000]


def test_quantized_tensor_is_opaque_u8(tmp_path: Path) -> None:
    with open_reference(tmp_path, "quantized.bpk") as ckpt:
        q = ckpt["q"]
        assert (q.dtype, q.shape, q.nbytes, q.param_id) == (DType.U8, (12,), 12, 5)
        assert q.source_dtype == QFLOAT_CURRENT
        assert dict(q.extra) == {"quantized": "Q8F", "logical_shape": "[2, 4]"}
        assert bytes(q.data.read()) == Q_PAYLOAD
        assert json.loads(ckpt["q_old"].extra["logical_shape"]) == [4]
        assert any("'q' is quantized" in note for note in ckpt.notes)
        old_era = [n for n in ckpt.notes if "'q_old' is quantized" in n]
        assert len(old_era) == 1
        assert "0.19-0.22.0-pre.2 form" in old_era[0]


def test_quantized_tensor_becomes_plain_u8_when_reshaped(tmp_path: Path) -> None:
    """An entry whose shape no longer matches its payload loses the QFloat descriptor."""
    q = WRITE_CASES["quantized.bpk"][0][0]
    changed = entry("q", DType.U8, (3, 4), Q_PAYLOAD, source_dtype=q.source_dtype, extra=q.extra)
    written = write_bytes(tmp_path, [changed])
    meta = cbor2.loads(written[10 : 10 + struct.unpack_from("<I", written, 6)[0]])
    assert meta["tensors"]["q"]["dtype"] == "U8"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("legacy_0_19.bpk", {"fc.weight": list(range(1, 13)), "fc.bias": [0.5, -1, 2]}),
        ("legacy_0_19_single.bpk", {"w": [1.0, 2.0]}),
    ],
)
def test_burn_0_19_unaligned_layout(
    tmp_path: Path, name: str, expected: dict[str, list[float]]
) -> None:
    with open_reference(tmp_path, name) as ckpt:
        assert "burn 0.19 unaligned layout" in ckpt.notes
        assert read_layout(tmp_path / name).facts["layout"] == "unaligned-0.19"
        assert ckpt.metadata["version"] == "0.19.1"
        for tensor, values in expected.items():
            assert ckpt[tensor].load().reshape(-1).tolist() == values
        if "mask" in ckpt:
            assert ckpt["mask"].load().tolist() == [True, False, False, True]
        # converting writes the current aligned layout with the same tensors
        out = tmp_path / "aligned.bpk"
        save_checkpoint(out, ckpt.entries(), ckpt.metadata)
        assert read_layout(out).facts["layout"] == "aligned"
        with open_checkpoint(out) as copy:
            for tensor in ckpt:
                assert bytes(copy[tensor].data.read()) == bytes(ckpt[tensor].data.read())


def test_zero_length_tensors(tmp_path: Path) -> None:
    with open_reference(tmp_path, "zero_len.bpk") as ckpt:
        assert list(ckpt) == ["a", "e", "z"]
        assert ckpt["e"].shape == (0,)
        assert ckpt["e"].nbytes == 0
        assert ckpt["z"].load().tolist() == [255]
    assert len(reference_files()["zero_len.bpk"]) == 513
    assert len(reference_files()["zero_len_last.bpk"]) == 512


@pytest.mark.parametrize(("value", "text"), PARAM_IDS)
def test_param_id_printed_form(value: int, text: str) -> None:
    assert format_param_id(value) == text
    assert parse_param_id(text) == value


def test_param_id_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        format_param_id(1 << 64)
    with pytest.raises(ValueError, match="13"):
        parse_param_id("abc")


MNIST_SHA256 = "b63e660152b3865b1b630c97af6df1fcbc04206648d3a03b3636fcc795ecc472"


@pytest.mark.corpus
def test_upstream_mnist_file(tmp_path: Path) -> None:
    """burn's examples/mnist-inference-web/model.bpk, when the corpus carries it."""
    candidates = [p for p in CORPUS.rglob("*.bpk") if p.stat().st_size == 1_044_776]
    found = [p for p in candidates if sha256(p.read_bytes()) == MNIST_SHA256]
    if not found:
        pytest.skip("burn's mnist model.bpk is not in ../shared/corpus")
    with open_checkpoint(found[0]) as ckpt:
        assert len(ckpt) == 18
        assert read_layout(found[0]).facts["data_start"] == 1536
        assert next(iter(ckpt)) == "conv1.conv.weight"
        assert all(e.param_id is not None for e in ckpt.values())
        assert format_param_id(ckpt["conv1.conv.weight"].param_id or 0) == "pbtp1m2hs27pa"
        np.testing.assert_allclose(
            ckpt["fc3.bias"].load(),
            [0.51002616, -0.19103652, -0.20890829, 0.143869, 0.7088905, 1.0556958,
             -1.3583688, 0.12224936, -0.5565781, -0.79151887],
            rtol=1e-6,
        )  # fmt: skip
        copied = write_bytes(tmp_path, ckpt.entries(), metadata=ckpt.metadata)
    assert sha256(copied) == MNIST_SHA256


# --- layout ---------------------------------------------------------------------------------


def test_net_layout_accounts_for_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "net.bpk"
    path.write_bytes(spec_bytes("net.bpk"))
    layout = read_layout(path)
    assert layout.format == "burnpack"
    assert layout.file_size == 792
    check_tiling(layout.regions, 792)
    sizes = {k: sum(r.size for r in layout.regions if r.kind == k) for k in ("header", "metadata")}
    assert sizes == {"header": 10, "metadata": 210}
    tensors = [(r.name, r.start, r.end) for r in layout.regions if r.kind == "tensor"]
    assert tensors == [("fc.weight", 256, 304), ("fc.bias", 512, 524), ("head.weight", 768, 792)]
    assert layout.facts["tensor_bytes"] == 84
    assert layout.facts["padding_bytes"] == 792 - 10 - 210 - 84
    assert layout.facts["data_start"] == 256
    assert layout.facts["alignment"] == 256
    assert layout.facts["metadata_bytes"] == 210
    notes = [r.note for r in layout.regions if r.kind == "padding"]
    assert notes == [
        "zero padding to the 256-byte aligned data section",
        "alignment of 'fc.bias' to 256 bytes",
        "alignment of 'head.weight' to 256 bytes",
    ]
    assert layout.header["magic"] == "NRUB"
    assert layout.header["metadata_length"] == 210
    assert layout.header["cbor"]["tensors"]["fc.bias"]["param_id"] == NET_IDS["fc.bias"]
    json.dumps(layout.header)  # JSON-able


@pytest.mark.parametrize("name", sorted(reference_files()))
def test_every_layout_tiles_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    data = reference_files()[name]
    path.write_bytes(data)
    layout = read_layout(path)
    check_tiling(layout.regions, len(data))
    assert not [r for r in layout.regions if r.kind == "other"]
    if name.startswith("legacy_0_19"):
        assert layout.facts["layout"] == "unaligned-0.19"
        assert [r.kind for r in layout.regions][:3] == ["header", "metadata", "tensor"]


def test_layout_shows_trailing_bytes_and_unknown_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "odd.bpk"
    path.write_bytes(
        pack({"tensors": {"w": desc("F8E4M3", [2], 0, 2)}}, {0: b"\x01\x02"}) + b"junk"
    )
    layout = read_layout(path)
    check_tiling(layout.regions, path.stat().st_size)
    assert layout.regions[-1].kind == "other"
    assert layout.regions[-1].note == "trailing bytes after the data section"


# --- writer errors --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [DType.F8_E4M3, DType.F8_E5M2, DType.C64, DType.C128])
def test_writer_refuses_dtypes_burnpack_cannot_hold(tmp_path: Path, dtype: DType) -> None:
    bad = entry("odd", dtype, (1,), bytes(dtype.itemsize))
    with pytest.raises(UnsupportedError, match=f"tensor 'odd' has dtype {dtype.value}"):
        write_bytes(tmp_path, [bad])
    assert not (tmp_path / "written.bpk").exists()


def test_writer_refuses_duplicate_names(tmp_path: Path) -> None:
    twice = [entry("w", DType.U8, (1,), b"\x01"), entry("w", DType.U8, (1,), b"\x02")]
    with pytest.raises(SelectionError, match="'w' appears twice"):
        write_bytes(tmp_path, twice)


@pytest.mark.parametrize(
    ("scalars", "message"),
    [
        ({"x": 1}, "one-entry map"),
        ({"x": {"Float": 1}}, "not a valid Float"),
        ({"x": {"UInt": -1}}, "not a valid UInt"),
        ({"x": {"Int": 1 << 63}}, "not a valid Int"),
        ({"x": {"Text": "a"}}, "unknown kind"),
    ],
)
def test_writer_refuses_bad_scalars(tmp_path: Path, scalars: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedError, match=message):
        write_bytes(tmp_path, [], scalars=scalars)


def test_writer_refuses_out_of_range_param_id(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match="param_id"):
        write_bytes(tmp_path, [entry("w", DType.U8, (1,), b"\x01", param_id=1 << 64)])


# --- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(hostile_files()))
def test_hostile_file_raises_specific_error(tmp_path: Path, name: str) -> None:
    data, error, fragment = hostile_files()[name]
    path = tmp_path / name
    path.write_bytes(data)
    with ByteSource(path) as source, pytest.raises(error) as info:
        open_burnpack(source)
    assert type(info.value) is error
    assert fragment in info.value.message
    with pytest.raises(CkptError) as via_api:
        open_checkpoint(path)
    # a file without the magic is, by content, no burnpack at all
    assert type(via_api.value) is (UnknownFormatError if name == "bad_magic.bpk" else error)
    assert via_api.value.path == str(path)
    if error is CorruptCheckpointError and name != "bad_magic.bpk":  # header view refuses too
        with pytest.raises(CorruptCheckpointError):
            read_layout(path)


def test_too_many_tensors(tmp_path: Path) -> None:
    """100,001 tensors (the count is checked before any descriptor)."""
    body = bytearray(b"\xa1" + cbor2.dumps("tensors") + b"\xba" + struct.pack(">I", 100_001))
    for i in range(100_001):
        body += cbor2.dumps(str(i)) + b"\x00"
    path = tmp_path / "many.bpk"
    path.write_bytes(b"NRUB" + struct.pack("<HI", 1, len(body)) + body)
    with pytest.raises(CorruptCheckpointError, match="100001 tensors exceed the limit"):
        open_checkpoint(path)


def test_nesting_below_the_limit_is_fine(tmp_path: Path) -> None:
    """Unknown top-level keys are ignored, even when nested 100 deep; the note says so."""
    meta = b"\xa2" + cbor2.dumps("tensors") + b"\xa0" + cbor2.dumps("x") + b"\x81" * 100 + b"\x00"
    path = tmp_path / "nested.bpk"
    path.write_bytes(
        b"NRUB" + struct.pack("<HI", 1, len(meta)) + meta + bytes(256 - 10 - len(meta))
    )
    with open_checkpoint(path) as ckpt:
        assert len(ckpt) == 0
        assert any("'x'" in note for note in ckpt.notes)


def test_u32_bool_nonzero_reads_as_true(tmp_path: Path) -> None:
    path = tmp_path / "b.bpk"
    path.write_bytes(
        pack({"tensors": {"b": desc({"Bool": "U32"}, [2], 0, 8)}}, {0: struct.pack("<2I", 7, 0)})
    )
    with open_checkpoint(path) as ckpt:
        assert bytes(ckpt["b"].data.read()) == b"\x01\x00"


# --- fixtures -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(reference_files()))
def test_valid_fixture_is_current(name: str) -> None:
    path = VALID_DIR / name
    assert path.read_bytes() == reference_files()[name]
    assert len(path.read_bytes()) < 64 * 1024


@pytest.mark.parametrize("name", sorted(hostile_files()))
def test_hostile_fixture_is_current(name: str) -> None:
    assert (HOSTILE_DIR / name).read_bytes() == hostile_files()[name][0]


def test_fixture_readmes_list_every_file() -> None:
    for directory in (VALID_DIR, HOSTILE_DIR):
        lines = (directory / "README.md").read_text().splitlines()
        listed = {line[2:].split()[0].strip("`:") for line in lines if line.startswith("- ")}
        present = {p.name for p in directory.iterdir() if p.suffix == ".bpk"}
        assert listed == present, directory


def write_fixtures() -> None:
    """Regenerate fixtures/{valid,hostile}/burnpack (run: python -m tests.formats.test_burnpack)."""
    VALID_DIR.mkdir(parents=True, exist_ok=True)
    HOSTILE_DIR.mkdir(parents=True, exist_ok=True)
    for name, data in reference_files().items():
        (VALID_DIR / name).write_bytes(data)
    for name, (data, _, _) in hostile_files().items():
        (HOSTILE_DIR / name).write_bytes(data)


if __name__ == "__main__":
    write_fixtures()
