"""Run the real CLI with its stderr (or stdout) on a pseudo-terminal, as a user at a terminal
sees it: ``ckptctl`` decides on a progress bar, colour and wrapping from ``isatty`` and the
terminal's width, which ``CliRunner`` and pipes never show."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Control sequences (colour, cursor moves, line erase) a terminal acts on without showing.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class TerminalRun:
    """Exit code, stdout (a pipe, or the terminal), and what the terminal received."""

    code: int
    stdout: str
    terminal: str

    def lines(self) -> list[str]:
        """Every line the terminal drew, control sequences removed (a redrawn progress bar
        gives one line per frame)."""
        text = _CONTROL.sub("", self.terminal)
        return [line for line in re.split(r"[\r\n]", text) if line.strip()]

    def bar_lines(self) -> list[str]:
        """The lines that are frames of a progress bar (its bar, or a byte count)."""
        return [line for line in self.lines() if "━" in line or "iB/" in line]


def run_on_terminal(
    *args: str | Path, columns: int = 80, stdout_too: bool = False, timeout: float = 60
) -> TerminalRun:
    """``ckptctl ARGS`` with stderr on a ``columns``-wide pseudo-terminal (stdout too with
    ``stdout_too``; else stdout is a pipe). COLUMNS says the same width; NO_COLOR is unset."""
    import fcntl
    import struct
    import termios

    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm", "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptctl", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=child if stdout_too else subprocess.PIPE,
        stderr=child,
        env=env,
    )
    os.close(child)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else b""))
    reader.start()  # a full stdout pipe must not stall the child while the terminal is read
    received = bytearray()
    while True:
        try:
            data = os.read(main, 1 << 16)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        received += data
    reader.join(timeout)
    if proc.stdout is not None:
        proc.stdout.close()
    code = proc.wait(timeout)
    os.close(main)
    return TerminalRun(code, b"".join(out).decode(), received.decode(errors="replace"))
