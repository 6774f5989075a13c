"""Which pickle globals are safe, need trust or are unsafe.

See ``docs/formats/pytorch.md#safety``.

:data:`WEIGHTS_ONLY_GLOBALS` is torch 2.13's weights-only allowlist; :func:`classify` judges a
global outside it:

1. a dotted name (protocol 4 attribute chains such as ``builtins`` / ``eval.__call__``): unsafe;
2. on the published dangerous lists (``_denylist.py``): unsafe, unless it is on a list of
   globals known to rebuild plain data (``uuid.UUID``, numpy's array reconstructors);
3. standard library: unsafe when the pickle calls it (``timeit.timeit``,
   ``logging.FileHandler``), needs-trust when only named;
4. any other module: a called function (a lower-case name that is not a known reconstructor)
   is unsafe, a class (CapWords) or an uncalled name needs trust.
"""

from __future__ import annotations

import _compat_pickle
import sys

from ckptctl.formats.pytorch._denylist import DANGEROUS_GLOBALS, DANGEROUS_MODULES
from ckptctl.safety import Verdict

# --- torch 2.13's weights-only allowlist (torch/_weights_only_unpickler.py, _get_allowed_globals)

_STORAGE_NAMES = (
    "BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double", "Float",
    "Half", "Int", "Long", "QInt32", "QInt8", "QUInt2x4", "QUInt4x2", "QUInt8", "Short",
)  # fmt: skip
_TENSOR_NAMES = ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long",
                 "Short")  # fmt: skip
_SPARSE_NAMES = ("BFloat16", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
_DTYPE_NAMES = (
    "bfloat16", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "complex128",
    "complex32", "complex64", "float16", "float32", "float4_e2m1fn_x2", "float64",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "int16", "int32", "int64", "int8", "qint32", "qint8", "quint2x4", "quint4x2", "quint8",
    "uint16", "uint32", "uint64", "uint8", *(f"uint{n}" for n in range(1, 8)),
    *(f"int{n}" for n in range(1, 8)),
    "per_channel_affine", "per_channel_affine_float_qparams", "per_channel_symmetric",
    "per_tensor_affine", "per_tensor_symmetric",
)  # fmt: skip
_REBUILD_NAMES = (
    "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy",
    "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_wrapper_subclass",
)  # fmt: skip

#: Every global torch 2.13 ``torch.load(weights_only=True)`` accepts by default (144 names).
WEIGHTS_ONLY_GLOBALS = frozenset(
    {
        "_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set",
        "collections.Counter", "collections.OrderedDict", "torch.Size", "torch.Tensor",
        "torch.device", "torch.nn.parameter.Parameter", "torch.serialization._get_layout",
        "torch._tensor._rebuild_from_type_v2", "torch.storage.TypedStorage",
        "torch.storage.UntypedStorage",
        *(f"torch.{n}Storage" for n in _STORAGE_NAMES),
        *(f"torch.cuda.{n}Storage" for n in _STORAGE_NAMES if not n.startswith("Q")),
        *(f"torch.{n}Tensor" for n in _TENSOR_NAMES),
        *(f"torch.cuda.{n}Tensor" for n in _TENSOR_NAMES),
        *(f"torch.sparse.{n}Tensor" for n in _SPARSE_NAMES),
        *(f"torch.cuda.sparse.{n}Tensor" for n in _SPARSE_NAMES),
        *(f"torch.{n}" for n in _DTYPE_NAMES),
        *(f"torch._utils.{n}" for n in _REBUILD_NAMES),
    }
)  # fmt: skip
#: Allowlisted globals torch's unpickler maps to something that is not a class: functions, dtype
#: objects, and the legacy typed storages (``torch/serialization.py``: ``StorageType(name)``
#: instances, in ``_get_allowed_globals`` and in both ``find_class`` overrides of ``_load``).
#: NEWOBJ on one fails in ``cls.__new__(cls, *args)`` (weights-only) or with "NEWOBJ class
#: argument must be a type" (``_pickle.c``), so torch refuses the file however it is loaded.
WEIGHTS_ONLY_NON_CLASSES = frozenset(
    {
        "_codecs.encode", "torch.serialization._get_layout", "torch._tensor._rebuild_from_type_v2",
        *(f"torch.{n}Storage" for n in _STORAGE_NAMES),
        *(f"torch.cuda.{n}Storage" for n in _STORAGE_NAMES if not n.startswith("Q")),
        *(f"torch.{n}" for n in _DTYPE_NAMES),
        *(f"torch._utils.{n}" for n in _REBUILD_NAMES),
    }
)  # fmt: skip
#: Of those, the ones that cannot even be called (REDUCE fails: "object is not callable").
WEIGHTS_ONLY_NOT_CALLABLE = frozenset(
    {
        *(f"torch.{n}Storage" for n in _STORAGE_NAMES),
        *(f"torch.cuda.{n}Storage" for n in _STORAGE_NAMES if not n.startswith("Q")),
        *(f"torch.{n}" for n in _DTYPE_NAMES),
    }
)  # fmt: skip
#: Opcodes torch's weights-only unpickler knows (anything else: "Unsupported operand").
WEIGHTS_ONLY_OPCODES = frozenset(b"c\x81Rbaesu(t\x85\x86\x87N\x89\x88)]}\x8fJKMGXUQhjqr\x8a\x80.")

# --- what is known to be harmless outside that allowlist ---------------------------------------

#: Standard-library globals that reconstruct plain data (their construction runs no user code).
_HARMLESS_STDLIB = frozenset(
    {
        "argparse.Namespace", "array.array", "array._array_reconstructor",
        "collections.defaultdict", "collections.deque", "copyreg._reconstructor",
        "copyreg.__newobj__", "copyreg.__newobj_ex__", "datetime.date", "datetime.datetime",
        "datetime.time", "datetime.timedelta", "datetime.timezone", "decimal.Decimal",
        "fractions.Fraction", "pathlib.Path", "pathlib.PosixPath", "pathlib.PurePath",
        "pathlib.PurePosixPath", "pathlib.PureWindowsPath", "pathlib.WindowsPath",
        # Python 3.13 defines (and pickles) them in pathlib._local (CPython gh-133789)
        "pathlib._local.Path", "pathlib._local.PosixPath", "pathlib._local.PurePath",
        "pathlib._local.PurePosixPath", "pathlib._local.PureWindowsPath",
        "pathlib._local.WindowsPath",
        "re._compile", "uuid.UUID", "_collections.deque",
        *(f"builtins.{n}" for n in (
            "bool", "bytes", "dict", "float", "frozenset", "int", "list", "object", "range",
            "slice", "str", "tuple", "NotImplemented", "Ellipsis",
        )),
    }
)  # fmt: skip
#: Module prefixes whose classes are plain data (``typing.Any`` in omegaconf configs).
_HARMLESS_STDLIB_CLASSES = ("typing.", "enum.")
#: Functions outside the standard library known to rebuild plain data or tensors.
_HARMLESS_FUNCTIONS = frozenset(
    {
        "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.dtype",
        "numpy.random._pickle.__randomstate_ctor", "numpy.random._pickle.__bit_generator_ctor",
        "numpy.random._pickle.__generator_ctor", "torch._tensor._rebuild_from_type",
        "torch.storage._load_from_bytes", "torch._utils._rebuild_xla_tensor",
        "torch._utils._rebuild_mkldnn_tensor", "torch._utils._rebuild_sparse_csr_tensor",
        "torch._utils._rebuild_qtensor",
    }
)  # fmt: skip
_HARMLESS_FUNCTION_MODULES = ("torch.jit._pickle.",)
#: Classes with a lower-case name, which would otherwise be judged as called functions:
#: DeepSpeed's ``@dataclass class fragment_address(numel, start)`` is in every ZeRO optimizer
#: states file (``param_slice_mappings``) since deepspeed 0.10.
_LOWER_CASE_CLASSES = frozenset({"deepspeed.utils.tensor_fragment.fragment_address"})
#: Globals whose call calls one of its arguments (argument index): that argument is called too.
CALLS_ARGUMENT = {
    "torch._tensor._rebuild_from_type_v2": 0,
    "torch._tensor._rebuild_from_type": 0,
    "copyreg._reconstructor": 1,
}
LOAD_FROM_BYTES = "torch.storage._load_from_bytes"
#: Calls whose arguments the walk inspects every time (no fast path).
SPECIAL_CALLS = frozenset({*CALLS_ARGUMENT, LOAD_FROM_BYTES, "_codecs.encode"})

_STDLIB = frozenset(sys.stdlib_module_names) | {"__builtin__", "copy_reg"}


def canonical(module: str, name: str) -> tuple[str, str]:
    """Python 2 spellings mapped as pickle's ``find_class`` maps them (``__builtin__``)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _is_dangerous(module: str, name: str) -> bool:
    if (module, name) in DANGEROUS_GLOBALS:
        return True
    parts = module.split(".")
    return any(".".join(parts[:n]) in DANGEROUS_MODULES for n in range(1, len(parts) + 1))


def _is_function_name(name: str) -> bool:
    """A lower-case final name (``run``, ``_read_output``): by convention a function."""
    last = name.lstrip("_")[:1]
    return not last.isupper() and not name.startswith("__pyx_unpickle")


def classify(module: str, name: str, *, called: bool) -> tuple[Verdict, str | None]:
    """The class of one global and why it is not safe (None when it is).

    Args:
        module: the module, after Python 2 name mapping (``builtins``).
        name: the name in it; a dotted name is an attribute chain.
        called: the pickle calls it, or hands it to a function that calls it.
    """
    full = f"{module}.{name}"
    if full in WEIGHTS_ONLY_GLOBALS:
        return Verdict.SAFE, None
    if "." in name or not module or not name:
        return Verdict.UNSAFE, "a dotted name: pickle resolves it attribute by attribute"
    if (
        full in _HARMLESS_STDLIB
        or full in _HARMLESS_FUNCTIONS
        or full in _LOWER_CASE_CLASSES
        or full.startswith(_HARMLESS_FUNCTION_MODULES)
        or (full.startswith(_HARMLESS_STDLIB_CLASSES) and not _is_function_name(name))
    ):
        return Verdict.NEEDS_TRUST, _OUTSIDE
    if _is_dangerous(module, name):
        return Verdict.UNSAFE, "on the published lists of dangerous pickle globals"
    if module.split(".")[0] in _STDLIB:
        if called:
            return Verdict.UNSAFE, "a standard-library callable not known to be harmless"
        return Verdict.NEEDS_TRUST, _OUTSIDE
    if called and _is_function_name(name):
        return Verdict.UNSAFE, "a function the pickle calls (not a class, not a known rebuild)"
    return Verdict.NEEDS_TRUST, _OUTSIDE


_OUTSIDE = "outside torch's weights-only allowlist"
