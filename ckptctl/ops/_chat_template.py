"""A static scan of a GGUF chat template (``tokenizer.chat_template``) for Jinja constructs that
reach Python's internals when the template is rendered (server-side template injection).

Renderers run the template with Jinja (transformers' ``apply_chat_template``, llama-cpp-python's
``Jinja2ChatFormatter``); a template that walks from a Jinja global or a value to Python objects
(``cycler.__init__.__globals__.os``, ``''.__class__.__mro__[1].__subclasses__()``) runs code on
the machine that renders it. Real templates need none of this: they loop over messages, compare
roles, concatenate strings and make a ``namespace()``. The scan looks only at code (inside
``{{ }}`` and ``{% %}``, strings included, since ``|attr('__class__')`` or ``['__globals__']``
reach attributes by name), never at literal text or ``{# #}`` comments, and names each construct.
No template is parsed or rendered: Jinja is not needed and nothing runs.
"""

from __future__ import annotations

import re

#: (pattern, what the construct is) in the order they are reported.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"__[A-Za-z]\w*?__"), "dunder attribute {0!r}"),
    (re.compile(r"\.\s*_(?!_[A-Za-z]\w*__(?!\w))\w+"), "private attribute {0!r}"),
    (re.compile(r"\bmro\b"), "method resolution order {0!r}"),
    (re.compile(r"\blipsum\b"), "Jinja global {0!r} (its __globals__ reach os)"),
    (
        re.compile(r"\b(?:cycler|joiner|namespace)\s*\.\s*\w+"),
        "internals of a Jinja global {0!r}",
    ),
    (re.compile(r"\bself\s*[.\[]"), "template internals {0!r}"),
    (
        re.compile(r"\b(?:config|request|url_for|get_flashed_messages)\s*[.\[(]"),
        "{0!r} (a web-framework global)",
    ),
    (re.compile(r"\|\s*attr\b"), "the attr filter {0!r} (attributes by computed name)"),
    (re.compile(r"\\(?:x5[fF]|u005[fF]|U0000005[fF]|137)"), "an escaped underscore {0!r}"),
    (re.compile(r"%c"), "character formatting {0!r} (spells hidden names)"),
    (re.compile(r"\{%-?\s*(?:include|import|from|extends)\b"), "template loading {0!r}"),
)

_OPEN = re.compile(r"\{\{|\{%|\{#")


def _code(template: str) -> list[str]:
    """The code of every ``{{ }}`` and ``{% %}`` block, the opener kept; quoted strings in a
    block do not end it. An unclosed block runs to the end of the template."""
    blocks = []
    pos = 0
    while (found := _OPEN.search(template, pos)) is not None:
        opener = found.group()
        if opener == "{#":
            end = template.find("#}", found.end())
            pos = len(template) if end < 0 else end + 2
            continue
        closer = "}}" if opener == "{{" else "%}"
        i, quote = found.end(), ""
        while i < len(template):
            ch = template[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif template.startswith(closer, i):
                break
            i += 1
        blocks.append(template[found.start() : i])
        pos = i + 2
    return blocks


def unsafe_constructs(template: str) -> list[str]:
    """What in ``template``'s code reaches Python internals, each construct named once, in
    order of :data:`_RULES`; empty for a plain template."""
    found: list[str] = []
    code = "\n".join(_code(template))
    for pattern, what in _RULES:
        for match in pattern.finditer(code):
            text = what.format(match.group().strip())
            if text not in found:
                found.append(text)
    return found
