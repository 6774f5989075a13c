"""How many tensor bytes ``convert`` may write and ``diff`` may compare (issue 25).

A view expanded with stride 0 makes a 1 KB ``.pt`` describe a 1 GiB or 4 TiB tensor. Real
conversions and comparisons touch about what the inputs hold (a cast to f32 at most quadruples
FP8), so both commands refuse more than ``max(DEFAULT_MAX_BYTES, MAX_RATIO * the inputs' size)``
unless the user raises the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import UnsupportedError
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    import os

DEFAULT_MAX_BYTES = 1 << 30
MAX_RATIO = 64


def size_limit(input_bytes: int, given: int | None = None) -> int:
    """The most tensor bytes allowed for inputs of ``input_bytes`` (``given`` when set)."""
    if given is not None:
        return given
    return max(DEFAULT_MAX_BYTES, MAX_RATIO * input_bytes)


def check_size(
    total: int,
    input_bytes: int,
    given: int | None,
    *,
    path: str | os.PathLike[str],
    doing: str,
    inputs: str,
    wanted: str,
    option: str,
) -> None:
    """Refuse ``total`` tensor bytes over the limit, naming the limit and the option raising it.

    Args:
        doing: what would happen, before the byte count ("comparing it would read").
        inputs: whose size the default scales with ("the input's").
        wanted: what the user may want anyway ("output").
        option: the library option that raises the limit (``max_output_bytes``).

    Raises:
        UnsupportedError: ``total`` is over the limit.
    """
    limit = size_limit(input_bytes, given)
    if total <= limit:
        return
    why = (
        "the limit given"
        if given is not None
        else f"the default: max({DEFAULT_MAX_BYTES}, {MAX_RATIO} x {inputs} {input_bytes} bytes)"
    )
    raise UnsupportedError(
        f"{doing} {total} bytes of tensors, more than the limit of {limit} bytes ({why})",
        path=path,
        hint=Note(
            "expanded views (stride 0) describe far more elements than the input stores; "
            f"if this {wanted} is wanted, raise the limit with {{fix0}}",
            (Option(option, takes_value=True),),
        ),
    )
