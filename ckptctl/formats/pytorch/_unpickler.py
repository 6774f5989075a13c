"""A restricted unpickler: torch's rebuild functions emulated, nothing imported, nothing run.

``SafeUnpickler`` subclasses the C ``pickle.Unpickler`` and overrides ``find_class`` and
``persistent_load``. ``find_class`` never imports: it maps the globals torch checkpoints use to
this module's own functions and types (``docs/formats/pytorch.md#rebuild-functions``), refuses
the globals that only make sense as an attack (``docs/formats/pytorch.md#safety``) with
``UnsafePickleError``, and turns every other global into an inert stand-in type that records
its name, arguments and state.

Tensors come out as :class:`TensorRef` objects holding a :class:`StorageRef` (a storage key from
the persistent id, resolved to bytes by the container) plus offset, size and stride; no tensor
byte is read here.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any, cast

from ckptctl.errors import CkptError, CorruptCheckpointError, UnsafePickleError
from ckptctl.formats.pytorch._allowlist import classify
from ckptctl.formats.pytorch._scan import PickleTruncatedError, pickle_budget
from ckptctl.safety import Verdict

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptctl.formats.pytorch._verdict import Ledger

#: Largest pickle accepted (``data.pkl``, a legacy main pickle, a TAR ``pickle`` member).
MAX_PICKLE_BYTES = 1 << 30
#: Highest tensor rank accepted.
MAX_RANK = 64


class _Sealed:
    """Objects handed to a pickle refuse BUILD: a crafted BUILD must change nothing of ours."""

    __slots__ = ()

    def __setstate__(self, state: object) -> None:
        raise CorruptCheckpointError(f"BUILD on {self!r}, which is not an object the pickle made")


class _Callable(_Sealed):
    """An allowlisted function as the pickle sees it: callable, and otherwise untouchable.

    ``find_class`` never returns our functions themselves: a BUILD aimed at one would rewrite it
    (its ``__defaults__``) for every later file in the process. Classes that NEWOBJ must build
    are handed out as they are; their metaclass, :class:`_SealedType`, refuses a BUILD.
    """

    __slots__ = ("_function", "_qualname")
    _function: Callable[..., object]
    _qualname: str

    def __init__(self, function: Callable[..., object], qualname: str) -> None:
        object.__setattr__(self, "_function", function)
        object.__setattr__(self, "_qualname", qualname)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._function(*args, **kwargs)

    def __setattr__(self, name: str, value: object) -> None:
        raise CorruptCheckpointError(f"the pickle sets {name!r} on {self._qualname}")

    def __repr__(self) -> str:
        return self._qualname


class StorageType(_Sealed):
    """A storage class from a persistent id: ``torch.FloatStorage`` or ``UntypedStorage``.

    ``dtype`` is the torch dtype name (``float32``) or None for an untyped (byte) storage.
    """

    __slots__ = ("dtype", "qualname")

    def __init__(self, qualname: str, dtype: str | None) -> None:
        self.qualname = qualname
        self.dtype = dtype

    def __call__(self, *args: object) -> StorageType:
        return self  # ``torch.FloatStorage()`` inside odd pickles: keep the type, build nothing

    def __repr__(self) -> str:
        return f"StorageType({self.qualname})"


class TorchDType(_Sealed):
    """A ``torch.<dtype>`` global (``torch.float32``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class StorageRef(_Sealed):
    """One storage: its key and type from the persistent id; bytes are resolved later.

    Attributes:
        key: the storage key (``"0"``; a pointer string in legacy files).
        stype: the storage type.
        numel: element count of the storage type (bytes for an untyped storage).
        view: legacy storage view ``(view_key, element offset, element count)`` or None.
        inline: the bytes themselves, for storages pickled by value (plain pickles).
    """

    __slots__ = ("inline", "key", "location", "numel", "stype", "view")

    def __init__(
        self,
        key: str,
        stype: StorageType,
        numel: int,
        *,
        location: str = "cpu",
        view: tuple[str, int, int] | None = None,
        inline: bytes | None = None,
    ) -> None:
        self.key = key
        self.stype = stype
        self.numel = numel
        self.location = location
        self.view = view
        self.inline = inline


class TensorRef:
    """A dense tensor over a storage, or an unsupported tensor kind (``unsupported`` says which).

    Offset, size and stride count elements of ``dtype``.
    """

    def __init__(
        self,
        storage: StorageRef | None,
        offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        dtype: str,
        *,
        flags: frozenset[str] = frozenset(),
        unsupported: str | None = None,
    ) -> None:
        self.storage = storage
        self.offset = offset
        self.size = size
        self.stride = stride
        self.dtype = dtype
        self.flags = flags
        self.unsupported = unsupported
        self.is_parameter = False
        self.subclass: str | None = None

    def __setstate__(self, state: object) -> None:
        # Pre-0.4 tensors: ``torch.FloatTensor`` + BUILD ``(storage, offset, size, stride)``.
        if isinstance(state, tuple) and len(state) in (4, 5) and self.storage is None:
            if len(state) == 5:  # an autograd Variable: element 0 is the data tensor
                raise CorruptCheckpointError("pre-0.4 Variable state is not supported here")
            built = _rebuild_tensor(*state)
            built_dtype = self.dtype
            self.__dict__.update(built.__dict__)
            if built_dtype:
                self.dtype = built_dtype
            return
        if isinstance(state, dict):
            return  # Python attributes on a tensor: irrelevant to its bytes
        raise CorruptCheckpointError("unexpected tensor state in pickle")


class _SealedType(type):
    """The metaclass of every class a pickle gets: a BUILD aimed at the class changes nothing."""

    def __setattr__(cls, name: str, value: object) -> None:
        raise CorruptCheckpointError(f"the pickle sets {name!r} on the class {cls.__name__}")


class Stub(metaclass=_SealedType):
    """Base of the inert stand-in types made for unknown globals: records, never acts."""

    qualname: str = "?"

    def __new__(cls, *args: object, **kwargs: object) -> Stub:
        obj = object.__new__(cls)
        obj.args = args
        obj.kwargs = kwargs
        obj.state = None
        obj.items = []
        return obj

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    # Attributes are declared for mypy; set in __new__.
    args: tuple[object, ...]
    kwargs: dict[str, object]
    state: object
    items: list[object]

    def __setstate__(self, state: object) -> None:
        self.state = state

    # APPENDS/SETITEMS on a stub (list or dict subclasses in the saving program).
    def append(self, item: object) -> None:
        self.items.append(item)

    def extend(self, items: list[object]) -> None:
        self.items.extend(items)

    def __setitem__(self, key: object, value: object) -> None:
        self.items.append((key, value))

    def __repr__(self) -> str:
        return f"<{self.qualname}>"


def _stub_type(qualname: str) -> type[Stub]:
    short = qualname.rsplit(".", 1)[-1]  # classify() refuses empty and dotted names
    stub = _SealedType(short, (Stub,), {"qualname": qualname, "__module__": __name__})
    return cast("type[Stub]", stub)


# --- emulated rebuild functions (docs/formats/pytorch.md#rebuild-functions) ---------------


def _int(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise CorruptCheckpointError(f"tensor {what} must be a non-negative integer")
    return value


def _ints(value: object, what: str) -> tuple[int, ...]:
    if type(value) is tuple and len(value) <= MAX_RANK:
        # The common case, checked without a generator: it runs twice per tensor.
        for v in value:
            if type(v) is not int or v < 0:
                break
        else:
            return value
    if not isinstance(value, tuple | list) or len(value) > MAX_RANK:
        raise CorruptCheckpointError(f"tensor {what} must be a tuple of at most {MAX_RANK} ints")
    return tuple(_int(v, what) for v in value)


def _storage(value: object) -> StorageRef:
    if not isinstance(value, StorageRef):
        raise CorruptCheckpointError("tensor storage is not a storage from a persistent id")
    return value


def _flags(metadata: object) -> frozenset[str]:
    if metadata is None:
        return frozenset()
    if not isinstance(metadata, dict):
        raise CorruptCheckpointError("tensor metadata is not a dict")
    flags = set()
    for key, value in metadata.items():
        if key not in ("conj", "neg"):
            raise CorruptCheckpointError(f"unknown tensor metadata key {key!r}")
        if value:
            flags.add(str(key))
    return frozenset(flags)


def _rebuild_tensor(
    storage: object, offset: object, size: object, stride: object, *_rest: object
) -> TensorRef:
    ref = _storage(storage)
    dtype = ref.stype.dtype or "uint8"
    return TensorRef(
        ref, _int(offset, "storage offset"), _ints(size, "size"), _ints(stride, "stride"), dtype
    )


def _rebuild_tensor_v2(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object = False,
    hooks: object = None,
    metadata: object = None,
) -> TensorRef:
    tensor = _rebuild_tensor(storage, offset, size, stride)
    if metadata is not None:  # else the flags stay empty
        tensor.flags = _flags(metadata)
    return tensor


def _rebuild_tensor_v3(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object,
    hooks: object,
    dtype: object,
    metadata: object = None,
) -> TensorRef:
    if not isinstance(dtype, TorchDType):
        raise CorruptCheckpointError("_rebuild_tensor_v3 dtype argument is not a torch dtype")
    tensor = _rebuild_tensor(storage, offset, size, stride)
    tensor.dtype = dtype.name
    tensor.flags = _flags(metadata)
    return tensor


def _tensor(value: object) -> TensorRef:
    if not isinstance(value, TensorRef):
        raise CorruptCheckpointError("parameter data is not a tensor")
    return value


def _rebuild_parameter(data: object, *_rest: object) -> TensorRef:
    tensor = _tensor(data)
    tensor.is_parameter = True
    return tensor


def _rebuild_from_type_v2(func: object, new_type: object, args: object, state: object) -> object:
    if not callable(func) or not isinstance(args, tuple):
        raise CorruptCheckpointError("_rebuild_from_type_v2 with a bad function or arguments")
    # ``func`` came from find_class, so it is one of ours or an inert stub type.
    result = func(*args)
    if isinstance(result, TensorRef) and isinstance(new_type, type) and issubclass(new_type, Stub):
        result.subclass = new_type.qualname
    return result


def _unsupported(kind: str) -> Callable[..., TensorRef]:
    def rebuild(*_args: object) -> TensorRef:
        return TensorRef(None, 0, (), (), "", unsupported=kind)

    return rebuild


def _device_from_cpu(tensor: object, *_rest: object) -> TensorRef:
    return _tensor(tensor)


def _identity(value: object, *_rest: object) -> object:
    return value


class _Parameter(metaclass=_SealedType):
    """``torch.nn.parameter.Parameter`` in very old files: ``Parameter(data, requires_grad)``."""

    def __new__(cls, data: object = None, *_rest: object) -> TensorRef:  # type: ignore[misc]  # a factory
        return _rebuild_parameter(data)


class _LegacyTensorType(_Sealed):
    """``torch.FloatTensor`` & co. (pre-0.4): called with ``()``, then BUILD sets the storage."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __call__(self, *_args: object) -> TensorRef:
        return TensorRef(None, 0, (), (), self.dtype)


def _codecs_encode(text: object, encoding: object = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise CorruptCheckpointError("_codecs.encode is only accepted for latin-1 text")
    return text.encode("latin-1")


def _bytearray(value: object = b"") -> bytearray:
    if isinstance(value, bytes | bytearray | list):
        return bytearray(value)
    raise CorruptCheckpointError("bytearray from a non-bytes argument (an int would allocate)")


def _set(items: object = ()) -> set[object]:
    if not isinstance(items, list | tuple | set | frozenset):
        raise CorruptCheckpointError("set from a non-sequence")
    return set(items)


def _frozenset(items: object = ()) -> frozenset[object]:
    return frozenset(_set(items))


def _complex(real: object = 0.0, imag: object = 0.0) -> complex:
    if not isinstance(real, int | float) or not isinstance(imag, int | float):
        raise CorruptCheckpointError("complex from non-numbers")
    return complex(real, imag)


def _ordered_dict(items: object = ()) -> OrderedDict[object, object]:
    if isinstance(items, dict):
        return OrderedDict(items)
    if not isinstance(items, list | tuple):
        raise CorruptCheckpointError("OrderedDict from a non-sequence")
    return OrderedDict(items)


class _OrderedDictType(OrderedDict[object, object], metaclass=_SealedType):
    """OrderedDict that NEWOBJ can make and BUILD can update harmlessly."""

    def __new__(cls, *args: object, **_kwargs: object) -> _OrderedDictType:
        return super().__new__(cls)

    def __init__(self, items: object = ()) -> None:
        if type(items) is not tuple or items:  # torch.save pickles an empty one per tensor
            super().__init__(_ordered_dict(items))

    def __setstate__(self, state: object) -> None:
        pass  # attributes on an OrderedDict (``_metadata`` of state dicts): not needed


def _reconstructor(cls: object, base: object = None, state: object = None) -> object:
    # copyreg._reconstructor(cls, object, None): protocol 0/1 spelling of "make a cls".
    if isinstance(cls, type) and issubclass(cls, Stub):
        return cls()
    raise CorruptCheckpointError("copyreg._reconstructor of a non-stub class")


def _plain_dict(*_args: object) -> dict[object, object]:
    return {}


def _size(items: object = ()) -> tuple[int, ...]:
    return _ints(items, "size")


class _DeviceName(str):
    """A ``torch.device`` as its name; a BUILD with an empty state leaves it as it is.

    torch's weights-only loader accepts ``BUILD`` on a device only with an empty state
    (``torch/_weights_only_unpickler.py``); a plain ``str`` has no ``__dict__`` for the C
    unpickler's default BUILD, so such a file was refused although torch loads it.
    """

    __slots__ = ()

    def __setstate__(self, state: object) -> None:
        if state not in (None, {}, ()):
            raise CorruptCheckpointError(f"BUILD on the device {str(self)!r} with a state")


def _device(*args: object) -> str:
    return _DeviceName(":".join(str(a) for a in args))


def _layout(name: object) -> str:
    return str(name)


_TORCH_DTYPES = frozenset(
    {
        "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
        "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "complex32",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
        "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "quint8",
        "qint8", "qint32", "quint4x2", "quint2x4", "float", "double", "half", "long", "int",
        "short", "cfloat", "cdouble", "chalf",
        *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
    }
)  # fmt: skip
_DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32",
}  # fmt: skip

# Legacy storage / tensor class names -> torch dtype name (docs/formats/pytorch.md#dtypes).
STORAGE_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
    "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
    "ComplexHalf": "complex32", "QUInt8": "quint8", "QInt8": "qint8", "QInt32": "qint32",
    "QUInt4x2": "quint4x2", "QUInt2x4": "quint2x4",
}  # fmt: skip

_REBUILDS: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch._tensor", "_rebuild_from_type"): _rebuild_from_type_v2,
    ("torch._utils", "_rebuild_qtensor"): _unsupported("a quantized tensor"),
    ("torch._utils", "_rebuild_sparse_tensor"): _unsupported("a sparse tensor"),
    ("torch._utils", "_rebuild_sparse_csr_tensor"): _unsupported("a sparse tensor"),
    ("torch._utils", "_rebuild_nested_tensor"): _unsupported("a nested tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _unsupported("a meta tensor (no data)"),
    ("torch._utils", "_rebuild_wrapper_subclass"): _unsupported("a wrapper-subclass tensor"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"): _unsupported("a device tensor"),
    ("torch._utils", "_rebuild_xla_tensor"): _unsupported("an XLA tensor"),
    ("torch._utils", "_rebuild_mkldnn_tensor"): _unsupported("an MKL-DNN tensor"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"): _device_from_cpu,
    ("torch.jit._pickle", "build_intlist"): _identity,
    ("torch.jit._pickle", "build_doublelist"): _identity,
    ("torch.jit._pickle", "build_boollist"): _identity,
    ("torch.jit._pickle", "build_tensorlist"): _identity,
    ("torch.jit._pickle", "build_tensor_from_id"): _unsupported("a TorchScript tensor by id"),
    ("torch.jit._pickle", "restore_type_tag"): _identity,
    ("torch.nn.parameter", "Parameter"): _Parameter,
    ("collections", "OrderedDict"): _OrderedDictType,
    ("collections", "Counter"): Counter,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("collections", "defaultdict"): _plain_dict,
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
    ("torch.serialization", "_get_layout"): _layout,
    ("_codecs", "encode"): _codecs_encode,
    ("builtins", "bytearray"): _bytearray,
    ("builtins", "set"): _set,
    ("builtins", "frozenset"): _frozenset,
    ("builtins", "complex"): _complex,
}


class SafeUnpickler(pickle.Unpickler):
    """Unpickle without importing: allowlisted emulations, refusals, and inert stubs.

    Args:
        data: the whole pickle (already bounds-scanned by :func:`load_pickle`).
        where: the record name used in messages (``data.pkl``).
        persistent_load: maps a persistent id to an object (the container's storages).
        extra: additional ``(module, name) -> object`` entries (``_load_from_bytes``).
        encoding: how Python 2 ``str`` objects are decoded.
        seen_globals: when given, every global the pickle names is appended (``module.name``).
    """

    def __init__(
        self,
        data: bytes,
        where: str,
        persistent_load: Callable[[object], object] | None = None,
        extra: dict[tuple[str, str], object] | None = None,
        encoding: str = "utf-8",
        seen_globals: list[str] | None = None,
    ) -> None:
        super().__init__(io.BufferedReader(io.BytesIO(data)), encoding=encoding)
        self._where = where
        self._persistent = persistent_load
        self._extra = extra or {}
        self._stubs: dict[str, type[Stub]] = {}
        self._found: dict[tuple[str, str], object] = {}
        self._seen = seen_globals

    def find_class(self, module: str, name: str) -> Any:  # noqa: ANN401  # pickle's own signature
        key = (module, name)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._find_class(module, name)
            if self._seen is not None:
                self._seen.append(f"{module}.{name}")
        return found

    def _find_class(self, module: str, name: str) -> object:
        # Python 2 spellings, as the default find_class would map them
        # (docs/formats/pytorch.md#pickle).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        qualname = f"{module}.{name}"
        if classify(module, name, called=False)[0] is Verdict.UNSAFE:
            # The verdict refused this file before unpickling unless a caller skipped it; never
            # stand in for a global whose only use is an attack.
            raise UnsafePickleError(
                f"unsafe pickle: global '{qualname}' in {self._where}",
                hint="this file tries to run code when loaded; do not open it with torch.load",
            )
        target = self._extra.get((module, name)) or _REBUILDS.get((module, name))
        if isinstance(target, _SealedType):
            return target  # a class NEWOBJ can build (old files: Parameter, OrderedDict)
        if target is not None:
            return _Callable(target, qualname)  # type: ignore[arg-type]  # every entry is callable
        if module.startswith("torch") and name.endswith("Storage"):
            if (
                name in ("UntypedStorage", "TypedStorage", "ByteStorage")
                and module == "torch.storage"
            ):
                return StorageType(qualname, None if name == "UntypedStorage" else "uint8")
            base = name[: -len("Storage")]
            return StorageType(qualname, STORAGE_DTYPES.get(base, f"unknown:{base}"))
        if module == "torch" and name in _TORCH_DTYPES:
            return TorchDType(_DTYPE_ALIASES.get(name, name))
        if module in ("torch", "torch.cuda") and name.endswith("Tensor"):
            base = name[: -len("Tensor")]
            if base in STORAGE_DTYPES:
                return _LegacyTensorType(STORAGE_DTYPES[base])
        stub = self._stubs.get(qualname)
        if stub is None:
            stub = self._stubs[qualname] = _stub_type(qualname)
        return stub

    def persistent_load(self, pid: object) -> object:
        if self._persistent is None:
            raise CorruptCheckpointError(f"unexpected persistent id in {self._where}")
        return self._persistent(pid)


def load_pickle(
    data: bytes,
    where: str,
    persistent_load: Callable[[object], object] | None = None,
    extra: dict[tuple[str, str], object] | None = None,
    start: int = 0,
    seen_globals: list[str] | None = None,
    *,
    ledger: Ledger | None = None,
    complete: bool = True,
    file_bytes: int | None = None,
    compressed: bool = False,
) -> tuple[object, int]:
    """Judge, scan, then unpickle the pickle at ``start``; return ``(object, end offset)``.

    Args:
        ledger: when given, the pickle's safety verdict is added to it first, and an unsafe
            pickle is refused before anything of it is unpickled.
        complete: ``data`` holds all there is (a truncated pickle is judged, not retried).
        seen_globals: receives every global the pickle names (``module.name``).
        file_bytes: the size of the file the pickle came from, which bounds the work it may
            ask for (``_scan.pickle_budget``); ``len(data)`` when not given.

    Raises:
        UnsafePickleError: the pickle is unsafe, or names a global only an attack would.
        CorruptCheckpointError: the pickle is malformed or exceeds a limit.
    """
    from ckptctl.formats.pytorch._verdict import new_judge
    from ckptctl.formats.pytorch._walker import walk_pickle

    # One walk: the bounds, and (with a ledger) the verdict.
    budget = pickle_budget(len(data) if file_bytes is None else file_bytes, compressed=compressed)
    walker = walk_pickle(
        data, start, where, judge=None if ledger is None else new_judge(where), budget=budget
    )
    if ledger is not None and (complete or not isinstance(walker.error, PickleTruncatedError)):
        # Judged before anything is unpickled: an unsafe pickle is refused here. A pickle out
        # of bounds is judged too (pickle.load runs every opcode before the damage); over the
        # budget, on what is within it.
        ledger.add(walker.safety(), walker.frame_left, where)
    end = walker.stop()
    if end - start > MAX_PICKLE_BYTES:
        raise CorruptCheckpointError(f"{where} is larger than {MAX_PICKLE_BYTES} bytes")
    # Bytes after the STOP stay: a frame may run past it (the frames section of _safety.py),
    # and the unpickler stops at the STOP anyway.
    chunk = data[start:] if start else data
    last: Exception | None = None
    for encoding in ("utf-8", "latin1"):
        try:
            if seen_globals is not None:
                seen_globals.clear()  # a latin-1 retry sees them again
            unpickler = SafeUnpickler(chunk, where, persistent_load, extra, encoding, seen_globals)
            obj = unpickler.load()
        except CkptError:
            raise
        except UnicodeDecodeError as exc:  # Python 2 str: retry as latin-1, like torch
            last = exc
            continue
        except (Exception, RecursionError) as exc:
            raise CorruptCheckpointError(
                f"cannot unpickle {where}: {type(exc).__name__}: {exc}",
                hint="the file is damaged or uses a construct ckptctl does not emulate",
            ) from None
        return obj, end
    raise CorruptCheckpointError(f"cannot unpickle {where}: {last}")
