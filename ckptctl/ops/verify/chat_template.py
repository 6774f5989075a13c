"""``chat-template``: GGUF files only, each ``tokenizer.chat_template*`` scanned for Jinja
constructs that reach Python internals (:mod:`ckptctl.ops._chat_template`); a failure makes
the file unsafe."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, more, plural
from ckptctl.report.verify import FileVerdict, Finding, Status

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.ops.verify._check import Subject


def chat_template(subject: Subject) -> Finding | None:
    """The templates' verdict (None: not a GGUF file, or it has no template)."""
    from ckptctl.ops._chat_template import unsafe_constructs

    ckpt = subject.checkpoint
    if ckpt.format != "gguf":
        return None
    metadata = ckpt.metadata
    keys = [k for k in metadata if k.split(".")[:2] == ["tokenizer", "chat_template"]]
    if not keys:
        return None
    bad = {key: found for key in keys if (found := unsafe_constructs(metadata[key]))}
    details: dict[str, JSONValue] = {"templates": keys, "unsafe": dict(bad)}
    if not bad:
        return Finding(
            "chat-template",
            Status.OK,
            f"{plural(len(keys), 'chat template')}: no construct reaches Python internals",
            details=details,
        )
    key, found = next(iter(bad.items()))
    return Finding(
        "chat-template",
        Status.FAIL,
        f"unsafe: {key} reaches Python internals when rendered by Jinja: "
        + ", ".join(found[:MESSAGE_LIMIT])
        + more(len(found)),
        "do not render it (transformers' apply_chat_template, llama-cpp-python's Jinja chat "
        "format); a real chat template needs none of these constructs",
        details=details,
    )


CHECK = Check(
    "chat-template",
    40,
    Phase.CHECKPOINT,
    "A GGUF chat template reaches no Python internals when rendered",
    "tokenizer.chat_template is rendered with Jinja by transformers and llama-cpp-python; a "
    "template that reaches dunder attributes (__globals__, __subclasses__), the internals of "
    "Jinja's globals (cycler, joiner, namespace, lipsum) or the attr filter can run code on "
    "the machine that renders it. Real chat templates need none of these.",
    run=chat_template,
    fails_as=FileVerdict.UNSAFE,
    security_severity="9.8",
)
