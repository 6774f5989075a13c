"""What ``verify --print-safe-globals`` prints: the globals torch must be told to trust (types).

The code is made here, from the names alone, so text and JSON carry the same snippet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SafeGlobalsReport:
    """The globals that ``torch.load(..., weights_only=True)`` needs allowed for ``files``.

    Attributes:
        files: the files looked at, in order.
        globals: ``module.qualname`` as the files' pickles name them, first use first.
    """

    files: tuple[str, ...]
    globals: tuple[str, ...]

    def code(self) -> str:
        """Python that allows them: ``import`` lines, then one ``add_safe_globals`` call.

        Each entry is ``(object, "name")``: torch matches the name the pickle uses, which can
        differ from the object's ``__module__`` (numpy 2 pickles still say ``numpy.core``).
        The module is everything before the last dot (a nested class ``m.Outer.Inner`` is
        imported as module ``m.Outer``, which fails; allow ``m.Outer`` by hand then). With
        ``numpy.dtype`` the classes of ``numpy.dtypes`` are allowed too: torch's loader checks
        the class of each dtype object the pickle builds, and no pickle names it.
        """
        if not self.globals:
            return (
                "# torch.load(weights_only=True) loads these files as they are: nothing to allow\n"
            )
        modules = {name.rpartition(".")[0] for name in self.globals} - {""}
        dtypes = "numpy.dtype" in self.globals
        if dtypes:
            modules.add("numpy.dtypes")
        lines = ["import torch", *(f"import {m}" for m in sorted(modules) if m != "torch"), ""]
        lines.append("torch.serialization.add_safe_globals([")
        lines += [f"    ({name}, {name!r})," for name in self.globals]
        if dtypes:
            lines += [
                "    # torch also checks the class of each numpy dtype the pickle builds",
                "    # (numpy.dtypes.Float32DType ...), which the pickle does not name",
                "    *(getattr(numpy.dtypes, n) for n in numpy.dtypes.__all__),",
            ]
        lines.append("])")
        return "\n".join(lines) + "\n"
