"""Terminal safety: strings taken from files never reach the terminal raw.

Each reader accepts some hostile characters (checked here too, so a reader that starts refusing
them makes the test say so): safetensors and burnpack take any metadata key or value and tensor
names with bidi overrides; PyTorch pickles take any dict key as a tensor name. Every command's
text and JSON output over such files must hold no ESC, CR, BEL, C1 control or bidi/invisible
character: each is printed as a visible escape (``\\x1b``, ``\\u202e``) instead.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from ckptctl.formats import open_checkpoint, save_checkpoint
from ckptctl.formats.pytorch._writer import write_zip
from tests.conftest import CliResult
from tests.strategies import array_entry

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
#: Clear screen, carriage return, right-to-left override, bell, isolate, C1 CSI, zero-width space.
EVIL = "\x1b[2J\r\u202e\x07\u2066\x9b\u200b"
#: Characters that must never appear raw in output.
FORBIDDEN = {
    *(chr(c) for c in range(0x20) if chr(c) not in "\n"),
    "\x7f",
    *(chr(c) for c in range(0x80, 0xA0)),
    "\u200b", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069", "\u061c", "\ufeff",
}  # fmt: skip


def _safetensors(path: Path) -> Path:
    header = {
        "__metadata__": {"key" + EVIL: "value" + EVIL},
        "w\u202etxt.exe": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    }
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))
    return path


def _burnpack(path: Path) -> Path:
    entry = array_entry("w\u202etxt.exe", np.zeros(2, np.float32))
    save_checkpoint(path, [entry], {"key" + EVIL: "value" + EVIL})
    return path


def _pytorch(path: Path) -> Path:
    entries = [
        array_entry("layer" + EVIL + ".weight", np.zeros(2, np.float32)),
        array_entry("plain.bias", np.ones(2, np.float32)),
    ]
    with path.open("wb") as out:
        write_zip(out, entries, {}, {}, prefix="archive")
    return path


BUILDERS = {"safetensors": _safetensors, "burnpack": _burnpack, "pytorch": _pytorch}
EXT = {"safetensors": ".safetensors", "burnpack": ".bpk", "pytorch": ".pt"}


@pytest.fixture(params=sorted(BUILDERS))
def evil_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    fmt: str = request.param
    path = BUILDERS[fmt](tmp_path / f"evil{EXT[fmt]}")
    # Ground truth: the reader really hands the hostile characters to the renderers.
    with open_checkpoint(path) as ckpt:
        text = " ".join([*ckpt, *ckpt.metadata, *map(str, ckpt.metadata.values())])
    assert "\u202e" in text
    assert "\x1b" in text
    return path


def _assert_clean(result: CliResult, where: str) -> None:
    for stream in ("stdout", "stderr"):
        text: str = getattr(result, stream)
        bad = sorted({ch for ch in text if ch in FORBIDDEN})
        assert not bad, f"{where}: raw {[hex(ord(c)) for c in bad]} on {stream}: {text!r}"
    assert "Traceback" not in result.stderr


COMMANDS = [
    ("ls",),
    ("ls", "--json"),
    ("header",),
    ("header", "--json"),
    ("convert", "{src}", "{dst}", "--dry-run"),
    ("convert", "{src}", "{dst}", "--dry-run", "--json"),
    ("remap", "{src}", "{dst}", "--rule", "(.*)=renamed.$1", "--dry-run"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_no_raw_control_or_bidi_characters_reach_the_terminal(
    run_cli, evil_file: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    dst = tmp_path / "out.safetensors"
    args = [a.format(src=evil_file, dst=dst) for a in command]
    if "{src}" not in command:
        args.insert(1, str(evil_file))
    result = run_cli(*args)
    assert result.code in (0, 1, 3, 4), result
    _assert_clean(result, " ".join(args))
    if result.code == 0 and "--json" not in args:
        assert "\\u202e" in result.stdout, "the name should be shown, escaped"
    if "--json" in args and result.code == 0:
        json.loads(result.stdout)  # escaping keeps the JSON valid
    assert not dst.exists()


@pytest.mark.parametrize(
    "path",
    sorted(HOSTILE.glob("*/control_char_name.*")),
    ids=lambda p: p.parent.name,
)
def test_refusals_of_control_character_names_are_escaped(run_cli, path: Path) -> None:
    result = run_cli("ls", path)
    assert result.code == 3
    _assert_clean(result, f"ls {path.name}")
    assert "\\x1b" in result.stderr


def test_error_messages_about_hostile_paths_are_escaped(run_cli, tmp_path: Path) -> None:
    path = tmp_path / ("missing" + EVIL.replace("\r", "") + ".pt")
    result = run_cli("ls", path)
    assert result.code == 3
    _assert_clean(result, "ls <missing file>")
