"""DeepSpeed ZeRO checkpoints, against what deepspeed itself returns for the same saves.

The fixtures (``fixtures/make_deepspeed.py``, deepspeed 0.19.8) are real saves: ZeRO stages
1/2/3 x 1 and 2 ranks x fp32 and bf16 of a model with a tied, a frozen and two buffers. Their
ground truth (``truth/<case>.json``) is ``get_fp32_state_dict_from_zero_checkpoint``'s result
(names in order, dtype, shape, sha256), the frozen parameters it drops at stage 1 (with the
value the model holds) and the per-parameter optimizer states ``ds_to_universal`` writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptctl import CorruptCheckpointError, InputError, open_checkpoint
from ckptctl.formats import read_layout, resolve_path
from ckptctl.ops.convert import ConvertOptions, convert
from ckptctl.ops.verify import verify
from ckptctl.safety import Verdict
from tests.conftest import HOSTILE, VALID
from tests.formats._shares import assert_shares_equal_one_run

DEEPSPEED = VALID / "deepspeed"
CASES = sorted(p.name for p in DEEPSPEED.iterdir() if p.name.startswith("zero"))
STEP = "global_step2"
DEEPSPEED_GLOBALS = {
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
}


def truth(case: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((DEEPSPEED / "truth" / f"{case}.json").read_text())
    return found


def expected(case: str) -> list[tuple[str, dict[str, Any]]]:
    """zero_to_fp32's state dict, with the frozen parameters it drops at stage 1 put where it
    puts them from stage 2 on (after the buffers)."""
    found = truth(case)
    pairs = [(n, d) for n, d in found["state_dict"]]
    dropped = sorted(found["dropped"].items(), key=lambda kv: kv[0] != "frozen.weight")
    buffers = sum(1 for n, _ in pairs if n in ("scale", "seen"))
    return pairs[:buffers] + dropped + pairs[buffers:]


def digest(raw: bytes | memoryview) -> str:
    return hashlib.sha256(bytes(raw)).hexdigest()


def read_safetensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """name -> (dtype, shape, bytes) straight from the file (numpy has no bfloat16), in data
    order: the format's layout is an 8-byte header length, the JSON header, the data."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    ordered = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return {
        name: (
            info["dtype"],
            info["shape"],
            raw[base + info["data_offsets"][0] : base + info["data_offsets"][1]],
        )
        for name, info in ordered
    }


def copy_case(case: str, tmp_path: Path) -> Path:
    target = tmp_path / case
    shutil.copytree(DEEPSPEED / case, target)
    return target


def test_there_are_twelve_cases() -> None:
    assert len(CASES) == 12  # stages 1-3 x 1/2 ranks x fp32/bf16
    assert truth("zero1_fp32_1rank")["dropped"]  # deepspeed's stage-1 drop is real


@pytest.mark.parametrize("case", CASES)
def test_consolidated_weights_equal_zero_to_fp32(case: str) -> None:
    want = expected(case)
    with open_checkpoint(DEEPSPEED / case) as ckpt:
        assert ckpt.format == "deepspeed-zero"
        assert [(e.name, e.dtype.value, list(e.shape)) for e in ckpt.values()] == [
            (n, d["dtype"], d["shape"]) for n, d in want
        ]
        for name, want_one in want:
            assert digest(ckpt[name].data.read()) == want_one["sha256"], name
        if truth(case)["dropped"]:
            assert any("zero_to_fp32 leaves them out at stage 1" in n for n in ckpt.notes)


@pytest.mark.parametrize("case", CASES)
def test_optimizer_states_by_parameter_name_equal_ds_to_universal(case: str) -> None:
    universal = truth(case)["optimizer"]
    with open_checkpoint(DEEPSPEED / case) as ckpt:
        assert sorted(ckpt.views) == ["exp_avg", "exp_avg_sq", "step"]
        fp32 = {e.name: e for e in ckpt.values()}
        for key in ("exp_avg", "exp_avg_sq", "step"):
            states = {e.name: e for e in ckpt.views[key]()}
            trainable = sorted(n for n, s in universal.items() if "exp_avg" in s)
            assert sorted(states) == trainable
            for name in trainable:
                entry = states[name]
                if key == "step" and "step" not in universal[name]:  # ds_to_universal at 3
                    assert entry.shape == ()
                    assert float(entry.load()) == truth(case)["step"]
                    continue
                want = universal[name][key]
                assert entry.dtype.value == want["dtype"]
                # the parameter's shape (ds_to_universal keeps stage 3's states flat)
                assert entry.shape == fp32[name].shape or key == "step"
                assert math.prod(entry.shape) == math.prod(want["shape"])
                assert digest(entry.data.read()) == want["sha256"], (name, key)
        for name in trainable:  # ds_to_universal's fp32 is zero_to_fp32's weight
            assert digest(fp32[name].data.read()) == universal[name]["fp32"]["sha256"]


@pytest.mark.parametrize("case", ["zero1_bf16_2rank", "zero3_fp32_2rank"])
def test_every_path_into_a_save_opens_it(case: str) -> None:
    root = DEEPSPEED / case
    step = root / STEP
    assert resolve_path(root) == str(root / "latest")
    assert resolve_path(step) == str(step)  # read through its rank-0 model states
    for path in (root, root / "latest", step):
        with open_checkpoint(path) as ckpt:
            assert ckpt.format == "deepspeed-zero"
            assert len(ckpt) == len(expected(case))


@pytest.mark.parametrize("case", ["zero1_bf16_2rank", "zero3_fp32_2rank"])
def test_a_rank_file_named_alone_is_that_one_pt(case: str) -> None:
    """verify FILE judges FILE, as torch.load would load it: a model states file alone holds
    no deepspeed class (torch loads it with weights_only=True)."""
    for path in sorted((DEEPSPEED / case / STEP).glob("*.pt")):
        with open_checkpoint(path) as ckpt:
            assert ckpt.format == "pytorch-zip"
            assert ckpt.safety is not None
            names = {g.name for g in ckpt.safety.untrusted()}
            model = path.name.endswith("model_states.pt")
            assert (ckpt.safety.verdict is Verdict.SAFE) == model, path.name
            assert model or names >= DEEPSPEED_GLOBALS


def test_a_folder_of_several_saves_without_latest_asks_which(tmp_path: Path) -> None:
    root = copy_case("zero2_fp32_1rank", tmp_path)
    (root / "latest").unlink()
    shutil.copytree(root / STEP, root / "global_step4")
    with pytest.raises(InputError, match=r"2 saves \(global_step2, global_step4\) and no 'latest'"):
        open_checkpoint(root)
    shutil.rmtree(root / "global_step4")
    with open_checkpoint(root) as ckpt:  # one save: no latest needed
        assert len(ckpt) == 10


def test_latest_naming_a_missing_folder_is_corrupt(tmp_path: Path) -> None:
    root = copy_case("zero2_fp32_1rank", tmp_path)
    (root / "latest").write_text("global_step9")
    with pytest.raises(CorruptCheckpointError, match="'latest' names the save 'global_step9'"):
        open_checkpoint(root)


@pytest.mark.parametrize("tag", ["..", " ..\n", "."])
@pytest.mark.parametrize("beside", [True, False], ids=["with-save", "alone"])
def test_a_latest_of_dots_never_reads_another_folder(
    tag: str, beside: bool, tmp_path: Path, run_cli: Any
) -> None:
    """Issue 44: ``latest`` holding ``..`` named the folder above the checkpoint, which was read
    when it held model states. Tags are plain names: the save is refused, naming ``latest``."""
    outer = tmp_path / "outer"
    shutil.copytree(DEEPSPEED / "zero2_fp32_1rank" / STEP, outer)  # the folder above: a save
    root = copy_case("zero2_fp32_1rank", outer)
    if not beside:
        shutil.rmtree(root / STEP)
    (root / "latest").write_text(tag)
    result = run_cli("ls", "--json", root)
    assert result.code == 3, result.stdout
    assert str(root / "latest") in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("content", ["global_step", "not a tag\n", "x" * 5000, "", "step/2"])
def test_a_broken_latest_is_named_not_replaced_by_the_only_save(
    content: str, tmp_path: Path, run_cli: Any
) -> None:
    root = copy_case("zero2_fp32_1rank", tmp_path)
    (root / "latest").write_text(content)
    result = run_cli("ls", root)
    assert result.code == 3, result.stdout
    assert str(root / "latest") in result.stderr
    with pytest.raises(CorruptCheckpointError, match="latest"):
        open_checkpoint(root)
    (root / "latest").unlink()  # no latest: the one save is the checkpoint
    with open_checkpoint(root) as ckpt:
        assert len(ckpt) == len(expected("zero2_fp32_1rank"))


def test_the_stand_in_converter_script_is_ignored(tmp_path: Path) -> None:
    root = copy_case("zero3_bf16_2rank", tmp_path)
    (root / "zero_to_torch.py").write_text("# deepspeed copies its converter here\n")
    with open_checkpoint(root) as ckpt:
        assert len(ckpt) == 10


@pytest.mark.parametrize(
    ("case", "victim"),
    [
        ("zero2_bf16_2rank", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        ("zero3_fp32_2rank", "zero_pp_rank_1_mp_rank_00_model_states.pt"),
        ("zero1_fp32_2rank", "mp_rank_00_model_states.pt"),
    ],
)
def test_a_missing_rank_file_fails_naming_it(case: str, victim: str, tmp_path: Path) -> None:
    root = copy_case(case, tmp_path)
    (root / STEP / victim).unlink()
    if victim.startswith("mp_rank"):  # no model states at all: not a DeepSpeed save any more
        with pytest.raises(InputError):
            open_checkpoint(root)
        return
    with pytest.raises(CorruptCheckpointError, match=victim) as info:
        open_checkpoint(root)
    assert info.value.path == str(root / STEP)
    report = verify(root)
    assert not report.ok
    readable = report.files[0].findings[0]
    assert readable.check == "readable"
    assert victim in str(readable.message)


@pytest.mark.parametrize("victim", ["mp_rank_00_model_states.pt",
                                    "zero_pp_rank_1_mp_rank_00_optim_states.pt"])  # fmt: skip
def test_a_rank_file_that_is_an_npz_fails_naming_it(victim: str, tmp_path: Path) -> None:
    """Found while fixing issue 44: the error about the partition was searched for pickles in
    the save's stand-in file after it was closed (an internal error, exit 70)."""
    root = copy_case("zero2_fp32_2rank", tmp_path)
    shutil.copy(HOSTILE / "pickle_elsewhere" / "object_array_npz.npz", root / STEP / victim)
    with pytest.raises(InputError, match=victim) as info:
        open_checkpoint(root)
    assert info.value.path == str(root / STEP)
    (result,) = verify(root).files
    assert [f.check for f in result.failures] == ["readable"]
    assert victim in str(result.failures[0].message)


@pytest.mark.parametrize("victim", ["zero_pp_rank_1_mp_rank_00_optim_states.pt",
                                    "zero_pp_rank_0_mp_rank_00_model_states.pt"])  # fmt: skip
def test_a_truncated_rank_file_fails_naming_it(victim: str, tmp_path: Path) -> None:
    root = copy_case("zero3_fp32_2rank", tmp_path)
    path = root / STEP / victim
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptCheckpointError, match=f"/{STEP}: {victim}: corrupt zip") as info:
        open_checkpoint(root / STEP)
    assert info.value.path == str(root / STEP)
    report = verify(root)
    assert not report.ok
    assert str(report.files[0].findings[0].message).startswith(f"{victim}: ")


def test_a_partition_that_does_not_cover_the_parameters_is_corrupt(tmp_path: Path) -> None:
    root = copy_case("zero2_fp32_2rank", tmp_path)
    rank1 = root / STEP / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    rank0 = root / STEP / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    # rank 1 holds 56 of group 0's 114 elements (rank 0: 58): twice rank 1 is 2 short
    rank0.write_bytes(rank1.read_bytes().replace(b"rank_1", b"rank_0"))
    with pytest.raises(CorruptCheckpointError, match="group 0 needs 114 elements but the ranks"):
        open_checkpoint(root)
    # a rank-count mismatch: a third rank's file left from another run
    shutil.copy(rank1, root / STEP / "zero_pp_rank_2_mp_rank_00_optim_states.pt")
    with pytest.raises(CorruptCheckpointError, match="rank 2, but partition_count says 2"):
        open_checkpoint(root)


@pytest.mark.parametrize("case", ["zero1_bf16_1rank", "zero3_bf16_2rank"])
def test_every_file_gets_the_allowlist_verdict(case: str) -> None:
    """Every file is judged; deepspeed's own classes are safe for its loader (issue #44)."""
    with open_checkpoint(DEEPSPEED / case) as ckpt:
        assert ckpt.safety is not None
        assert ckpt.safety.verdict is Verdict.SAFE
        assert not ckpt.safety.untrusted()
        names = {g.name for g in ckpt.safety.produced()}
        assert names >= DEEPSPEED_GLOBALS
        assert all(n.startswith("deepspeed.") for n in names)
        wheres = {g.where.split(":")[0] for g in ckpt.safety.globals}
        assert len(wheres) == len(list((DEEPSPEED / case / STEP).glob("*.pt")))
        assert any("weights_only=True), the default since torch 2.6, refuses" in n
                   for n in ckpt.notes)  # fmt: skip


@pytest.mark.parametrize("case", ["zero1_fp32_2rank", "zero2_bf16_2rank", "zero3_bf16_2rank"])
def test_convert_writes_zero_to_fp32s_tensors(case: str, tmp_path: Path) -> None:
    out = tmp_path / "model.safetensors"
    convert(DEEPSPEED / case, out)
    tensors = read_safetensors(out)
    want = expected(case)
    assert list(tensors) == [n for n, _ in want]  # written in zero_to_fp32's order
    for name, one in want:
        dtype, shape, raw = tensors[name]
        assert [dtype, shape] == [one["dtype"], one["shape"]]
        assert digest(raw) == one["sha256"], name


@pytest.mark.parametrize("case", ["zero2_fp32_2rank", "zero3_fp32_2rank"])
def test_convert_copies_each_piece_straight_from_its_rank_file(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameter split over the ranks is copied piece by piece with the file-range copy
    (``copy_ranges``), never gathered in memory; the output stays zero_to_fp32's bytes."""
    from ckptctl.sources import copy_range, copy_ranges

    copied: list[tuple[str, int]] = []

    def spy(source: Any, offset: int, length: int, out: Any) -> None:
        copied.append((Path(source.path).name, length))
        copy_range(source, offset, length, out)

    def spy_ranges(ranges: Any, out: Any) -> None:
        listed = list(ranges)
        copied.extend((Path(source.path).name, length) for source, _, length in listed)
        copy_ranges(listed, out)

    monkeypatch.setattr("ckptctl.formats._base.copy_range", spy)
    monkeypatch.setattr("ckptctl.formats._base.copy_ranges", spy_ranges)
    out = tmp_path / "model.safetensors"
    convert(DEEPSPEED / case, out)
    want = expected(case)
    tensors = read_safetensors(out)
    assert {n: digest(raw) for n, (_, _, raw) in tensors.items()} == {
        n: one["sha256"] for n, one in want
    }
    # every byte of the output's tensors came through the file-range copy, split ones in pieces
    itemsize = {"F32": 4, "I64": 8}
    assert sum(n for _, n in copied) == sum(
        math.prod(one["shape"]) * itemsize[one["dtype"]] for _, one in want
    )
    assert len(copied) > len(want)
    optim = {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(2)}
    assert optim <= {name for name, _ in copied}


def test_convert_state_key_writes_one_optimizer_state(tmp_path: Path) -> None:
    case = "zero3_fp32_2rank"
    out = tmp_path / "exp_avg.safetensors"
    convert(DEEPSPEED / case, out, ConvertOptions(state_key="exp_avg"))
    tensors = read_safetensors(out)
    universal = truth(case)["optimizer"]
    assert sorted(tensors) == sorted(n for n, s in universal.items() if "exp_avg" in s)
    for name, (_, _, raw) in tensors.items():
        assert digest(raw) == universal[name]["exp_avg"]["sha256"]


@pytest.mark.parametrize("case", ["zero2_bf16_2rank", "zero3_fp32_2rank"])
def test_three_shares_and_the_index_equal_one_whole_run(
    case: str, tmp_path: Path, run_cli: Any
) -> None:
    written = assert_shares_equal_one_run(run_cli, DEEPSPEED / case, tmp_path, "200")
    index = json.loads(written["model.safetensors.index.json"])
    got: dict[str, str] = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors = read_safetensors(tmp_path / "split" / shard)
        got.update((name, digest(raw)) for name, (_, _, raw) in tensors.items())
    assert got == {name: one["sha256"] for name, one in expected(case)}


def test_header_lists_every_file_and_accounts_for_its_bytes() -> None:
    case = DEEPSPEED / "zero3_bf16_2rank"
    layout = read_layout(case)
    assert layout.format == "deepspeed-zero"
    assert layout.header["zero_stage"] == 3
    assert layout.header["world_size"] == 2
    files = {f["file"]: f for f in layout.header["files"]}
    on_disk = {p.name: p.stat().st_size for p in (case / STEP).glob("*.pt")}
    assert {n: f["bytes"] for n, f in files.items()} == on_disk
    for f in files.values():
        assert sum(f["regions"].values()) == f["bytes"]
    assert layout.header["param_shapes"]["embed.weight"] == [11, 6]
    assert [(r.start, r.end) for r in layout.regions] == [(0, (case / "latest").stat().st_size)]


def test_cli_ls_diff_verify(run_cli: Any, tmp_path: Path) -> None:
    case = DEEPSPEED / "zero2_bf16_2rank"
    listed = run_cli("ls", case, "--json")
    assert listed.code == 0
    data = json.loads(listed.stdout)
    assert data["format"] == "deepspeed-zero"
    assert [t["name"] for t in data["tensors"]] == [n for n, _ in expected(case.name)]
    states = json.loads(run_cli("ls", case, "--state-key", "exp_avg_sq", "--json").stdout)
    assert {t["name"] for t in states["tensors"]} == {
        "embed.weight", "fc1.weight", "fc1.bias", "out.weight", "out.bias"
    }  # fmt: skip
    same = run_cli("diff", case, DEEPSPEED / "truth" / f"{case.name}.pt")
    assert same.code == 0, same.stdout
    passed = run_cli("verify", case)  # deepspeed's own classes, read by its loader (#44)
    assert passed.code == 0, passed.stdout
    assert "DeepSpeed's loader" in passed.stdout
    assert passed.stdout.count("PASS") == 1  # the folder is one checkpoint, not five files


def _hostile_zip(path: Path) -> None:
    """A torch.save-shaped zip whose data.pkl calls ``os.system`` (never to be unpickled)."""
    import zipfile

    payload = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def test_a_hostile_rank_file_makes_the_save_unsafe(tmp_path: Path, monkeypatch: Any) -> None:
    import os

    from ckptctl import UnsafePickleError
    from ckptctl.report.verify import FileVerdict

    ran: list[object] = []
    monkeypatch.setattr(os, "system", lambda *a: ran.append(a))
    root = copy_case("zero2_fp32_2rank", tmp_path)
    victim = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    _hostile_zip(root / STEP / victim)
    with pytest.raises(UnsafePickleError, match=victim):
        open_checkpoint(root)
    report = verify(root)
    assert not report.ok
    assert report.files[0].verdict is FileVerdict.UNSAFE
    pickle = next(f for f in report.files[0].findings if f.check == "safe-pickle")
    assert pickle.safety is not None
    assert any(g.name == "os.system" and g.where.startswith(victim) for g in pickle.safety.globals)
    assert ran == []


def test_verify_of_a_folder_of_saves_checks_each_save_once(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for case in ("zero1_fp32_1rank", "zero3_bf16_2rank"):
        shutil.copytree(DEEPSPEED / case, runs / case)
    report = verify(runs, allow_globals=DEEPSPEED_GLOBALS | {
        "deepspeed.utils.tensor_fragment.fragment_address"})  # fmt: skip
    assert [Path(f.path).name for f in report.files] == ["zero1_fp32_1rank", "zero3_bf16_2rank"]
    assert report.ok


def test_a_latest_file_of_another_program_is_not_a_save(tmp_path: Path) -> None:
    (tmp_path / "latest").write_text("v2\n")  # some other tool's marker
    shutil.copy(DEEPSPEED / "truth" / "zero1_fp32_1rank.pt", tmp_path / "model.pt")
    assert resolve_path(tmp_path) == str(tmp_path / "model.pt")
    with open_checkpoint(tmp_path) as ckpt:
        assert ckpt.format == "pytorch-zip"


def test_each_tensor_says_how_many_pieces_and_rank_files_it_spans() -> None:
    with open_checkpoint(DEEPSPEED / "zero3_fp32_2rank") as ckpt:
        # stage 3 splits every parameter over both ranks (the frozen ones too)
        for name in ("fc1.weight", "out.bias", "frozen.weight"):
            assert (ckpt[name].extra["chunks"], ckpt[name].extra["rank_files"]) == ("2", "2")
    with open_checkpoint(DEEPSPEED / "zero2_fp32_1rank") as ckpt:
        assert (ckpt["fc1.weight"].extra["chunks"], ckpt["fc1.weight"].extra["rank_files"]) == (
            "1",
            "1",
        )
