"""``ckptctl.ops.convert.convert``: what it selects, warns about, refuses and writes.

``convert`` plans, then writes; its report (plan rows, warnings, refusal, fields) is what the
CLI prints. Each test drives ``convert`` (or the CLI) and checks the output against ground
truth: the fixtures' ``truth.json``, ``make_optim.py``'s ParamIds, the burnpack spec fixtures,
the DeepSpeed ``truth/*.json`` and arrays written in the test. Warnings and refusals are
checked for the facts they carry (counts, tensor names, paths, the option that settles them),
with a keyword, never their sentences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.errors import ExitCode, OutputError, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.model import ComputedData, TensorEntry
from ckptctl.ops import convert as convert_mod
from ckptctl.ops.convert import ConvertOptions, convert, read_param_ids
from ckptctl.report.model import PlanRow
from tests.conftest import VALID
from tests.formats.test_deepspeed import truth
from tests.ops.test_verify import MO
from tests.strategies import array_entry

PT = VALID / "pytorch"
OPTIM = VALID / "optim"
BURNPACK = VALID / "burnpack"
SHARDED_INDEX = VALID / "safetensors" / "sharded" / "model.safetensors.index.json"
TRUTH = json.loads((PT / "truth.json").read_text())["files"]
ROPE = Option("adapters", "rope-interleaved:HEADS,KV_HEADS")


def warnings_of(report) -> list[str]:
    return [str(w) for w in report.warnings]


def warning(report, keyword: str) -> str:
    """The one warning of ``report`` that holds ``keyword``."""
    (found,) = [w for w in warnings_of(report) if keyword in w]
    return found


def st(path: Path, entries, metadata=None) -> Path:
    save_checkpoint(path, entries, metadata or {}, force=True)
    return path


def computed(name: str, raw: bytes) -> TensorEntry:
    entry = array_entry(name, np.frombuffer(raw, np.uint8))
    return replace(entry, data=ComputedData(lambda: raw))


def sharded_source(tmp_path: Path) -> Path:
    """Three 8-byte tensors (a, b, c) and two metadata entries: two shards of at most 16."""
    entries = [computed("a", b"\x01" * 8), computed("b", b"\x02" * 8), computed("c", b"\x03" * 8)]
    return st(tmp_path / "src.safetensors", entries, {"format": "pt", "note": "kept"})


# --- state key ----------------------------------------------------------------------------------


def test_state_key_descends_and_strips_the_prefix(tmp_path):
    report = convert(
        PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(state_key="model")
    )
    model = [t for t in TRUTH["nested.pt"]["tensors"] if t["name"].startswith("model.")]
    others = [t["name"] for t in TRUTH["nested.pt"]["tensors"] if t not in model]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert [(e.name, list(e.shape)) for e in out.values()] == [
            (t["name"].removeprefix("model."), t["shape"]) for t in model
        ]
    (note,) = report.warnings
    assert isinstance(note, Note)
    assert note.fixes == (Option("state_key", "model"),)
    # how many are left out of how many, and the first three of them
    assert str(note).startswith(f"{len(others)} of {len(others) + len(model)} tensors ")
    assert f"({', '.join(others[:3])}, ...)" in str(note)


def test_unknown_state_key_names_the_groups_of_the_file(tmp_path):
    with pytest.raises(SelectionError, match="state key") as info:
        convert(PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(state_key="nope"))
    assert "'nope'" in info.value.message
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.hint == "tensors are under 'model' (4), 'optimizer' (12)"
    assert info.value.path == str(PT / "nested.pt")
    assert not (tmp_path / "o.safetensors").exists()


def test_nested_source_without_state_key_warns_with_the_groups(tmp_path):
    report = convert(PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(dry_run=True))
    (note,) = report.warnings
    assert isinstance(note, Note)
    assert "nested" in note.text
    assert "'model' (4), 'optimizer' (12)" in note.text
    assert note.fixes == (Option("state_key", takes_value=True),)


def test_nested_warning_names_the_first_four_groups_only(tmp_path, monkeypatch):
    from ckptctl.model import Checkpoint, CheckpointKind, Structure

    groups = {k: 1 for k in "abcdef"}
    entries = [computed(f"{k}.w", b"\x01") for k in groups]
    ckpt = Checkpoint(
        entries, path="c.pt", format="pytorch-zip", kind=CheckpointKind.NESTED,
        structure=Structure(0, groups, None, tuple(groups)),
    )  # fmt: skip
    monkeypatch.setattr(convert_mod, "open_checkpoint", lambda src: ckpt)
    report = convert("c.pt", tmp_path / "o.safetensors", ConvertOptions(dry_run=True))
    text = warning(report, "nested")
    assert "'a' (1), 'b' (1), 'c' (1), 'd' (1)" in text
    assert "'e'" not in text


def test_a_state_key_naming_a_view_leaves_no_tensor_outside(tmp_path: Path) -> None:
    """A DeepSpeed save's ``exp_avg`` is a view (every parameter's state, by name), not a
    prefix: nothing is "outside" it, although no tensor name starts with ``exp_avg.``."""
    case = "zero2_fp32_1rank"
    report = convert(
        VALID / "deepspeed" / case,
        tmp_path / "o.safetensors",
        ConvertOptions(state_key="exp_avg", dry_run=True),
    )
    universal = truth(case)["optimizer"]
    assert sorted(row.source for row in report.plan) == sorted(
        n for n, s in universal.items() if "exp_avg" in s
    )
    assert [w for w in warnings_of(report) if "outside" in w] == []


def test_the_state_key_warning_comes_before_the_other_warnings(tmp_path: Path) -> None:
    src = st(
        tmp_path / "s.safetensors",
        [
            array_entry("model.layers.0.self_attn.q_proj.weight", np.zeros((4, 4), "<f4")),
            array_entry("optimizer.step", np.zeros(1, "<f4")),
        ],
    )
    rule = r"^layers\.(\d+)\.self_attn\.q_proj\.=layers.$1.attention.wq."
    opts = ConvertOptions(state_key="model", remap=(rule,), dry_run=True)
    outside, rope = convert(src, tmp_path / "o.safetensors", opts).warnings
    assert isinstance(outside, Note)
    assert isinstance(rope, Note)
    assert str(outside).startswith("1 of 2 tensors ")
    assert "(optimizer.step)" in str(outside)
    assert rope.fixes == (ROPE,)


# --- target -------------------------------------------------------------------------------------


def test_target_shapes_are_evidence_for_the_layout_adapter(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("emb.weight", np.zeros((2, 3), "<f4"))])
    ref = st(tmp_path / "t.safetensors", [array_entry("emb.weight", np.zeros((3, 2), "<f4"))])
    opts = ConvertOptions(adapters=("pytorch-to-burn",), target=str(ref))
    report = convert(src, tmp_path / "o.bpk", opts)
    assert report.ok
    assert report.warnings == ()
    assert report.plan[0].shape_after == (3, 2)
    assert report.plan[0].kinds == ("transpose",)
    with open_checkpoint(tmp_path / "o.bpk") as out:
        assert out["emb.weight"].shape == (3, 2)


def test_a_target_that_does_not_fit_refuses_and_writes_nothing(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(2, "<f4"))])
    ref = st(tmp_path / "t.safetensors", [array_entry("b", np.zeros(2, "<f4"))])
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.ok is False
    assert report.written is False
    assert isinstance(report.refused, Note)
    assert report.refused.fixes == (Option("target", takes_value=True), Option("allow_partial"))
    assert report.summary is not None
    assert report.summary.ok is False
    assert report.fixes == report.summary.fixes
    assert not (tmp_path / "o.safetensors").exists()
    partial = ConvertOptions(target=str(ref), allow_partial=True)
    written = convert(src, tmp_path / "o.safetensors", partial)
    assert (written.ok, written.written) == (False, True)
    assert written.bytes_written == (tmp_path / "o.safetensors").stat().st_size


def test_an_adapter_already_given_is_not_suggested_again(tmp_path: Path) -> None:
    """``fc.weight`` [2, 3] goes through pytorch-to-burn (a Linear by its name: transposed to
    [3, 2]); the target wants ``fc1.weight`` [2, 3]. The rename is the fix; renamed, the tensor
    looks like it misses a transpose, but pytorch-to-burn was given and is not offered again."""
    src = st(tmp_path / "s.safetensors", [array_entry("fc.weight", np.zeros((2, 3), "<f4"))])
    ref = st(tmp_path / "t.safetensors", [array_entry("fc1.weight", np.zeros((2, 3), "<f4"))])
    opts = ConvertOptions(adapters=("pytorch-to-burn",), target=str(ref), infer=False)
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert not report.ok
    assert report.plan[0].shape_after == (3, 2)
    assert [f.name for f in report.fixes] == ["remap"]
    assert Option("adapters", "pytorch-to-burn") not in report.fixes


# --- strict -------------------------------------------------------------------------------------


def test_strict_names_every_unused_rule_and_writes_nothing_even_with_allow_partial(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a.w", np.zeros(2, "<f4"))])
    opts = ConvertOptions(remap=(r"^x\.=y.", r"^a\.=b.", r"^z=q"), strict=True, allow_partial=True)
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.ok is False
    assert report.written is False
    assert isinstance(report.refused, Note)
    assert report.refused.fixes == (Option("strict"),)
    assert "#1, #3 " in report.refused.text  # the unused rules, not #2
    assert not (tmp_path / "o.safetensors").exists()
    fine = convert(
        src, tmp_path / "o.safetensors", ConvertOptions(remap=(r"^a\.=b.",), strict=True)
    )
    assert (fine.ok, fine.written, fine.refused) == (True, True, None)


# --- ParamIds -----------------------------------------------------------------------------------


def test_param_ids_from_a_model_are_written_to_burnpack(tmp_path):
    model = str(OPTIM / "model.bpk")
    report = convert(
        OPTIM / "model.safetensors", tmp_path / "o.bpk", ConvertOptions(param_ids_from=model)
    )
    note = warning(report, "ParamIds")
    assert model in note
    assert "7 of 7" in note
    with open_checkpoint(tmp_path / "o.bpk") as out:
        assert {e.name: e.param_id for e in out.values()} == MO.IDS


def test_param_ids_count_and_attach_only_matched_tensors(tmp_path):
    src = st(
        tmp_path / "s.safetensors",
        [array_entry("fc.bias", np.zeros(3, "<f4")), array_entry("other", np.zeros(1, "<f4"))],
    )
    record = str(OPTIM / "optim.bpk")
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(param_ids_from=record))
    note = warning(report, "ParamIds")
    assert "optimizer record" in note
    assert record in note
    assert "1 of 2" in note
    with open_checkpoint(tmp_path / "o.bpk") as out:
        assert {e.name: e.param_id for e in out.values()} == {
            "fc.bias": MO.IDS["fc.bias"],
            "other": None,
        }


def test_read_param_ids_from_an_optimizer_record_maps_paths_to_ids():
    ids, kind = read_param_ids(OPTIM / "optim.bpk")
    assert kind == "optimizer record"
    assert ids == {name: MO.IDS[name] for name in MO.TRAINABLE}


def test_read_param_ids_keeps_the_first_id_of_a_path_named_twice():
    with open_checkpoint(OPTIM / "optim_grown.bpk") as ckpt:
        first: dict[str, int] = {}
        for key, name in ckpt.metadata.items():
            if key.isdigit() and name not in first:
                first[name] = int(key)
    ids, kind = read_param_ids(OPTIM / "optim_grown.bpk")
    assert kind == "optimizer record"
    assert ids == first
    assert set(ids) == set(MO.TRAINABLE)


def test_read_param_ids_from_a_model():
    assert read_param_ids(OPTIM / "model.bpk") == (MO.IDS, "model")


def test_read_param_ids_from_a_file_without_ids():
    with pytest.raises(SelectionError, match="ParamIds") as info:
        read_param_ids(OPTIM / "model_noids.bpk")
    assert info.value.path == str(OPTIM / "model_noids.bpk")
    assert info.value.exit_code == ExitCode.USAGE


# --- what the output format loses ---------------------------------------------------------------


def one_metadata_entry(tmp_path: Path) -> Path:
    entries = [array_entry("a", np.zeros(1, "<f4"))]
    return st(tmp_path / "k.safetensors", entries, {"k": "v"})


@pytest.mark.parametrize(
    ("source", "ext", "lost"),
    [
        # burnpack keeps ParamIds, scalars and metadata; safetensors keeps metadata only
        (OPTIM / "model.bpk", "bpk", []),
        (BURNPACK / "meta_scalars.bpk", "bpk", []),
        (OPTIM / "model.bpk", "safetensors", [("7 ParamIds", "safetensors")]),
        (OPTIM / "model.bpk", "pt", [("7 ParamIds", "pytorch")]),
        (BURNPACK / "meta_scalars.bpk", "safetensors", [("6 burnpack scalars", "safetensors")]),
        (
            BURNPACK / "meta_scalars.bpk",
            "pt",
            [("6 burnpack scalars", "pytorch"), ("2 metadata entries", "'format', 'producer'")],
        ),
        (one_metadata_entry, "pt", [("metadata entry 'k'", "not kept")]),
        (one_metadata_entry, "safetensors", []),
        (PT / "min_zip.pt", "safetensors", []),
    ],
)
def test_what_the_output_format_has_no_place_for_is_named(tmp_path, source, ext, lost):
    src = source(tmp_path) if callable(source) else source
    report = convert(src, tmp_path / f"o.{ext}", ConvertOptions())
    assert len(report.warnings) == len(lost), report.warnings
    for text, (what, where) in zip(warnings_of(report), lost, strict=True):
        assert text.startswith(what)
        assert where in text


def test_burnpack_keeps_param_ids_scalars_and_metadata(tmp_path):
    convert(OPTIM / "model.bpk", tmp_path / "o.bpk", ConvertOptions())
    with open_checkpoint(tmp_path / "o.bpk") as out:
        assert {e.name: e.param_id for e in out.values()} == MO.IDS
    convert(BURNPACK / "meta_scalars.bpk", tmp_path / "m.bpk", ConvertOptions())
    with open_checkpoint(BURNPACK / "meta_scalars.bpk") as src:
        metadata, scalars = dict(src.metadata), dict(src.scalars)
    with open_checkpoint(tmp_path / "m.bpk") as out:
        assert dict(out.metadata) == metadata
        assert dict(out.scalars) == scalars
        assert out.metadata["producer"] == "burn"


def test_safetensors_output_keeps_the_metadata(tmp_path):
    convert(BURNPACK / "meta_scalars.bpk", tmp_path / "o.safetensors", ConvertOptions())
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert out.metadata["producer"] == "burn"
        assert out.metadata["format"] == "burnpack"


def test_pytorch_source_metadata_is_not_carried(tmp_path):
    convert(PT / "min_zip.pt", tmp_path / "o.safetensors", ConvertOptions())
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert dict(out.metadata) == {}


# --- tied tensors -------------------------------------------------------------------------------


def tied_pt(path: Path, tied: int, numel: int) -> Path:
    """A .pt whose first ``tied + 1`` tensors (a, b, ...) share one storage, then ``solo``."""
    values = np.arange(numel, dtype="<f4")
    view = {"storage": "s", "storage_offset": "0", "stride": "(1,)"}
    entries = [replace(array_entry(chr(97 + k), values), extra=view) for k in range(tied + 1)]
    save_checkpoint(path, [*entries, array_entry("solo", np.zeros(2, "<f4"))], {})
    return path


@pytest.mark.parametrize(
    ("source", "aliases", "extra"),
    [
        (lambda tmp: PT / "shared_storage.pt", 2, 128),  # two aliases of [4, 4] f32
        (lambda tmp: tied_pt(tmp / "t.pt", 1, 3), 1, 12),
        (lambda tmp: tied_pt(tmp / "t.pt", 2, 1000), 2, 8000),
    ],
)
def test_tied_tensors_are_copied_with_a_note_saying_how_many_and_how_big(
    tmp_path, source, aliases, extra
):
    src = source(tmp_path)
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions())
    (note,) = report.warnings
    assert isinstance(note, Note)
    assert note.fixes == (Option("dedupe_tied"),)
    assert note.text.startswith(f"{aliases} tensor{'s' if aliases > 1 else ''} ")
    assert f" {extra:,} bytes" in note.text  # 8,000: with separators
    with open_checkpoint(src) as ckpt:
        names = list(ckpt)
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == names
        assert "tied_weights" not in out.metadata


@pytest.mark.parametrize(
    ("source", "aliases", "extra", "groups"),
    [
        (
            lambda tmp: PT / "shared_storage.pt",
            2,
            128,
            {"embed.weight": ["head.weight", "head_detached.weight"]},
        ),
        (lambda tmp: tied_pt(tmp / "t.pt", 1, 3), 1, 12, {"a": ["b"]}),
        (lambda tmp: tied_pt(tmp / "t.pt", 2, 1000), 2, 8000, {"a": ["b", "c"]}),
    ],
)
def test_dedupe_tied_keeps_the_first_and_records_the_others(
    tmp_path, source, aliases, extra, groups
):
    src = source(tmp_path)
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(dedupe_tied=True))
    (note,) = warnings_of(report)
    assert note.startswith(f"{aliases} tied alias")
    assert f"({extra:,} bytes)" in note
    assert "'tied_weights'" in note
    dropped = {name for names in groups.values() for name in names}
    with open_checkpoint(src) as ckpt:
        names = list(ckpt)
    assert [(r.source, r.target) for r in report.plan] == [
        (n, None if n in dropped else n) for n in names
    ]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == [n for n in names if n not in dropped]
        assert json.loads(out.metadata["tied_weights"]) == groups


def test_a_dropped_tensor_stays_dropped_when_deduping(tmp_path):
    opts = ConvertOptions(dedupe_tied=True, exclude=("^row$",))
    report = convert(PT / "shared_storage.pt", tmp_path / "o.safetensors", opts)
    rows = {r.source: r for r in report.plan}
    assert rows["row"].target is None
    assert rows["row"].kinds == ("drop",)  # dropped by the filter, not as an alias
    assert rows["head.weight"].target is None
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == ["embed.weight", "column", "tail"]


def test_pytorch_output_keeps_tied_storages_without_a_note(tmp_path):
    report = convert(PT / "shared_storage.pt", tmp_path / "o.pt", ConvertOptions(dedupe_tied=True))
    assert report.warnings == ()
    assert all(r.target == r.source for r in report.plan)


# --- plan rows ----------------------------------------------------------------------------------


def test_plan_rows_of_a_cast_and_a_dropped_tensor(tmp_path):
    src = st(
        tmp_path / "s.safetensors",
        [array_entry("keep", np.zeros((2, 3), "<f4")), array_entry("drop", np.zeros(4, "<f4"))],
    )
    opts = ConvertOptions(exclude=("^drop$",), adapters=("cast:f16",), dry_run=True)
    report = convert(src, tmp_path / "o.safetensors", opts)
    keep, drop = report.plan
    assert keep.source == "keep"
    assert keep.target == "keep"
    assert (keep.dtype_before, keep.dtype_after) == ("F32", "F16")
    assert (keep.shape_before, keep.shape_after) == ((2, 3), (2, 3))
    assert keep.kinds == ("cast",)
    assert len(keep.actions) == 1
    assert drop == PlanRow(
        source="drop",
        target=None,
        dtype_before="F32",
        dtype_after=None,
        shape_before=(4,),
        shape_after=None,
        actions=drop.actions,
        kinds=drop.kinds,
    )
    assert report.dry_run is True
    assert report.written is False
    assert report.warnings == ()


def test_plan_row_of_a_renamed_tensor(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a.w", np.zeros(2, "<f2"))])
    report = convert(
        src, tmp_path / "o.safetensors", ConvertOptions(remap=(r"^a\.=b.",), dry_run=True)
    )
    (row,) = report.plan
    assert (row.source, row.target, row.dtype_before, row.dtype_after) == (
        "a.w",
        "b.w",
        "F16",
        "F16",
    )
    assert (row.shape_before, row.shape_after) == ((2,), (2,))
    assert row.kinds == ("rename",)
    assert len(row.actions) == 1


# --- module-type map ----------------------------------------------------------------------------


def plan_with_map(tmp_path: Path, path: Path) -> tuple[str, ...]:
    src = st(tmp_path / "s.safetensors", [array_entry("emb.weight", np.zeros((2, 3), "<f4"))])
    opts = ConvertOptions(adapters=("pytorch-to-burn",), module_types_file=str(path), dry_run=True)
    report = convert(src, tmp_path / "o.bpk", opts)
    assert report.warnings == ()
    return report.plan[0].actions


@pytest.mark.parametrize(
    ("content", "keyword", "fact"),
    [
        (None, "cannot read", os.strerror(2)),  # ENOENT, in the OS's words
        (b"{nope", "JSON", "line 1"),  # json's own position of the error
        (b'{"\xff": 1}', "JSON", "utf-8"),
        (b'["a", "b"]', "JSON object", "{regex: type}"),
    ],
    ids=["missing", "not-json", "not-utf8", "not-an-object"],
)
def test_a_bad_module_type_map_is_refused_naming_the_file(tmp_path, content, keyword, fact):
    path = tmp_path / "types.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SelectionError, match=keyword) as info:
        plan_with_map(tmp_path, path)
    assert info.value.path == str(path)
    assert info.value.exit_code == ExitCode.USAGE
    assert "module-type map" in info.value.message
    assert fact in info.value.message


def test_module_type_map_file_decides_the_layout(tmp_path):
    types = tmp_path / "types.json"
    types.write_text('{"emb": "Linear"}', encoding="utf-8")
    assert plan_with_map(tmp_path, types) == (
        "transpose [2, 3] -> [3, 2]: Linear (module rule #1 'emb=Linear')",
    )


def test_module_type_map_is_read_as_utf8_whatever_the_locale(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("straße.weight", np.zeros((2, 3), "<f4"))])
    types = tmp_path / "types.json"
    types.write_text(json.dumps({"^straße\\.": "Linear"}, ensure_ascii=False), encoding="utf-8")
    code = (
        "import sys; from ckptctl.ops.convert import ConvertOptions as O, convert; "
        "r = convert(sys.argv[1], sys.argv[2], O(adapters=('pytorch-to-burn',), "
        "module_types_file=sys.argv[3], dry_run=True)); print(ascii(r.plan[0].shape_after))"
    )
    # the C locale without UTF-8 mode or coercion: open()'s default encoding is ASCII there
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    root = Path(__file__).resolve().parents[2]
    probe = "import locale; print(locale.getpreferredencoding(False))"
    ascii_default = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True
    )
    assert ascii_default.stdout.strip() == "ANSI_X3.4-1968"
    args = [str(src), str(tmp_path / "o.bpk"), str(types)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "(3, 2)\n"  # the rule read from the file made it a Linear
    # in this process too: mutmut picks the tests to run per function from in-process calls
    opts = ConvertOptions(adapters=("pytorch-to-burn",), module_types_file=str(types))
    report = convert(src, tmp_path / "o.bpk", replace(opts, dry_run=True))
    assert report.plan[0].shape_after == (3, 2)


# --- empty output, the source as destination, sharded output ------------------------------------


def test_an_empty_output_warns_but_not_on_a_dry_run(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(1, "<f4"))])
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(exclude=("a",)))
    assert warning(report, "no tensors")
    assert report.written is True
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == []
    dry = convert(src, tmp_path / "p.safetensors", ConvertOptions(exclude=("a",), dry_run=True))
    assert dry.warnings == ()


@pytest.mark.parametrize(
    "dst",
    [
        SHARDED_INDEX,
        SHARDED_INDEX.parent / "model-00001-of-00002.safetensors",
        SHARDED_INDEX.parent / "model-00002-of-00002.safetensors",
    ],
    ids=["index", "shard-1", "shard-2"],
)
def test_no_file_of_a_sharded_source_can_be_its_destination(dst):
    before = dst.read_bytes()
    with pytest.raises(OutputError, match="input") as info:
        convert(SHARDED_INDEX, dst, ConvertOptions(force=True, to="safetensors"))
    assert info.value.exit_code == ExitCode.OUTPUT
    assert str(dst) in str(info.value)
    assert dst.read_bytes() == before


def test_a_single_file_source_cannot_be_its_destination(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(1, "<f4"))])
    before = src.read_bytes()
    with pytest.raises(OutputError, match="input"):
        convert(src, src, ConvertOptions(force=True))
    assert src.read_bytes() == before


def test_sharded_output_report(tmp_path):
    src = st(
        tmp_path / "s.safetensors",
        [array_entry(n, np.arange(64, dtype="<f4")) for n in ("a", "b", "c")],
    )
    (tmp_path / "out").mkdir()
    report = convert(
        src, tmp_path / "out" / "model.safetensors", ConvertOptions(max_shard_bytes=300)
    )
    files = sorted((tmp_path / "out").iterdir())
    index = tmp_path / "out" / "model.safetensors.index.json"
    assert report.destination == str(index)
    assert report.destination_format == f"safetensors, {len(files) - 1} shards"
    assert report.bytes_written == sum(f.stat().st_size for f in files)
    assert report.written is True


def test_sharded_output_keeps_metadata_and_honours_force(tmp_path):
    src = sharded_source(tmp_path)
    dst = tmp_path / "out" / "model.safetensors"
    dst.parent.mkdir()
    opts = ConvertOptions(max_shard_bytes=16, fsync=False)
    report = convert(src, dst, opts)
    assert report.destination == f"{dst}.index.json"
    shard = tmp_path / "out" / "model-00001-of-00002.safetensors"
    with open_checkpoint(shard) as first:
        assert dict(first.metadata) == {"format": "pt", "note": "kept"}
        assert list(first) == ["a", "b"]
    with pytest.raises(OutputError, match="exists"):
        convert(src, dst, opts)
    again = convert(src, dst, ConvertOptions(max_shard_bytes=16, fsync=False, force=True))
    assert again.written


def test_sharded_output_refuses_to_overwrite_its_source(tmp_path):
    src = sharded_source(tmp_path)
    shard = tmp_path / "model-00001-of-00002.safetensors"
    src.rename(shard)
    before = shard.read_bytes()
    with pytest.raises(OutputError, match="input") as info:
        convert(
            shard, tmp_path / "model.safetensors", ConvertOptions(max_shard_bytes=16, force=True)
        )
    assert info.value.exit_code == ExitCode.OUTPUT
    assert str(info.value).startswith(f"{shard}: ")
    assert shard.read_bytes() == before


# --- a sharded output split over several runs ---------------------------------------------------


def split_error(tmp_path: Path, keyword: str, **options: object) -> SelectionError:
    src = sharded_source(tmp_path)
    with pytest.raises(SelectionError, match=keyword) as info:
        convert(src, tmp_path / "out.safetensors", ConvertOptions(**options))  # type: ignore[arg-type]
    assert info.value.exit_code == ExitCode.USAGE
    assert not (tmp_path / "out.safetensors").exists()
    return info.value


@pytest.mark.parametrize("split", [{"shards": (1, 2)}, {"index_only": True}])
def test_a_share_or_the_index_alone_needs_a_sharded_output(
    tmp_path: Path, split: dict[str, object]
) -> None:
    error = split_error(tmp_path, "sharded output", **split)
    assert isinstance(error.hint, Note)
    assert error.hint.fixes == (Option("max_shard_bytes", "5GB"),)


def test_the_cli_names_the_shard_size_flag_with_an_example(tmp_path: Path, run_cli) -> None:
    src = sharded_source(tmp_path)
    result = run_cli("convert", src, tmp_path / "out.safetensors", "--shards", "1/2")
    assert result.code == 2
    assert "--max-shard-size 5GB" in result.stderr


def test_a_run_cannot_write_a_share_and_the_index(tmp_path: Path) -> None:
    error = split_error(tmp_path, "not both", max_shard_bytes=16, shards=(1, 2), index_only=True)
    assert "share" in error.message
    assert "index" in error.message
    assert error.hint


@pytest.mark.parametrize(
    ("share", "runs"),
    [((0, 3), 3), ((4, 3), 3), ((2, 1), 1), ((1, 0), 1)],
)
def test_a_share_outside_one_to_n_is_refused_with_the_real_ones(
    tmp_path: Path, share: tuple[int, int], runs: int
) -> None:
    error = split_error(tmp_path, "does not exist", max_shard_bytes=16, shards=share)
    k, n = share
    assert f"share {k}/{n} " in error.message
    assert isinstance(error.hint, str)
    assert f"1/{runs} .. {runs}/{runs}" in error.hint  # the first and the last real share


def test_share_one_of_one_writes_every_shard_and_no_index(tmp_path: Path) -> None:
    """Three 8-byte tensors in shards of at most 16 bytes: two shards (a+b, c)."""
    src = sharded_source(tmp_path)
    (tmp_path / "out").mkdir()
    opts = ConvertOptions(max_shard_bytes=16, shards=(1, 1), fsync=False)
    report = convert(src, tmp_path / "out" / "model.safetensors", opts)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert report.written is True
    assert report.warnings == ()


def test_a_share_with_a_shard_reports_it_without_a_warning(tmp_path: Path) -> None:
    """Share 2/3 of two shards is shard 2 (shards K, K+N, ...)."""
    src = sharded_source(tmp_path)
    (tmp_path / "out").mkdir()
    opts = ConvertOptions(max_shard_bytes=16, shards=(2, 3), fsync=False)
    report = convert(src, tmp_path / "out" / "model.safetensors", opts)
    shard = tmp_path / "out" / "model-00002-of-00002.safetensors"
    assert sorted((tmp_path / "out").iterdir()) == [shard]
    assert report.written is True
    assert report.destination == str(shard)
    assert report.bytes_written == shard.stat().st_size
    assert report.warnings == ()


def test_a_share_without_a_shard_writes_nothing_and_says_so(tmp_path: Path) -> None:
    """Share 3/3 of two shards would be shards 3, 6, ...: none exists."""
    src = sharded_source(tmp_path)
    (tmp_path / "out").mkdir()
    dst = tmp_path / "out" / "model.safetensors"
    report = convert(src, dst, ConvertOptions(max_shard_bytes=16, shards=(3, 3), fsync=False))
    assert list((tmp_path / "out").iterdir()) == []
    assert report.written is False
    assert report.destination == str(dst)
    assert report.bytes_written == 0
    assert warning(report, "empty")


def test_the_index_only_run_reports_a_safetensors_index(run_cli, tmp_path: Path) -> None:
    """Shares 1/2 and 2/2 write the shards, then the index alone (docs/distributed.md)."""
    src = sharded_source(tmp_path)
    (tmp_path / "out").mkdir()
    dst = tmp_path / "out" / "model.safetensors"
    for share in ((1, 2), (2, 2)):
        convert(src, dst, ConvertOptions(max_shard_bytes=16, shards=share, fsync=False))
    index = tmp_path / "out" / "model.safetensors.index.json"
    assert not index.exists()
    report = convert(src, dst, ConvertOptions(max_shard_bytes=16, index_only=True, fsync=False))
    assert report.written is True
    assert report.destination == str(index)
    assert report.destination_format == "safetensors index"
    assert report.bytes_written == index.stat().st_size
    with open_checkpoint(index) as out:
        assert list(out) == ["a", "b", "c"]
    index.unlink()
    result = run_cli("convert", src, dst, "--max-shard-size", "16", "--index-only")
    assert result.code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert f"{index} (safetensors index)" in said
    assert "3 tensors" in said


# --- the output size limit ----------------------------------------------------------------------


def test_a_given_output_limit_refuses_a_bigger_output(tmp_path: Path) -> None:
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(16, "<f4"))])
    dst = tmp_path / "o.safetensors"
    with pytest.raises(UnsupportedError, match="limit") as info:
        convert(src, dst, ConvertOptions(max_output_bytes=63))
    assert info.value.exit_code == ExitCode.UNSUPPORTED
    assert str(dst) in info.value.message
    assert " 64 bytes" in info.value.message  # what it would write
    assert " 63 bytes" in info.value.message  # the limit given
    assert info.value.path == str(src)
    assert "max_output_bytes" in str(info.value.hint)
    assert not dst.exists()
    assert convert(src, dst, ConvertOptions(max_output_bytes=64)).written


def test_the_default_output_limit_scales_with_the_input(tmp_path: Path) -> None:
    """``pt_expanded_view_huge.pt``: 4 floats expanded to [2**38, 4], 4 TiB from 514 bytes."""
    src = VALID.parent / "hostile" / "limits" / "pt_expanded_view_huge.pt"
    dst = tmp_path / "o.safetensors"
    with pytest.raises(UnsupportedError, match="limit") as info:
        convert(src, dst)
    message = info.value.message
    assert str(dst) in message
    assert f" {2**38 * 4 * 4} bytes" in message  # what it would write
    assert f" {2**30} bytes" in message  # the default: at least 1 GiB ...
    assert f"64 x the input's {src.stat().st_size} bytes" in message  # ... or 64 x the input
    assert info.value.path == str(src)
    assert "max_output_bytes" in str(info.value.hint)
    assert not dst.exists()


# --- progress -----------------------------------------------------------------------------------


def mha_source(tmp_path: Path) -> Path:
    d = 2
    tensors = {
        "attn.in_proj_weight": np.arange(3 * d * d, dtype="<f4").reshape(3 * d, d),
        "attn.in_proj_bias": np.arange(3 * d, dtype="<f4"),
        "attn.out_proj.weight": np.zeros((d, d), "<f4"),
        "attn.out_proj.bias": np.zeros(d, "<f4"),
    }
    return st(tmp_path / "mha.safetensors", [array_entry(n, a) for n, a in tensors.items()])


@pytest.mark.parametrize(
    ("dst", "options"),
    [
        ("o.bpk", ConvertOptions()),  # bytes copied from the file
        ("o.safetensors", ConvertOptions(adapters=("cast:f16",))),  # computed bytes
        ("o.bpk", ConvertOptions(adapters=("pytorch-to-burn",))),  # rows of fused tensors
        ("o.safetensors", ConvertOptions(max_shard_bytes=32)),  # several shards
    ],
    ids=["copy", "cast", "split", "sharded"],
)
def test_progress_reports_each_tensor_once_after_the_total(tmp_path, dst, options):
    src = mha_source(tmp_path)
    calls: list[tuple[int, int | None]] = []
    opts = replace(options, progress=lambda n, total: calls.append((n, total)))
    report = convert(src, tmp_path / dst, opts)
    with open_checkpoint(report.destination) as out:
        sizes = [e.nbytes for e in out.values()]
    total = sum(sizes)
    assert calls[0] == (0, total)  # the total comes before the first tensor
    assert sorted(calls[1:]) == sorted((n, total) for n in sizes)


# --- report fields, formats and writing options -------------------------------------------------


def test_report_names_source_destination_and_formats(tmp_path):
    dst = tmp_path / "o.bpk"
    report = convert(OPTIM / "model.safetensors", dst, ConvertOptions())
    assert report.source == str(OPTIM / "model.safetensors")
    assert report.destination == str(dst)
    assert (report.source_format, report.destination_format) == ("safetensors", "burnpack")
    assert (report.written, report.dry_run, report.ok, report.refused) == (True, False, True, None)
    assert report.summary is None
    assert report.fixes == ()
    assert report.bytes_written == dst.stat().st_size


def test_to_picks_the_format_of_an_unknown_extension(tmp_path):
    dst = tmp_path / "o.ckpt"
    report = convert(OPTIM / "model.safetensors", dst, ConvertOptions(to="burnpack"))
    assert report.destination_format == "burnpack"
    with open_checkpoint(dst) as out:
        assert out.format == "burnpack"


def test_existing_destination_needs_force(tmp_path):
    dst = tmp_path / "o.safetensors"
    dst.write_bytes(b"old")
    with pytest.raises(OutputError) as info:
        convert(OPTIM / "model.safetensors", dst, ConvertOptions())
    assert info.value.exit_code == ExitCode.OUTPUT
    assert dst.read_bytes() == b"old"
    convert(OPTIM / "model.safetensors", dst, ConvertOptions(force=True, fsync=False))
    with open_checkpoint(dst) as out:
        assert list(out) == list(MO.SHAPES)


def test_a_source_pickle_that_needs_trust_is_named_in_a_warning(tmp_path):
    src = VALID / "trust" / "argparse_namespace.pt"  # torch's weights-only loader refuses it
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(state_key="model"))
    note = warning(report, "needs-trust")
    assert "argparse.Namespace" in note
    assert report.written
    with open_checkpoint(VALID / "pytorch" / "min_zip.pt") as safe:
        assert safe.safety is not None
        assert safe.safety.verdict.value == "safe"
    assert warnings_of(convert(VALID / "pytorch" / "min_zip.pt", tmp_path / "p.safetensors")) == []


@pytest.mark.parametrize("fsync", [True, False])
@pytest.mark.parametrize("shard_bytes", [None, 16])
def test_fsync_option_reaches_the_writers(tmp_path, monkeypatch, fsync, shard_bytes):
    src = sharded_source(tmp_path)
    calls: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    convert(
        src, tmp_path / "o.safetensors", ConvertOptions(fsync=fsync, max_shard_bytes=shard_bytes)
    )
    assert bool(calls) is fsync


def test_jobs_option_reaches_the_shard_writer(tmp_path, monkeypatch):
    seen: list[int] = []
    from ckptctl.formats.sharded import write_sharded as real

    assert convert_mod.write_sharded is real  # type: ignore[attr-defined]

    def spy(*args, **kwargs):
        seen.append(kwargs["jobs"])
        return real(*args, **kwargs)

    monkeypatch.setattr(convert_mod, "write_sharded", spy)
    src = sharded_source(tmp_path)
    convert(
        src, tmp_path / "o.safetensors", ConvertOptions(max_shard_bytes=16, jobs=3, fsync=False)
    )
    assert seen == [3]


# --- the RoPE note ------------------------------------------------------------------------------

#: Hugging Face's Llama names and the rules that move them onto Meta's (llama-burn's) names.
HF_QK = {
    "model.layers.0.self_attn.q_proj.weight": np.zeros((4, 4), "<f4"),
    "model.layers.0.self_attn.k_proj.weight": np.ones((4, 4), "<f4"),
}
TO_META = (
    r"^model\.layers\.(\d+)\.self_attn\.q_proj\.=layers.$1.attention.wq.",
    r"^model\.layers\.(\d+)\.self_attn\.k_proj\.=layers.$1.attention.wk.",
)


def hf_qk(tmp_path: Path) -> Path:
    return st(tmp_path / "s.safetensors", [array_entry(n, a) for n, a in HF_QK.items()])


def test_without_a_target_q_and_k_onto_wq_wk_warn_naming_the_rope_adapter(tmp_path: Path) -> None:
    report = convert(hf_qk(tmp_path), tmp_path / "o.safetensors", ConvertOptions(remap=TO_META))
    assert report.written
    (note,) = report.warnings
    assert isinstance(note, Note)
    assert note.fixes == (ROPE,)
    assert note.text.startswith("2 q/k projections ")  # how many
    assert "num_attention_heads" in note.text  # where HEADS and KV_HEADS come from
    assert "num_key_value_heads" in note.text


def test_the_cli_spells_the_rope_adapter_as_its_flag(run_cli, tmp_path: Path) -> None:
    rules = [arg for rule in TO_META for arg in ("--remap", rule)]
    result = run_cli("convert", hf_qk(tmp_path), tmp_path / "o.safetensors", *rules)
    assert result.code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "warning: 2 q/k projections " in said
    assert "--adapter rope-interleaved:HEADS,KV_HEADS" in said
