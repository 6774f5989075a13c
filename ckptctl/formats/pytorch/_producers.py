"""The inert classes training programs write into their own checkpoints (issue #44).

Data only, like ``_allowlist.py``. A DCP directory or a DeepSpeed save is not read by
``torch.load(weights_only=True)`` but by its producer's loader, which unpickles fully: torch's
``FileSystemReader`` reads ``.metadata`` with ``pickle.load`` and the non-tensor values with
``torch.load(weights_only=False)``; DeepSpeed's ``load_checkpoint`` and Megatron-core's
``dist_checkpointing.load`` call ``torch.load(weights_only=False)``. For those files the question
``verify`` answers is whether a pickle names anything beyond the classes below, which the
producer writes itself and whose construction only stores fields (dataclasses, enums, paths):
``PickleSafety.written_by`` makes them ``safe`` for files read as that producer's, and for no
other file (a plain ``.pt`` naming them keeps the weights-only verdict).

Every entry says where the class is defined and where the producer writes it; read from the
producers' sources at the versions the fixtures were made with (torch 2.13, deepspeed 0.19.8,
megatron-core 0.16.1; ``fixtures/make_distributed.py``, ``fixtures/make_deepspeed.py``). Globals
torch's weights-only allowlist already accepts (``torch.Size``, dtypes, ``_get_layout``,
``OrderedDict``) need no entry. SECURITY.md lists the same tables.
"""

from __future__ import annotations

from ckptctl.safety import Producer

__all__ = ["DCP", "DEEPSPEED", "MEGATRON"]

_DCP_METADATA = "torch/distributed/checkpoint/metadata.py (torch 2.13)"
_DCP_PLANNER = "torch/distributed/checkpoint/planner.py (torch 2.13)"
_DCP_FILES = "torch/distributed/checkpoint/filesystem.py (torch 2.13)"
_PLANNER_CLASSES = (
    "SavePlan", "WriteItem", "WriteItemType", "TensorWriteData", "BytesIOWriteData",
    "LoadPlan", "ReadItem", "LoadItemType",
)  # fmt: skip
_PATH = (
    "StorageMeta.checkpoint_id, the path FileSystemWriter was given "
    "(torch/distributed/checkpoint/filesystem.py, torch 2.13); pathlib._local on Python 3.13"
)

#: What ``torch.distributed.checkpoint`` writes into ``.metadata`` (and a planner may keep there).
DCP_CLASSES: dict[str, str] = {
    **{
        f"torch.distributed.checkpoint.metadata.{name}": f"{_DCP_METADATA}: {what}"
        for name, what in (
            ("Metadata", "the pickled root of .metadata"),
            ("MetadataIndex", "the keys of Metadata.storage_data"),
            ("StorageMeta", "Metadata.storage_meta"),
            ("TensorStorageMetadata", "a tensor of state_dict_metadata"),
            ("BytesStorageMetadata", "a non-tensor value of state_dict_metadata"),
            ("ChunkStorageMetadata", "TensorStorageMetadata.chunks"),
            ("TensorProperties", "TensorStorageMetadata.properties"),
            ("_MEM_FORMAT_ENCODING", "the enum TensorProperties.__getstate__ writes"),
        )
    },
    **{
        f"torch.distributed.checkpoint.filesystem.{name}": f"{_DCP_FILES}: {what}"
        for name, what in (
            ("_StorageInfo", "the values of Metadata.storage_data"),
            ("_StoragePrefix", "SavePlan.storage_data of FileSystemWriter's plans"),
        )
    },
    **{
        f"torch.distributed.checkpoint.planner.{name}": (
            f"{_DCP_PLANNER}: the save and load plans (Megatron-core's planner keeps every rank's "
            "plan in Metadata.all_local_plans)"
        )
        for name in _PLANNER_CLASSES
    },
    **{
        f"pathlib{module}.{name}": _PATH
        for module in ("", "._local")
        for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")
    },
}

_LOSS_SCALER = (
    "deepspeed/runtime/fp16/loss_scaler.py (deepspeed 0.19): the optimizer states' loss_scaler "
    "(CreateLossScaler)"
)
#: What DeepSpeed's ZeRO optimizers write into their states files (``state_dict`` of
#: ``runtime/zero/stage_1_and_2.py``, ``stage3.py`` and ``runtime/bf16_optimizer.py``).
DEEPSPEED_CLASSES: dict[str, str] = {
    "deepspeed.runtime.zero.config.ZeroStageEnum": (
        "deepspeed/runtime/zero/config.py (deepspeed 0.19): the optimizer states' zero_stage "
        "(an int enum)"
    ),
    "deepspeed.runtime.fp16.loss_scaler.LossScaler": _LOSS_SCALER,
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler": _LOSS_SCALER + ", fp16 training",
    "deepspeed.utils.tensor_fragment.fragment_address": (
        "deepspeed/utils/tensor_fragment.py (deepspeed 0.19): the dataclass of the optimizer "
        "states' param_slice_mappings"
    ),
}

#: Megatron-core's registered safe globals, spelled as pickle names them (the defining module).
_MEGATRON_REGISTERED = (
    "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct", "numpy.dtypes.UInt32DType", "torch._C.Generator",
    "megatron.core.enums.ModelType",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
    "megatron.core.rerun_state_machine.RerunDiagnostic",
    "megatron.core.rerun_state_machine.RerunMode",
    "megatron.core.rerun_state_machine.RerunState",
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphScope",
)  # fmt: skip
_MEGATRON_SAFE = (
    "megatron/core/safe_globals.py: registered by Megatron-core for its checkpoints with "
    "torch.serialization.add_safe_globals"
)
#: What Megatron writes beside the DCP classes: ``common.pt`` holds the training ``args``
#: (``state_dict['args'] = args``, ``megatron/training/checkpointing.py``) and the values
#: Megatron-core registers as its checkpoints' safe globals. Of that list,
#: ``types.SimpleNamespace``, ``io.BytesIO`` and ``signal.Signals`` are left out: ckptctl judges
#: them unsafe everywhere
#: (their modules are on the published dangerous lists, or the pickle calls a standard-library
#: class not known to be harmless), and a producer's list never lifts an unsafe verdict.
MEGATRON_CLASSES: dict[str, str] = {
    **DCP_CLASSES,
    "argparse.Namespace": (
        "megatron/training/checkpointing.py: common.pt's args; " + _MEGATRON_SAFE
    ),
    **dict.fromkeys(_MEGATRON_REGISTERED, _MEGATRON_SAFE),
}

DCP = Producer("DCP", "DCP's loader", "checkpoint metadata classes", DCP_CLASSES)
DEEPSPEED = Producer(
    "DeepSpeed", "DeepSpeed's loader", "ZeRO checkpoint classes", DEEPSPEED_CLASSES
)
MEGATRON = Producer(
    "Megatron-core",
    "Megatron-core's loader",
    "checkpoint metadata classes and Megatron's own",
    MEGATRON_CLASSES,
)
