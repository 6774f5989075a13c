"""Escape strings taken from files before any renderer sees them.

Tensor names and metadata come from strangers' files. Printed raw, an ANSI escape could rewrite
the terminal, a carriage return could hide text and a right-to-left override could disguise a
name (llama.cpp issue #28969 is the same bug in ``gguf-dump``). Every such character is shown as
a visible escape instead.
"""

from __future__ import annotations

import unicodedata

#: Invisible or reordering characters that are not control characters (category Cf etc.).
_SUSPICIOUS = frozenset(
    "\u200b\u200c\u200d\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
    "\u2066\u2067\u2068\u2069\ufeff\u061c"
)


def sanitize(text: str) -> str:
    """Return ``text`` with control, bidi and invisible characters escaped (``\\x1b``, ``\\u202e``).

    Backslashes are left alone unless they could be confused with an escape we produced; the
    result is for display only.
    """
    if text.isprintable() and not any(ch in _SUSPICIOUS for ch in text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _SUSPICIOUS or unicodedata.category(ch) in (
            "Cc",
            "Cf",
            "Cs",
            "Co",
            "Cn",
            "Zl",
            "Zp",
        ):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
