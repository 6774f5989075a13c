"""Key remapping like Burn's ``KeyRemapper``, in Rust ``regex`` dialect.

Burn's behaviour: docs/formats/burn-store.md#key-remapping.

A rule is ``PATTERN=REPLACEMENT``. Every rule is applied, in order, to the result of the previous
one; each replaces **all** non-overlapping matches found by an unanchored search.

Splitting ``PATTERN=REPLACEMENT``: the split is at the first ``=`` that is neither escaped
(``\\=``) nor inside a character class (``[=]``); write ``\\=`` to put an ``=`` in a pattern.
The replacement may contain ``=`` freely.

Patterns are Rust ``regex`` syntax, translated to Python ``re`` where the two differ:

* ``(?<name>...)`` becomes ``(?P<name>...)``; ``$`` (outside the ``m`` flag, set first or in a
  scoped group) and ``\\z`` become ``\\Z`` (Python's ``$`` also matches before a final newline);
  ``\\x{HHHH}`` becomes ``\\U``; ``[[:alpha:]]``-style ASCII classes are expanded, and
  ``[[:^alpha:]]`` when it is the class's only item; ``|`` in a class is escaped; ``\\w``,
  ``\\d``, ``\\s``, ``\\b``, ``\\B`` use Rust's Unicode tables (``_rust_classes``); the ``x`` flag's
  whitespace and comments are dropped, in classes too.
* Syntax Rust rejects but Python accepts is refused with a :class:`SelectionError`, so a rule
  never means something Burn would not run: look-around, back-references (``\\1``, ``(?P=n)``),
  atomic groups, conditionals, comments, ``\\Z``, ``\\G``, ``\\x{..}`` that is not a Unicode
  scalar value, and a bare ``{`` that does not start a repetition.
* Syntax Rust accepts but Python cannot express is refused too, saying so: ``\\p{..}`` Unicode
  classes, nested classes and class set operations, ``\\<``, ``\\>`` and ``\\b{..}`` word
  boundaries, the ``U`` and ``R`` flags, flags set mid-pattern, and a repetition of a repetition
  (``a*+`` is ``(a*)+`` in Rust but possessive in Python).
* Known difference: under the ``i`` flag Python also matches U+0130 and U+0131 (Turkish I) to
  ``i`` and ``I``; Rust's simple case folding does not.
* In replace-all, an empty match right where the previous match ended is skipped, as in Rust
  (``x*`` -> ``-`` on ``abxd`` gives ``-a-b-d-``, not Python's ``-a-b--d-``).

Replacements use Rust interpolation, never Python's: ``$1``, ``${1}``, ``$name``,
``${name}``, ``$$`` for a literal ``$``. ``$name`` takes the longest run of ``[0-9A-Za-z_]``, so
``$1_x`` names the group ``1_x`` -- write ``${1}_x``. :func:`expand_replacement` follows Rust:
unknown or non-participating groups expand to nothing, backslashes are literal. A
:class:`RemapRule` refuses what would only do that by mistake (:func:`check_replacement`): a
group the pattern does not have, ``\\1``-style groups and other backslashes.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters._rust_classes import DIGIT, SPACE, WORD
from ckptctl.errors import SelectionError, quote

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from ckptctl.model import TensorEntry

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7F",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1F\\x7F",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_NOT_RUST_SPACE = frozenset("\x1c\x1d\x1e\x1f")  # str.isspace() says yes, Rust's White_Space no
# \w \d \s by Rust's Unicode tables: Python's own \w misses combining marks, \s takes
# U+001C-U+001F, \d follows an older Unicode
_PERL = {"w": WORD, "d": DIGIT, "s": SPACE}
_WORD = f"[{WORD}]"
_BOUNDARY = {
    "b": f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))",
    "B": f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))",
}
_REPETITION = re.compile(r"\{\d+(,\d*)?\}")
_FLAGS = re.compile(r"\(\?([a-zA-Z-]*)([:)])")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_CAP_LETTERS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def _reject(pattern: str, what: str, why: str) -> SelectionError:
    """Syntax Rust's regex refuses (Burn would not run the rule) but Python's ``re`` accepts."""
    return SelectionError(
        f"{what}: pattern {quote(pattern)} uses {why}, which Rust regex (Burn) does not support"
    )


def _untranslatable(
    pattern: str, what: str, why: str, hint: str = "rewrite the rule without it"
) -> SelectionError:
    """Syntax Rust's regex accepts that Python's ``re`` cannot express (or means otherwise)."""
    return SelectionError(
        f"{what}: pattern {quote(pattern)} uses {why}: Rust regex (Burn) accepts it, but ckptctl "
        "cannot translate it to Python",
        hint=hint,
    )


def _skip_verbose(pattern: str, i: int) -> int:
    """Past the whitespace and ``#`` comments at ``pattern[i]``, which Rust's ``x`` flag ignores
    everywhere, in classes too (Python's verbose mode keeps them in classes)."""
    while i < len(pattern):
        c = pattern[i]
        if c == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end + 1
        elif c.isspace() and c not in _NOT_RUST_SPACE:
            i += 1
        else:
            break
    return i


def _class_open(pattern: str, i: int, verbose: bool) -> tuple[str, int]:
    """The opening of the class at ``pattern[i] == '['`` as Python text, and the index after it.

    As Rust reads it: ``[`` and an optional ``^``; a ``]`` right after them is a literal, not the
    end; under the ``x`` flag (``verbose``) whitespace and comments before each are skipped.
    """
    text = "["
    i = _skip_verbose(pattern, i + 1) if verbose else i + 1
    if pattern.startswith("^", i):
        text += "^"
        i = _skip_verbose(pattern, i + 1) if verbose else i + 1
    if pattern.startswith("]", i):
        text += "\\]"
        i += 1
    return text, i


def _class_end(pattern: str, i: int, verbose: bool) -> int:
    """Index past the ``]`` that closes the class opening at ``pattern[i]``, or -1.

    Nesting as Rust's parser does: ``[`` opens a nested class (see :func:`_class_open`), ``\\``
    escapes one character; with ``verbose`` (the ``x`` flag), whitespace and comments are
    skipped first. An ASCII class such as ``[:alpha:]`` nests like a
    class (it holds no brackets), so it needs no case of its own.
    """
    depth = 0
    while i < len(pattern):
        c = pattern[i]
        if verbose and (c == "#" or c.isspace()) and (j := _skip_verbose(pattern, i)) > i:
            i = j
            continue
        if c == "[":
            depth += 1
            _, i = _class_open(pattern, i, verbose)
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "\\":
            i += 1
        i += 1
    return -1


def _translate_class(pattern: str, i: int, what: str, verbose: bool) -> tuple[str, int]:
    """Translate a character class starting at ``pattern[i] == '['``; return (text, next i)."""
    if _class_end(pattern, i, verbose) < 0:  # Rust refuses it, whatever is inside
        raise SelectionError(
            f"{what}: pattern {quote(pattern)} has an unterminated character class"
        )
    skip = _skip_verbose if verbose else lambda _, at: at
    opening, i = _class_open(pattern, i, verbose)
    out = [opening]
    while True:  # _class_end found the closing ']'
        i = skip(pattern, i)
        c = pattern[i]
        if c == "]":
            out.append("]")
            return "".join(out), i + 1
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in ("p", "P"):
                raise _untranslatable(pattern, what, "Unicode classes (\\p)")
            if nxt.isdigit():
                raise _reject(pattern, what, f"the escape \\{nxt} in a class")
            if nxt == "x" and pattern[i + 2 : i + 3] == "{":
                text, i = _hex_escape(pattern, i, what)
                out.append(text)
                continue
            if nxt.lower() in _PERL and nxt.isupper():
                return _negated_item(pattern, out, _PERL[nxt.lower()], i + 2, what, f"\\{nxt}")
            out.append(_PERL.get(nxt, pattern[i : i + 2]))
            i += 2
            continue
        if c == "[":
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2 : end] if end > 0 else ""
                if name in _POSIX_CLASSES:
                    out.append(_POSIX_CLASSES[name])
                    i = end + 2
                    continue
                if name[1:] in _POSIX_CLASSES and name.startswith("^"):
                    body, shown = _POSIX_CLASSES[name[1:]], f"[:{name}:]"
                    return _negated_item(pattern, out, body, end + 2, what, shown)
            raise _untranslatable(pattern, what, "nested character classes")
        if pattern.startswith(("&&", "--", "~~"), i):
            raise _untranslatable(pattern, what, f"the class set operation {pattern[i : i + 2]!r}")
        out.append("\\|" if c == "|" else c)  # Python reads '||' in a class as a set union
        i += 1


def _negated_item(
    pattern: str, out: list[str], body: str, i: int, what: str, shown: str
) -> tuple[str, int]:
    """A negated class inside a class (``[[:^alpha:]]``, ``[\\W]``): fine as the only item, as
    ``[^body]`` (or ``[body]`` in a negated class); ``pattern[i]`` follows it."""
    if out in (["["], ["[^"]) and pattern.startswith("]", i):
        return ("[" if out == ["[^"] else "[^") + body + "]", i + 1
    alone = f"[{shown}]" if shown.startswith("[") else shown
    raise _untranslatable(
        pattern,
        what,
        f"the negated class {shown} beside other items",
        hint=f"give it a class of its own, e.g. ({alone}|[ab]) for [ab{shown}]",
    )


def _hex_escape(pattern: str, i: int, what: str) -> tuple[str, int]:
    """``\\x{HHHH}`` at ``pattern[i]`` -> Python ``\\UHHHHHHHH``.

    Like Rust: hex digits only (no sign, ``0x`` or ``_``), a Unicode scalar value (at most
    ``10FFFF``, not a surrogate).
    """
    end = pattern.find("}", i + 3)
    if end < 0:
        raise SelectionError(f"{what}: pattern {quote(pattern)} has an escape \\x{{ without a '}}'")
    digits = pattern[i + 3 : end]
    if not digits or not all(d in _HEX_DIGITS for d in digits):
        why = "hex digits only"
    elif not 0 <= (code := int(digits, 16)) <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        why = "not a Unicode scalar value (at most 10FFFF, not a surrogate D800-DFFF)"
    else:
        return f"\\U{code:08X}", end + 1
    raise SelectionError(
        f"{what}: pattern {quote(pattern)} has a bad escape \\x{{{digits}}}: {why}"
    )


def translate_pattern(pattern: str, what: str = "rule") -> str:
    """Translate a Rust ``regex`` pattern to an equivalent Python ``re`` pattern.

    Args:
        pattern: the pattern in Rust syntax.
        what: names the rule in error messages (``rule #2``).

    Returns:
        A Python pattern with the same meaning.

    Raises:
        SelectionError: the pattern uses syntax Rust rejects or Python cannot express.
    """
    return _Translator(pattern, what).run()


class _Translator:
    """One pass over a pattern, token by token: each ``_token`` method appends the Python
    spelling of the token at ``i`` to ``out``, moves ``i`` past it and returns the repetition
    state after it ("open" after a repetition, where a lazy '?' may follow; "lazy" after that
    '?'; else "")."""

    def __init__(self, pattern: str, what: str) -> None:
        self.pattern = pattern
        self.what = what
        # the m and x flags where we are (set first in the pattern, or by a scoped group), and
        # their values outside each open group
        self.multiline = self.verbose = False
        self.outer: list[tuple[bool, bool]] = []
        self.out: list[str] = []
        self.i = 0

    def run(self) -> str:
        pattern = self.pattern
        repeat = ""
        while self.i < len(pattern):
            c = pattern[self.i]
            if self.verbose and (c == "#" or c.isspace()):
                j = _skip_verbose(pattern, self.i)
                if j > self.i:
                    self.i = j  # 'a *' is 'a*' under the x flag: a repetition may follow
                    continue
            repeat = self._token(c, repeat)
        return "".join(self.out)

    def _token(self, c: str, repeat: str) -> str:
        if c == "\\":
            self._escape()
        elif c == "[":
            text, self.i = _translate_class(self.pattern, self.i, self.what, self.verbose)
            self.out.append(text)
        elif c == "(" and self.pattern.startswith("(?", self.i):
            self._special_group()
        elif c in "()":
            if c == "(":
                self.outer.append((self.multiline, self.verbose))
            elif self.outer:  # an unbalanced ')' is left to re.compile to refuse
                self.multiline, self.verbose = self.outer.pop()
            self.out.append(c)
            self.i += 1
        elif c == "$":
            self.out.append("$" if self.multiline else "\\Z")
            self.i += 1
        elif c in "*+?{":
            return self._repetition(c, repeat)
        else:
            self.out.append(c)
            self.i += 1
        return ""

    def _escape(self) -> None:
        pattern, what, i = self.pattern, self.what, self.i
        nxt = pattern[i + 1 : i + 2]
        if not nxt:
            raise SelectionError(f"{what}: pattern {quote(pattern)} ends with a backslash")
        if nxt.isdigit():
            raise _reject(pattern, what, f"the back-reference \\{nxt}")
        if nxt in "pP":
            raise _untranslatable(pattern, what, "Unicode classes (\\p)")
        if nxt in "gkZG":
            raise _reject(pattern, what, f"the escape \\{nxt}")
        if nxt in "<>":
            raise _untranslatable(pattern, what, f"the word boundary \\{nxt}")
        braced = pattern[i + 2 : i + 3] == "{"
        if nxt == "x" and braced:
            text, self.i = _hex_escape(pattern, i, what)
            self.out.append(text)
            return
        if nxt == "b" and braced:
            raise _untranslatable(pattern, what, "\\b{...} word boundaries")
        if nxt == "z":
            self.out.append("\\Z")
        elif nxt.lower() in _PERL:
            self.out.append(("[" if nxt.islower() else "[^") + _PERL[nxt.lower()] + "]")
        elif nxt in "bB" and not braced:
            self.out.append(_BOUNDARY[nxt])
        else:
            self.out.append(pattern[i : i + 2])
        self.i += 2

    def _special_group(self) -> None:
        """``(?`` at ``i``: a named group, or flags (scoped, or for the whole pattern)."""
        pattern, what, i = self.pattern, self.what, self.i
        rest = pattern[i + 2 :]
        if rest.startswith(("=", "!", "<=", "<!", ">", "(", "#", "P=", "P>")):
            raise _reject(pattern, what, "look-around, back-references or special groups")
        self.outer.append((self.multiline, self.verbose))
        if rest.startswith("<"):
            self.out.append("(?P<")
            self.i += 3
        elif rest.startswith("P<"):
            self.out.append("(?P<")
            self.i += 4
        else:
            self._flags()

    def _flags(self) -> None:
        pattern, what, i = self.pattern, self.what, self.i
        m = _FLAGS.match(pattern, i)
        if m is None:
            raise SelectionError(f"{what}: pattern {quote(pattern)} has a bad group at {i}")
        on, _, off = m.group(1).partition("-")
        if "U" in m.group(1) or "R" in m.group(1) or "u" in off:
            raise _untranslatable(pattern, what, f"the flags {m.group(1)!r}")
        if m.group(2) == ")" and i != 0:
            raise _untranslatable(
                pattern,
                what,
                "flags set in the middle of the pattern",
                hint="use a scoped group such as (?i:...) or put the flags first",
            )
        self.multiline = "m" in on or (self.multiline and "m" not in off)
        self.verbose = "x" in on or (self.verbose and "x" not in off)
        if m.group(2) == ")":  # flags for the whole pattern: no group opened
            self.outer.pop()
        self.out.append(m.group(0))
        self.i = m.end()

    def _repetition(self, c: str, repeat: str) -> str:
        pattern, what = self.pattern, self.what
        text = c
        if c == "{":
            m = _REPETITION.match(pattern, self.i)
            if m is None:
                raise SelectionError(
                    f"{what}: pattern {quote(pattern)} has a '{{' that does not start a repetition",
                    hint="escape a literal brace as \\{",
                )
            text = m.group(0)
        if repeat == "open" and text == "?":
            after = "lazy"  # '*?': the '?' makes the repetition lazy and ends it
        elif repeat:  # Rust repeats the repetition; Python refuses it, or reads '*+' otherwise
            raise _untranslatable(
                pattern,
                what,
                "a repetition of a repetition",
                hint="group the inner repetition, e.g. (?:a*)+ for a*+",
            )
        else:
            after = "open"
        self.out.append(text)
        self.i += len(text)
        return after


def compile_pattern(pattern: str, what: str = "rule") -> re.Pattern[str]:
    """Compile a Rust-dialect pattern (see :func:`translate_pattern`).

    Raises:
        SelectionError: invalid pattern; the message names ``what`` and the pattern.
    """
    translated = translate_pattern(pattern, what)
    with warnings.catch_warnings():
        # Python warns (FutureWarning) on syntax whose meaning will change; refuse it
        warnings.simplefilter("error")
        try:
            return re.compile(translated)
        except (re.error, Warning) as exc:
            raise SelectionError(f"{what}: invalid pattern {quote(pattern)}: {exc}") from None


def _interpolate(template: str) -> Iterator[tuple[bool, str]]:
    """The pieces of a Rust-style replacement: ``(False, text)`` for literal text,
    ``(True, ref)`` for a group reference (``$1``, ``${1}``, ``$name``, ``${name}``)."""
    i = 0
    n = len(template)
    while i < n:
        dollar = template.find("$", i)
        if dollar < 0:
            yield False, template[i:]
            break
        yield False, template[i:dollar]
        i = dollar + 1
        if template.startswith("$", i):
            yield False, "$"
            i += 1
            continue
        if template.startswith("{", i):
            close = template.find("}", i + 1)
            if close < 0:  # no closing brace: not a reference, the '$' is literal
                yield False, "$"
                continue
            ref = template[i + 1 : close]
            i = close + 1
        else:
            end = i
            while end < n and template[end] in _CAP_LETTERS:
                end += 1
            if end == i:
                yield False, "$"
                continue
            ref = template[i:end]
            i = end
        yield True, ref


def expand_replacement(template: str, match: re.Match[str]) -> str:
    """Expand a Rust-style replacement (``$1``, ``${name}``, ``$$``) for one match."""
    return "".join(_group(match, piece) if ref else piece for ref, piece in _interpolate(template))


def _group(match: re.Match[str], ref: str) -> str:
    key: int | str = int(ref) if ref.isascii() and ref.isdigit() else ref
    try:
        value = match.group(key)
    except IndexError:  # unknown group number or name: Rust expands it to nothing
        return ""
    return value or ""


def replace_all(regex: re.Pattern[str], text: str, template: str) -> str:
    """Rust ``Regex::replace_all``, match by match as Rust's iterator finds them.

    Each search starts where the last match ended. An empty match right there is not reported:
    Rust searches again one character later (``x*`` on ``abxd`` gives ``-a-b-d-``), where
    Python's ``finditer`` would report it, or retry at the same place for a longer match
    (``a*?`` on ``aa``: Rust ``-a-a-``, Python ``---``).
    """
    out: list[str] = []
    last = 0  # end of the last match reported
    reported = False
    pos = 0
    while pos <= len(text) and (match := regex.search(text, pos)) is not None:
        start, end = match.span()
        if start == end == last and reported:
            pos = end + 1
            continue
        out.append(text[last:start])
        out.append(expand_replacement(template, match))
        last = pos = end
        reported = True
    out.append(text[last:])
    return "".join(out)


_PYTHON_GROUP = re.compile(r"\\([0-9]+)|\\g<([^>]*)>")


def _has_group(regex: re.Pattern[str], ref: str) -> bool:
    if ref.isascii() and ref.isdigit():
        return int(ref) <= regex.groups
    return ref in regex.groupindex


def _groups_text(regex: re.Pattern[str]) -> str:
    if not regex.groups:
        return "the pattern has no groups: put ( ) around what to keep"
    names = "".join(f", ${{{name}}}" for name in regex.groupindex)
    numbered = "$1" if regex.groups == 1 else f"$1 to ${regex.groups}"
    return f"the pattern's groups are {numbered}{names}"


def check_replacement(template: str, regex: re.Pattern[str], what: str) -> None:
    """Refuse a replacement that cannot mean what its author meant.

    Burn would run these, but never to a useful name: Python-style groups (``\\1``,
    ``\\g<1>``) and other backslashes are literal text, and a group the pattern does not have
    expands to nothing (``$1_`` is the group ``1_``, as in Rust, not ``$1`` then ``_``).

    Raises:
        SelectionError: naming the problem, with the replacement written right as the hint.
    """
    python = _PYTHON_GROUP.search(template)
    if python is not None:
        fixed = _PYTHON_GROUP.sub(lambda m: "${" + (m.group(1) or m.group(2)) + "}", template)
        raise SelectionError(
            f"{what}: the replacement writes a group as '{python.group()}', Python's syntax; "
            "Burn would write it literally, and no tensor name wants a backslash",
            hint=f"groups are written $1 or ${{name}} in a replacement, not \\1: {fixed!r}",
        )
    if "\\" in template:
        raise SelectionError(
            f"{what}: the replacement has a backslash, which Burn writes literally "
            "(a replacement is plain text apart from its $ groups)",
            hint="no tensor name wants a backslash: write '.' for a dot in a replacement",
        )
    for is_ref, ref in _interpolate(template):
        if not is_ref or _has_group(regex, ref):
            continue
        prefix = next(
            (ref[:k] for k in range(len(ref) - 1, 0, -1) if _has_group(regex, ref[:k])), None
        )
        if prefix is not None:
            hint = (
                f"write ${{{prefix}}}{ref[len(prefix) :]} for group {prefix} followed by "
                f"{ref[len(prefix) :]!r}: $name takes every letter, digit and _ after the $"
            )
        else:
            hint = _groups_text(regex)
        raise SelectionError(
            f"{what}: the replacement names the group {ref!r}, which the pattern does not "
            "have (it would insert nothing)",
            hint=hint + "; $$ writes a literal $",
        )


def split_rule(text: str) -> tuple[str, str]:
    """Split ``PATTERN=REPLACEMENT`` at the first ``=`` not escaped and not inside ``[...]``.

    Raises:
        SelectionError: there is no such ``=``.
    """
    i = 0
    in_class = False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # a ']' right after '[' or '[^' is a literal, not the end of the class
            if text.startswith("]", i + 1):
                i += 1
            elif text.startswith("^]", i + 1):
                i += 2
        elif c == "=":
            return text[:i], text[i + 1 :]
        i += 1
    raise SelectionError(
        f"remap rule {quote(text)} has no '='", hint="write rules as PATTERN=REPLACEMENT"
    )


@dataclass(frozen=True)
class RemapRule:
    """One ordered rule: a Rust-dialect regex and a Rust-style replacement.

    Attributes:
        pattern: the regex as the user wrote it.
        replacement: the replacement template (``$1``, ``${name}``, ``$$``).
        number: 1-based position in the rule list, for messages.
    """

    pattern: str
    replacement: str
    number: int = 1
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.pattern:
            raise SelectionError(
                f"remap rule #{self.number} has an empty pattern",
                hint="an empty pattern matches between every character; anchor it with ^",
            )
        object.__setattr__(self, "regex", compile_pattern(self.pattern, self.label))
        check_replacement(self.replacement, self.regex, self.label)

    @property
    def label(self) -> str:
        """``rule #2 '^model\\.='`` for messages and plans."""
        return f"rule #{self.number} '{self.pattern}={self.replacement}'"

    def apply(self, name: str) -> str:
        """Rewrite ``name`` (replace-all; unchanged when the pattern does not match)."""
        return replace_all(self.regex, name, self.replacement)


def parse_rules(texts: Sequence[str]) -> tuple[RemapRule, ...]:
    """Parse ``PATTERN=REPLACEMENT`` strings into numbered rules.

    Raises:
        SelectionError: a rule without ``=`` or with an invalid pattern (named by number).
    """
    rules = []
    for number, text in enumerate(texts, start=1):
        try:
            pattern, replacement = split_rule(text)
        except SelectionError as exc:
            raise SelectionError(f"rule #{number}: {exc.message}", hint=exc.hint) from None
        rules.append(RemapRule(pattern, replacement, number))
    return tuple(rules)


def remap_name(name: str, rules: Iterable[RemapRule]) -> tuple[str, tuple[RemapRule, ...]]:
    """Apply every rule in order, each to the previous result.

    Returns:
        The new name and the rules that changed it.
    """
    fired = []
    for rule in rules:
        new = rule.apply(name)
        if new != name:
            fired.append(rule)
            name = new
    return name, tuple(fired)


def unmatched_rules(names: Sequence[str], rules: Sequence[RemapRule]) -> list[RemapRule]:
    """The rules that match none of ``names`` at their turn (each rule sees the earlier ones'
    output, as :func:`remap_name` applies them)."""
    out = []
    current = list(names)
    for rule in rules:
        if not any(rule.regex.search(n) for n in current):
            out.append(rule)
        current = [rule.apply(n) for n in current]
    return out


@dataclass(frozen=True)
class Rename(BaseAdapter):
    """Adapter renaming tensors with ordered remap rules (Burn's ``KeyRemapper``).

    Collisions between renamed tensors are detected by :func:`ckptctl.adapters.plan` (an
    adapter sees one entry at a time).
    """

    rules: tuple[RemapRule, ...]

    @classmethod
    def parse(cls, texts: Sequence[str]) -> Rename:
        """Build from ``PATTERN=REPLACEMENT`` strings (see :func:`parse_rules`)."""
        return cls(parse_rules(texts))

    def apply(self, entry: TensorEntry) -> Adapted:
        new, fired = remap_name(entry.name, self.rules)
        if not fired:
            return entry, ()
        reason = ", ".join(rule.label for rule in fired)
        if "" in new.split("."):
            reason += " (warning: the new name has an empty segment)"
        action = Action(ActionKind.RENAME, f"{entry.name} -> {new}", reason, self.describe())
        return replace(entry, name=new), (action,)

    def describe(self) -> str:
        return "remap " + "; ".join(f"{r.pattern}={r.replacement}" for r in self.rules)
