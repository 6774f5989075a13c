"""Hostile GGUF files (issue 45), built with ``struct.pack``: every declared count, length and
offset is checked against the file before anything is allocated; each bad file is one line on
stderr and exit 3, within the child-process bounds of ``tests/test_limits.py``. Files gguf-py
reads but llama.cpp refuses fail ``verify``'s ``gguf-layout``; a chat template that reaches
Python internals fails ``chat-template`` as ``unsafe``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ckptctl import CorruptCheckpointError, open_checkpoint
from ckptctl.ops._chat_template import unsafe_constructs
from tests.conftest import VALID
from tests.test_limits import CHILD_BYTES, CHILD_SECONDS, run_child

F32, Q8_0 = 0, 8
STRING, ARRAY, UINT8, UINT32 = 8, 9, 0, 4


def text(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def kv_string(key: str, value: str) -> bytes:
    return text(key) + struct.pack("<I", STRING) + text(value)


def info(name: str, ne: tuple[int, ...], kind: int = F32, offset: int = 0) -> bytes:
    dims = struct.pack(f"<I{len(ne)}Q", len(ne), *ne)
    return text(name) + dims + struct.pack("<IQ", kind, offset)


def gguf_file(
    kvs: list[bytes], infos: list[bytes], data: bytes, *, counts: tuple[int, int] | None = None
) -> bytes:
    n_tensors, n_kv = counts or (len(infos), len(kvs))
    body = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + b"".join(kvs) + b"".join(infos)
    return body + bytes(-len(body) % 32) + data


ARCH = kv_string("general.architecture", "llama")
#: name -> (file bytes, a keyword of the error)
CORRUPT: dict[str, tuple[bytes, str]] = {
    "huge_kv_count": (gguf_file([ARCH], [], b"", counts=(0, 2**62)), "key/values"),
    "huge_tensor_count": (gguf_file([ARCH], [], b"", counts=(2**40, 1)), "tensors"),
    "huge_string": (
        gguf_file([text("k") + struct.pack("<IQ", STRING, 2**60)], [], b""),
        "needs 1152921504606846976 bytes",
    ),
    "huge_key": (gguf_file([struct.pack("<Q", 2**63)], [], bytes(64)), "the key of key/value 0"),
    "huge_array": (
        gguf_file([text("k") + struct.pack("<IIQ", ARRAY, UINT8, 2**60)], [], b""),
        "declares 1152921504606846976 items",
    ),
    "string_item_past_end": (
        gguf_file(
            [
                text("k")
                + struct.pack("<IIQ", ARRAY, STRING, 3)
                + text("a")
                + struct.pack("<Q", 2**40)
            ],
            [],
            b"",
        ),
        "item 1 of",
    ),
    "deep_arrays": (
        gguf_file([text("k") + struct.pack("<IIQ", ARRAY, ARRAY, 1) * 40 + bytes(64)], [], b""),
        "deep",
    ),
    "bad_value_type": (gguf_file([text("k") + struct.pack("<I", 99)], [], b""), "value type 99"),
    "offset_past_end": (gguf_file([ARCH], [info("w", (4,), offset=2**40)], bytes(16)), "'w'"),
    "overlap": (
        gguf_file([ARCH], [info("a", (8,)), info("b", (8,), offset=0)], bytes(64)),
        "overlaps",
    ),
    "unaligned": (gguf_file([ARCH], [info("w", (4,), offset=4)], bytes(32)), "alignment"),
    "too_many_dims": (gguf_file([ARCH], [info("w", (1, 1, 1, 1, 1))], bytes(32)), "dimensions"),
    "ne_overflow": (gguf_file([ARCH], [info("w", (2**32, 2**32))], bytes(32)), "overflows"),
    "partial_block": (gguf_file([ARCH], [info("q", (33,), Q8_0)], bytes(64)), "multiple"),
    "bad_alignment": (
        gguf_file([text("general.alignment") + struct.pack("<II", UINT32, 3)], [], b""),
        "power of two",
    ),
    "duplicate_key": (gguf_file([ARCH, ARCH], [], b""), "twice"),
    "truncated_header": (b"GGUF" + struct.pack("<I", 3) + bytes(4), "24-byte header"),
}


@pytest.mark.parametrize("name", CORRUPT)
def test_hostile_file_is_corrupt_with_the_cause(name: str, tmp_path: Path) -> None:
    data, keyword = CORRUPT[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError, match=keyword) as info_:
        open_checkpoint(path)
    assert info_.value.path == str(path)


@pytest.mark.bounded
@pytest.mark.parametrize("name", CORRUPT)
@pytest.mark.parametrize("command", ["ls", "header", "verify"])
def test_hostile_file_is_one_line_within_bounds(name: str, command: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(CORRUPT[name][0])
    code, output, seconds, rss = run_child([command, str(path)], tmp_path)
    assert seconds < CHILD_SECONDS
    assert rss < CHILD_BYTES
    assert "Traceback" not in output
    if command == "verify":
        assert code == 1
        assert "readable" in output
    else:
        assert code == 3, output
        assert output.strip().count("\n") <= 1  # the error and at most its hint
        assert str(path) in output


def _misordered() -> bytes:
    """Two tensors stored in the reverse of header order: gguf-py reads it, gguf.cpp refuses."""
    return gguf_file([ARCH], [info("a", (8,), offset=32), info("b", (8,), offset=0)], bytes(64))


def test_misordered_offsets_read_but_fail_verify(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "misordered.gguf"
    path.write_bytes(_misordered())
    with open_checkpoint(path) as ckpt:
        assert list(ckpt) == ["a", "b"]
    result = run_cli("verify", path, "--json")
    assert result.code == 1
    finding = _finding(result.stdout, "gguf-layout")
    assert finding["status"] == "fail"
    assert "llama.cpp" in str(finding["message"])
    assert "'a'" in str(finding["message"])


def _finding(stdout: str, check: str) -> dict[str, object]:
    report = json.loads(stdout)
    found: dict[str, object] = next(
        f for f in report["files"][0]["findings"] if f["check"] == check
    )
    return found


def test_unknown_type_is_listed_never_decoded(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "unknown.gguf"
    path.write_bytes(gguf_file([ARCH], [info("w", (4,), kind=99), info("n", (4,), offset=32)],
                               bytes(48)))  # fmt: skip
    listing = run_cli("ls", path, "--json")
    assert listing.code == 0, listing.stderr
    rows = {t["name"]: t for t in json.loads(listing.stdout)["tensors"]}
    assert rows["w"]["dtype"] == "type 99"
    assert rows["w"]["shape"] == [4]
    assert any("type 99, unknown to ckptctl" in n for n in json.loads(listing.stdout)["notes"])
    converted = run_cli("convert", path, tmp_path / "out.safetensors")
    assert converted.code == 4
    assert "type 99" in converted.stderr
    verified = run_cli("verify", path)
    assert verified.code == 1
    assert "type 99" in verified.stdout


def test_dangerous_chat_template_is_unsafe(run_cli) -> None:
    result = run_cli("verify", VALID / "gguf" / "unsafe_template.gguf", "--json")
    assert result.code == 1
    report = json.loads(result.stdout)
    assert report["files"][0]["verdict"] == "unsafe"
    finding = _finding(result.stdout, "chat-template")
    assert "__globals__" in str(finding["message"])
    sarif = run_cli("verify", VALID / "gguf" / "unsafe_template.gguf", "--format", "sarif")
    assert "chat-template" in sarif.stdout


@pytest.mark.parametrize("name", ["tiny_llama.gguf", "ggml-vocab-phi-3.gguf"])
def test_real_chat_templates_pass(run_cli, name: str) -> None:
    result = run_cli("verify", VALID / "gguf" / name, "--json")
    assert _finding(result.stdout, "chat-template")["status"] == "ok"


#: Published SSTI payloads and the construct each must be named by.
PAYLOADS = {
    "{{ ''.__class__.__mro__[1].__subclasses__() }}": "__subclasses__",
    "{{ lipsum.__globals__['os'].popen('id').read() }}": "lipsum",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}": "__globals__",
    "{{ joiner.__init__.__globals__ }}": "joiner",
    "{% set x = namespace.__init__.__globals__ %}": "namespace",
    "{{ self._TemplateReference__context }}": "self",
    "{{ request|attr('\\x5f\\x5fclass\\x5f\\x5f') }}": "attr",
    "{{ ('%c'|format(95)) * 2 }}": "%c",
    "{{ config.items() }}": "config",
    "{{ x['__class__'] }}": "__class__",
}


@pytest.mark.parametrize("template", PAYLOADS)
def test_template_payloads_are_named(template: str) -> None:
    found = unsafe_constructs("{% for m in messages %}{{ m['content'] }}{% endfor %}" + template)
    assert any(PAYLOADS[template] in f for f in found), found


def test_constructs_outside_code_are_text() -> None:
    plain = "Say __init__ and self.x to {{ messages[0]['content'] }} {# __globals__ #}"
    assert unsafe_constructs(plain) == []
    assert unsafe_constructs("{% set ns = namespace(found=false) %}{% set ns.found = true %}") == []
