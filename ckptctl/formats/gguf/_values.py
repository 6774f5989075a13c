"""GGUF key/values as the strings of ``Checkpoint.metadata``.

A string is itself; a number its shortest decimal at its own precision (a FLOAT32 ``0.1`` is
``0.1``, not ``0.10000000149011612``); a bool ``true``/``false``; an array its JSON text,
nested arrays included. A long array also has a summary (its length, item type and first
items), which ``ls`` shows unless asked for whole values.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ckptctl.formats.gguf._ggml import ValueType

if TYPE_CHECKING:
    from ckptctl.formats.gguf._parse import KeyValue
    from ckptctl.model import JSONValue

#: An array whose JSON text is longer than this is summarised.
SUMMARY_CHARS = 120
#: The summary shows first items up to about this many characters (at least one item).
SUMMARY_ITEM_CHARS = 72


def _scalar(kind: ValueType, value: object) -> JSONValue:
    if kind is ValueType.FLOAT32:
        import numpy as np

        return float(str(np.float32(value)))  # type: ignore[arg-type]  # a float from struct
    return value


def _plain(value: object, item_type: ValueType) -> JSONValue:
    """An array's items as JSON-able values (float32 at their shortest decimal)."""
    if isinstance(value, list):
        return list(value)
    import numpy as np

    assert isinstance(value, np.ndarray)
    if item_type is ValueType.FLOAT32:
        return [float(str(x)) for x in value]
    return value.tolist()


def _json(value: JSONValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def metadata_text(kv: KeyValue) -> str:
    """The key/value's value as ``Checkpoint.metadata`` holds it."""
    if kv.type is ValueType.STRING:
        return str(kv.value)
    if kv.type is ValueType.BOOL:
        return "true" if kv.value else "false"
    if kv.type is ValueType.ARRAY:
        assert kv.item_type is not None
        return _json(_nested(kv.value, kv.item_type))
    return str(_scalar(kv.type, kv.value))


def _nested(value: object, item_type: ValueType) -> JSONValue:
    if item_type is not ValueType.ARRAY:
        return _plain(value, item_type)
    assert isinstance(value, list)
    import numpy as np

    out: list[JSONValue] = []
    for item in value:  # an inner array's item type is not kept: infer it from its contents
        if isinstance(item, np.ndarray):
            inner = ValueType.FLOAT32 if item.dtype == np.float32 else ValueType.INT64
            out.append(_plain(item, inner))
        else:
            out.append(_nested(item, ValueType.ARRAY) if _has_arrays(item) else list(item))
    return out


def _has_arrays(item: object) -> bool:
    import numpy as np

    return isinstance(item, list) and any(isinstance(x, (list, np.ndarray)) for x in item)


def summarize(kv: KeyValue) -> str | None:
    """``151936 items (STRING): ["!", "\\"", "#", ...]`` for a long array; None otherwise."""
    if kv.type is not ValueType.ARRAY:
        return None
    assert kv.item_type is not None
    value = kv.value
    count = len(value)  # type: ignore[arg-type]  # a list or an array
    head: list[str] = []
    used = 0
    for item in _nested(value[:8], kv.item_type):  # type: ignore[index]  # a list or an array
        text = _json(item)
        if head and used + len(text) > SUMMARY_ITEM_CHARS:
            break
        head.append(text)
        used += len(text) + 2
    whole = len(head) == count
    if whole and used <= SUMMARY_CHARS:
        return None
    shown = ", ".join(head) + ("" if whole else ", ...")
    return f"{count} items ({kv.item_type.name}): [{shown}]"
