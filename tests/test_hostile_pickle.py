"""Malicious pickles: every one is refused naming the global, and none of them runs.

Each payload would create a marker file if it were executed (``os.system('touch M')``,
``builtins.open(M, 'w')``, ``subprocess.Popen``...). They are built for pickle protocols 0-5 and
for every opcode that reaches ``find_class`` (GLOBAL, STACK_GLOBAL, INST, OBJ, NEWOBJ, REDUCE),
then placed in a ZIP ``.pt``, a legacy stream and a plain pickle. The committed samples in
``fixtures/hostile/pickle/`` are checked the same way.
"""

from __future__ import annotations

import os
import pickle
import subprocess
from pathlib import Path

import pytest

from ckptctl.errors import ExitCode, UnsafePickleError
from ckptctl.formats import open_checkpoint
from tests.formats.test_pytorch_reader import (
    dict_of,
    lit,
    storage_pid,
    tensor_v2,
    write_legacy,
    write_zip,
)

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "pickle"


class _Reduce:
    """Pickles as ``func(*args)``: the classic pickle code-execution payload."""

    def __init__(self, func: object, args: tuple[object, ...]) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (self.func, self.args)


def _payloads(marker: Path) -> list[tuple[str, str, bytes]]:
    """(id, refused global, pickle bytes) for every protocol and opcode form."""
    m = str(marker)
    out: list[tuple[str, str, bytes]] = []
    dumps = pickle.dumps
    for protocol in range(6):
        out.append((f"system-p{protocol}", "system",
                    dumps(_Reduce(os.system, (f"touch {m}",)), protocol=protocol)))  # fmt: skip
        out.append((f"open-p{protocol}", "io.open",
                    pickle.dumps(_Reduce(open, (m, "w")), protocol=protocol)))  # fmt: skip
        out.append((f"popen-p{protocol}", "subprocess.Popen",
                    dumps(_Reduce(subprocess.Popen, (["touch", m],)), protocol)))  # fmt: skip
        code = f"open({m!r}, 'w')"
        out.append((f"exec-p{protocol}", "builtins.exec",
                    pickle.dumps(_Reduce(exec, (code,)), protocol=protocol)))  # fmt: skip
    cmd = f"touch {m}".encode()
    out += [
        ("inst", "os.system", b"(S'" + cmd + b"'\nios\nsystem\n."),
        ("obj", "os.system", b"(cos\nsystem\nS'" + cmd + b"'\no."),
        ("newobj", "subprocess.Popen",
         b"\x80\x02csubprocess\nPopen\n](X" + len(cmd).to_bytes(4, "little") + cmd + b"e\x85\x81."),
        ("stack-global", "posix.system",
         b"\x80\x04\x8c\x05posix\x8c\x06system\x93\x8c" + bytes([len(cmd)]) + cmd + b"\x85R."),
        ("py2-builtin", "builtins.eval", b"c__builtin__\neval\n(S'1'\ntR."),
        ("getattr", "builtins.getattr", b"\x80\x02c__builtin__\ngetattr\n."),
        ("importlib", "importlib.import_module", b"\x80\x02cimportlib\nimport_module\n."),
        ("runpy", "runpy._run_code", b"\x80\x02crunpy\n_run_code\n."),
        ("torch-load", "torch.load", b"\x80\x02ctorch\nload\n."),
    ]  # fmt: skip
    return out


def _ids() -> list[str]:
    return [p[0] for p in _payloads(Path("m"))]


def _check_refused(path: Path, marker: Path, name: str) -> None:
    with pytest.raises(UnsafePickleError) as info:
        open_checkpoint(path)
    assert name in str(info.value)
    assert "unsafe pickle: global '" in str(info.value)
    assert info.value.exit_code == ExitCode.INPUT
    assert not marker.exists(), "a pickled payload was executed"


@pytest.mark.parametrize("index", range(len(_ids())), ids=_ids())
def test_plain_pickle_payload_is_refused(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "PWNED"
    _, name, payload = _payloads(marker)[index]
    path = tmp_path / "evil.pkl"
    path.write_bytes(payload)
    _check_refused(path, marker, name)


@pytest.mark.parametrize("index", range(len(_ids())), ids=_ids())
def test_zip_payload_is_refused_naming_data_pkl(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "PWNED"
    _, name, payload = _payloads(marker)[index]
    path = write_zip(tmp_path / "evil.pt", payload, {})
    _check_refused(path, marker, name)
    with pytest.raises(UnsafePickleError, match=r"in data\.pkl"):
        open_checkpoint(path)


@pytest.mark.parametrize("protocol", range(2, 6))
def test_legacy_stream_payload_is_refused(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "PWNED"
    evil = pickle.dumps(_Reduce(os.system, (f"touch {marker}",)), protocol=protocol)
    # The payload sits beside a real tensor inside the main pickle.
    tensor = tensor_v2(storage_pid("FloatStorage", "1", 1, legacy=True), 0, (1,), (1,))
    body = dict_of([(lit("w"), tensor), (lit("evil"), evil[2:-1] if protocol == 2 else b"N")])
    if protocol > 2:  # splice a protocol-4/5 framed payload as the whole main pickle instead
        body = evil[2:-1]
    path = write_legacy(tmp_path / "evil.pt", body, [("1", 1, b"\0\0\0\0")])
    _check_refused(path, marker, "system")


def test_payload_nested_in_a_tensor_rebuild_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    # A hooks argument that is really a call to os.system: refused before anything is called.
    evil = b"cos\nsystem\n(" + lit(f"touch {marker}") + b"tR"
    t = tensor_v2(storage_pid("FloatStorage", "0", 1), 0, (1,), (1,))
    t = t.replace(b"ccollections\nOrderedDict\n)R", evil)
    path = write_zip(tmp_path / "evil.pt", b"\x80\x02" + dict_of([(lit("w"), t)]) + b".",
                     {"0": b"\0\0\0\0"})  # fmt: skip
    _check_refused(path, marker, "os.system")


def test_unknown_classes_become_inert_stubs(tmp_path: Path) -> None:
    # A user class is never imported: a class that would run code in __setstate__ is recorded.
    payload = b"\x80\x02cmy_evil_module\nExploit\n)\x81}X\x01\x00\x00\x00aK\x01sb."
    path = tmp_path / "stub.pkl"
    path.write_bytes(payload)
    with open_checkpoint(path) as ckpt:
        assert ckpt.kind == "empty"
    assert "my_evil_module" not in __import__("sys").modules


HOSTILE_FILES = sorted(p for p in HOSTILE.glob("*__*")) if HOSTILE.is_dir() else []


@pytest.mark.parametrize("path", HOSTILE_FILES, ids=[p.name for p in HOSTILE_FILES])
def test_committed_hostile_samples(path: Path) -> None:
    # File names are "<global>__<container>.<ext>"; payloads touch /tmp/ckptctl-pwned-<name>.
    marker = Path("/tmp") / f"ckptctl-pwned-{path.stem}"
    name = path.name.split("__")[0]
    _check_refused(path, marker, name)
