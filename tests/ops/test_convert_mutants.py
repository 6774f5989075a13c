"""Edge cases of ``ckptctl.ops.convert`` that mutation testing found untested (issue 17).

``convert`` plans and writes: its plan rows, warnings and refusals are printed as they are
(text and ``--json``), so a changed word, count or field is a changed interface. Each helper is
driven on both sides of its branches: the exact warning text (singular and plural), the plan
row of a kept, changed and dropped tensor, the ParamIds and metadata written, and the files a
sharded source is read from. Expected values come from the fixtures' ground truth
(``truth.json``, ``make_optim.py``, the burnpack spec fixtures) and arrays written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.adapters import PlanItem
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, OutputError, SelectionError
from ckptctl.model import ComputedData, TensorEntry
from ckptctl.ops import convert as convert_mod
from ckptctl.ops.convert import ConvertOptions, convert, read_param_ids
from ckptctl.report.model import PlanRow
from tests.conftest import VALID
from tests.ops.test_verify import MO
from tests.strategies import array_entry

PT = VALID / "pytorch"
OPTIM = VALID / "optim"
BURNPACK = VALID / "burnpack"
SHARDED_INDEX = VALID / "safetensors" / "sharded" / "model.safetensors.index.json"
TRUTH = json.loads((PT / "truth.json").read_text())["files"]


def warnings_of(report) -> list[str]:
    return [str(w) for w in report.warnings]


def st(path: Path, entries, metadata=None) -> Path:
    save_checkpoint(path, entries, metadata or {}, force=True)
    return path


def computed(name: str, raw: bytes, dtype: DType = DType.U8) -> TensorEntry:
    return TensorEntry(name, dtype, (len(raw),), len(raw), None, ComputedData(lambda: raw))


# --- state key ----------------------------------------------------------------------------------


def test_state_key_descends_and_strips_the_prefix(tmp_path):
    report = convert(
        PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(state_key="model")
    )
    model = [t for t in TRUTH["nested.pt"]["tensors"] if t["name"].startswith("model.")]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert [(e.name, list(e.shape)) for e in out.values()] == [
            (t["name"].removeprefix("model."), t["shape"]) for t in model
        ]
    assert [str(w) for w in report.warnings] == [
        "12 of 16 tensors are outside state_key='model' and not written (optimizer.state.0.step, "
        "optimizer.state.0.exp_avg, optimizer.state.0.exp_avg_sq, ...)"
    ]


def test_unknown_state_key_names_the_groups_of_the_file(tmp_path):
    with pytest.raises(SelectionError) as info:
        convert(PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(state_key="nope"))
    assert info.value.message == "no tensors under state key 'nope'"
    assert info.value.hint == "tensors are under 'model' (4), 'optimizer' (12)"
    assert info.value.path == str(PT / "nested.pt")
    assert not (tmp_path / "o.safetensors").exists()


def test_nested_source_without_state_key_warns_with_the_groups(tmp_path):
    report = convert(PT / "nested.pt", tmp_path / "o.safetensors", ConvertOptions(dry_run=True))
    assert warnings_of(report) == [
        "the source is a nested checkpoint: every tensor is written under its key path "
        "('model' (4), 'optimizer' (12)); pass state_key=... to write only one part, "
        "e.g. the model weights"
    ]


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
    assert str(report.refused) == (
        "the output does not fit target=...; fix the names (see above) or pass allow_partial=True"
    )
    assert report.summary is not None
    assert report.summary.ok is False
    assert report.fixes == report.summary.fixes
    assert not (tmp_path / "o.safetensors").exists()
    partial = ConvertOptions(target=str(ref), allow_partial=True)
    written = convert(src, tmp_path / "o.safetensors", partial)
    assert (written.ok, written.written) == (False, True)
    assert written.bytes_written == (tmp_path / "o.safetensors").stat().st_size


# --- strict -------------------------------------------------------------------------------------


def test_strict_names_every_unused_rule_and_writes_nothing_even_with_allow_partial(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a.w", np.zeros(2, "<f4"))])
    opts = ConvertOptions(remap=(r"^x\.=y.", r"^a\.=b.", r"^z=q"), strict=True, allow_partial=True)
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.ok is False
    assert report.written is False
    assert str(report.refused) == "remap rule #1, #3 matches no tensor name (strict=True)"
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
    assert warnings_of(report) == [f"ParamIds from model {model}: 7 of 7 tensors matched"]
    with open_checkpoint(tmp_path / "o.bpk") as out:
        assert {e.name: e.param_id for e in out.values()} == MO.IDS


def test_param_ids_count_only_matched_tensors(tmp_path):
    src = st(
        tmp_path / "s.safetensors",
        [array_entry("fc.bias", np.zeros(3, "<f4")), array_entry("other", np.zeros(1, "<f4"))],
    )
    record = str(OPTIM / "optim.bpk")
    entries = [array_entry("fc.bias", np.zeros(3, "<f4")), array_entry("x", np.zeros(1, "<f4"))]
    out, note = convert_mod._attach_param_ids(entries, record)
    assert note == f"ParamIds from optimizer record {record}: 1 of 2 tensors matched"
    assert [(e.name, e.param_id) for e in out] == [("fc.bias", MO.IDS["fc.bias"]), ("x", None)]
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(param_ids_from=record))
    assert warnings_of(report) == [
        f"ParamIds from optimizer record {record}: 1 of 2 tensors matched"
    ]


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
    with pytest.raises(SelectionError) as info:
        read_param_ids(OPTIM / "model_noids.bpk")
    assert info.value.message == (
        "carries no ParamIds (neither a burnpack model with param_id nor an optimizer record)"
    )
    assert info.value.path == str(OPTIM / "model_noids.bpk")
    assert info.value.exit_code == ExitCode.USAGE


# --- what the output format loses ---------------------------------------------------------------


def test_param_ids_lost_in_safetensors_are_counted(tmp_path):
    report = convert(OPTIM / "model.bpk", tmp_path / "o.safetensors", ConvertOptions())
    assert warnings_of(report) == [
        "7 ParamIds are not kept: safetensors has no place for them, so Burn optimizer state "
        "saved against them will not attach to a model loaded from this file"
    ]


def test_burnpack_keeps_param_ids_scalars_and_metadata(tmp_path):
    assert convert(OPTIM / "model.bpk", tmp_path / "o.bpk", ConvertOptions()).warnings == ()
    report = convert(BURNPACK / "meta_scalars.bpk", tmp_path / "m.bpk", ConvertOptions())
    assert report.warnings == ()
    with open_checkpoint(BURNPACK / "meta_scalars.bpk") as src:
        metadata = dict(src.metadata)
    with open_checkpoint(tmp_path / "m.bpk") as out:
        assert dict(out.metadata) == metadata
        assert out.metadata["producer"] == "burn"


def test_pytorch_output_loses_scalars_and_metadata(tmp_path):
    report = convert(BURNPACK / "meta_scalars.bpk", tmp_path / "o.pt", ConvertOptions())
    assert warnings_of(report) == [
        "6 burnpack scalars are not kept: pytorch has no place for them",
        "2 metadata entries are not kept ('format', 'producer'): a .pt state_dict has none",
    ]


def test_safetensors_output_loses_scalars_but_keeps_metadata(tmp_path):
    report = convert(BURNPACK / "meta_scalars.bpk", tmp_path / "o.safetensors", ConvertOptions())
    assert warnings_of(report) == [
        "6 burnpack scalars are not kept: safetensors has no place for them"
    ]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert out.metadata["producer"] == "burn"
        assert out.metadata["format"] == "burnpack"


def test_lost_in_output_direct():
    one = array_entry("a", np.zeros(1, "<f4"))
    with_id = TensorEntry(
        one.name, one.dtype, one.shape, one.nbytes, one.offset, one.data, param_id=5
    )
    lost = convert_mod._lost_in_output
    assert lost("burnpack", [with_id], {"k": "v"}, {"s": 1}) == []
    assert lost("pytorch", [one], {}, {}) == []
    assert lost("safetensors", [one, with_id], {"k": "v"}, {}) == [
        "1 ParamIds are not kept: safetensors has no place for them, so Burn optimizer state "
        "saved against them will not attach to a model loaded from this file"
    ]
    assert lost("pytorch", [with_id], {"k": "v"}, {"s": 1, "t": 2}) == [
        "1 ParamIds are not kept: pytorch has no place for them, so Burn optimizer state "
        "saved against them will not attach to a model loaded from this file",
        "2 burnpack scalars are not kept: pytorch has no place for them",
        "metadata entry 'k' is not kept: a .pt state_dict has none",
    ]


def test_pytorch_source_metadata_is_not_carried(tmp_path):
    convert(PT / "min_zip.pt", tmp_path / "o.safetensors", ConvertOptions())
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert dict(out.metadata) == {}


# --- tied tensors -------------------------------------------------------------------------------


def _shared_group_nbytes() -> int:
    tensors = {t["name"]: t for t in TRUTH["shared_storage.pt"]["tensors"]}
    return 4 * int(np.prod(tensors["head.weight"]["shape"]))


def test_tied_tensors_are_copied_with_a_plural_note(tmp_path):
    report = convert(PT / "shared_storage.pt", tmp_path / "o.safetensors", ConvertOptions())
    extra = 2 * _shared_group_nbytes()
    assert warnings_of(report) == [
        "2 tensors are tied to another (one storage in the source): written as separate "
        f"copies, {extra:,} bytes more; dedupe_tied=True keeps one copy of each"
    ]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == [t["name"] for t in TRUTH["shared_storage.pt"]["tensors"]]
        assert "tied_weights" not in out.metadata


def test_dedupe_tied_keeps_the_first_and_records_the_others(tmp_path):
    opts = ConvertOptions(dedupe_tied=True)
    report = convert(PT / "shared_storage.pt", tmp_path / "o.safetensors", opts)
    extra = 2 * _shared_group_nbytes()
    assert warnings_of(report) == [
        f"2 tied aliases left out ({extra:,} bytes); their names are in the 'tied_weights' metadata"
    ]
    assert [(r.source, r.target) for r in report.plan] == [
        ("embed.weight", "embed.weight"),
        ("head.weight", None),
        ("head_detached.weight", None),
        ("row", "row"),
        ("column", "column"),
        ("tail", "tail"),
    ]
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == ["embed.weight", "row", "column", "tail"]
        assert json.loads(out.metadata["tied_weights"]) == {
            "embed.weight": ["head.weight", "head_detached.weight"]
        }


def test_pytorch_output_keeps_tied_storages_without_a_note(tmp_path):
    report = convert(PT / "shared_storage.pt", tmp_path / "o.pt", ConvertOptions(dedupe_tied=True))
    assert report.warnings == ()
    assert all(r.target == r.source for r in report.plan)


def _tied_entries(names: list[str], storage: str = "0") -> list[TensorEntry]:
    out = []
    for name in names:
        e = array_entry(name, np.zeros(3, "<f4"))
        out.append(
            TensorEntry(
                e.name, e.dtype, e.shape, e.nbytes, e.offset, e.data, extra={"storage": storage}
            )
        )
    return out


def test_one_tied_alias_is_singular():
    entries = [*_tied_entries(["a", "b"]), array_entry("c", np.zeros(2, "<f4"))]
    items = [PlanItem(e.name, e, ()) for e in entries]
    outputs, plan, note = convert_mod._tied(entries, items, {}, dedupe=False)
    assert outputs == entries
    assert plan == items
    assert str(note) == (
        "1 tensor is tied to another (one storage in the source): written as separate copies, "
        "12 bytes more; dedupe_tied=True keeps one copy of each"
    )
    metadata: dict[str, str] = {"k": "v"}
    kept, plan, note = convert_mod._tied(entries, items, metadata, dedupe=True)
    assert (
        note == "1 tied alias left out (12 bytes); their names are in the 'tied_weights' metadata"
    )
    assert [e.name for e in kept] == ["a", "c"]
    assert [(i.source, i.entry is None, i.actions) for i in plan] == [
        ("a", False, ()),
        ("b", True, ()),
        ("c", False, ()),
    ]
    assert metadata == {"k": "v", "tied_weights": '{"a": ["b"]}'}


def test_tied_groups_of_thousands_of_bytes_use_separators():
    big = []
    for name in ("a", "b", "c"):
        e = array_entry(name, np.zeros(1000, "<f4"))
        big.append(
            TensorEntry(
                e.name, e.dtype, e.shape, e.nbytes, e.offset, e.data, extra={"storage": "s"}
            )
        )
    items = [PlanItem(e.name, e, ()) for e in big]
    _, _, note = convert_mod._tied(big, items, {}, dedupe=False)
    assert "written as separate copies, 8,000 bytes more" in str(note)
    assert str(note).startswith("2 tensors are tied")
    metadata: dict[str, str] = {}
    _, _, note = convert_mod._tied(big, items, metadata, dedupe=True)
    assert (
        note
        == "2 tied aliases left out (8,000 bytes); their names are in the 'tied_weights' metadata"
    )
    assert metadata == {"tied_weights": '{"a": ["b", "c"]}'}


def test_no_tied_groups_change_nothing():
    entries = [array_entry("a", np.zeros(1, "<f4"))]
    items = [PlanItem("a", entries[0], ())]
    metadata: dict[str, str] = {}
    assert convert_mod._tied(entries, items, metadata, dedupe=True) == (entries, items, None)
    assert metadata == {}


def test_dropped_plan_items_stay_dropped_when_deduping():
    entries = _tied_entries(["a", "b"])
    items = [PlanItem("gone", None, ()), *(PlanItem(e.name, e, ()) for e in entries)]
    _, plan, _ = convert_mod._tied(entries, items, {}, dedupe=True)
    assert [(i.source, None if i.entry is None else i.entry.name) for i in plan] == [
        ("gone", None),
        ("a", "a"),
        ("b", None),
    ]


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


def test_module_type_map_that_is_missing(tmp_path):
    path = str(tmp_path / "nope.json")
    with pytest.raises(SelectionError) as info:
        convert_mod._read_json_map(path)
    assert info.value.message == "cannot read module-type map: No such file or directory"
    assert info.value.path == path


def test_module_type_map_that_is_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{nope", encoding="utf-8")
    with pytest.raises(SelectionError) as info:
        convert_mod._read_json_map(str(path))
    try:
        json.loads("{nope")
    except ValueError as exc:
        expected = f"module-type map is not valid JSON: {exc}"
    assert info.value.message == expected
    assert info.value.path == str(path)


def test_module_type_map_that_is_not_utf8(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"\xff": 1}')
    with pytest.raises(SelectionError) as info:
        convert_mod._read_json_map(str(path))
    assert info.value.message.startswith("module-type map is not valid JSON: ")
    assert "utf-8" in info.value.message


def test_module_type_map_must_be_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text('["a", "b"]', encoding="utf-8")
    with pytest.raises(SelectionError) as info:
        convert_mod._read_json_map(str(path))
    assert info.value.message == "module-type map must be a JSON object {regex: type}"
    assert info.value.path == str(path)
    good = tmp_path / "map.json"
    good.write_text('{"^emb": "Embedding"}', encoding="utf-8")
    assert convert_mod._read_json_map(str(good)) == {"^emb": "Embedding"}


def test_module_type_map_file_decides_the_layout(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("emb.weight", np.zeros((2, 3), "<f4"))])
    types = tmp_path / "types.json"
    types.write_text('{"emb": "Linear"}', encoding="utf-8")
    opts = ConvertOptions(adapters=("pytorch-to-burn",), module_types_file=str(types), dry_run=True)
    report = convert(src, tmp_path / "o.bpk", opts)
    assert report.plan[0].shape_after == (3, 2)
    assert report.plan[0].actions == (
        "transpose [2, 3] -> [3, 2]: Linear (module rule #1 'emb=Linear')",
    )
    assert report.warnings == ()


# --- empty output, sources, sharded output ------------------------------------------------------


def test_an_empty_output_warns_but_not_on_a_dry_run(tmp_path):
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(1, "<f4"))])
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(exclude=("a",)))
    assert warnings_of(report) == ["no tensors to write: the output holds none"]
    assert report.written is True
    dry = convert(src, tmp_path / "p.safetensors", ConvertOptions(exclude=("a",), dry_run=True))
    assert dry.warnings == ()


def test_sources_of_a_sharded_checkpoint_name_every_shard():
    with open_checkpoint(SHARDED_INDEX) as ckpt:
        assert convert_mod._sources(SHARDED_INDEX, ckpt) == [
            str(SHARDED_INDEX),
            str(SHARDED_INDEX.parent / "model-00001-of-00002.safetensors"),
            str(SHARDED_INDEX.parent / "model-00002-of-00002.safetensors"),
        ]
    with open_checkpoint(PT / "min_zip.pt") as ckpt:
        assert convert_mod._sources(PT / "min_zip.pt", ckpt) == [str(PT / "min_zip.pt")]


def test_a_sharded_source_cannot_be_overwritten_through_a_shard(tmp_path):
    shard = SHARDED_INDEX.parent / "model-00001-of-00002.safetensors"
    before = shard.read_bytes()
    with pytest.raises(OutputError) as info:
        convert(SHARDED_INDEX, shard, ConvertOptions(force=True))
    assert info.value.exit_code == ExitCode.OUTPUT
    assert shard.read_bytes() == before


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


# --- progress -----------------------------------------------------------------------------------


def test_progress_reports_each_tensor_once_with_the_total(tmp_path):
    src = st(
        tmp_path / "s.safetensors",
        [array_entry("a", np.zeros(3, "<f4")), array_entry("b", np.zeros(5, "<f2"))],
    )
    calls: list[tuple[int, int | None]] = []
    opts = ConvertOptions(progress=lambda n, total: calls.append((n, total)))
    convert(src, tmp_path / "o.bpk", opts)
    assert sorted(calls) == [(0, 22), (10, 22), (12, 22)]
    assert calls[0] == (0, 22)  # the total comes before the first tensor


def test_progress_data_ticks_once_and_delegates():
    raw = bytes(range(10))
    seen: list[int] = []
    entry = convert_mod._with_progress(computed("x", raw), seen.append)
    assert entry.name == "x"
    assert entry.nbytes == 10
    assert bytes(entry.data.read_range(2, 3)) == raw[2:5]
    assert seen == [10]
    assert bytes(entry.data.read()) == raw
    assert entry.data.file_range() is None
    assert seen == [10]
    other: list[int] = []
    fresh = convert_mod._with_progress(computed("y", raw), other.append)
    assert bytes(fresh.data.read()) == raw
    assert other == [10]
    third: list[int] = []
    convert_mod._with_progress(computed("z", raw), third.append).data.file_range()
    assert third == [10]


# --- report fields ------------------------------------------------------------------------------


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


# --- harness pass survivors: nested groups shown, safety note, options that reach the writers ----


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
    assert warnings_of(report) == [
        "the source is a nested checkpoint: every tensor is written under its key path "
        "('a' (1), 'b' (1), 'c' (1), 'd' (1)); pass state_key=... to write only one part, "
        "e.g. the model weights"
    ]


def test_a_source_pickle_that_needs_trust_is_named_in_a_warning(tmp_path):
    src = VALID / "trust" / "argparse_namespace.pt"  # torch's weights-only loader refuses it
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(state_key="model"))
    assert warnings_of(report) == [
        "the source pickle is needs-trust: argparse.Namespace: read without running any of it; "
        "the output holds only tensors and needs no trust"
    ]
    assert report.written
    with open_checkpoint(VALID / "pytorch" / "min_zip.pt") as safe:
        assert safe.safety is not None
        assert safe.safety.verdict.value == "safe"
    assert warnings_of(convert(VALID / "pytorch" / "min_zip.pt", tmp_path / "p.safetensors")) == []


def _sharded_source(tmp_path: Path) -> Path:
    entries = [computed("a", b"\x01" * 8), computed("b", b"\x02" * 8), computed("c", b"\x03" * 8)]
    return st(tmp_path / "src.safetensors", entries, {"format": "pt", "note": "kept"})


def test_sharded_output_keeps_metadata_and_honours_force(tmp_path):
    src = _sharded_source(tmp_path)
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
    src = _sharded_source(tmp_path)
    shard = tmp_path / "model-00001-of-00002.safetensors"
    src.rename(shard)
    before = shard.read_bytes()
    with pytest.raises(OutputError) as info:
        convert(
            shard, tmp_path / "model.safetensors", ConvertOptions(max_shard_bytes=16, force=True)
        )
    assert (
        str(info.value)
        == f"{shard}: is also an input; writing it would destroy the data being read"
    )
    assert shard.read_bytes() == before


@pytest.mark.parametrize("fsync", [True, False])
@pytest.mark.parametrize("shard_bytes", [None, 16])
def test_fsync_option_reaches_the_writers(tmp_path, monkeypatch, fsync, shard_bytes):
    import os

    src = _sharded_source(tmp_path)
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
    src = _sharded_source(tmp_path)
    convert(
        src, tmp_path / "o.safetensors", ConvertOptions(max_shard_bytes=16, jobs=3, fsync=False)
    )
    assert seen == [3]


def test_module_type_map_is_read_as_utf8_whatever_the_locale(tmp_path):
    import os
    import subprocess
    import sys

    types = tmp_path / "types.json"
    types.write_text(json.dumps({"^straße\\.": "Linear"}, ensure_ascii=False), encoding="utf-8")
    # in this process too: mutmut picks the tests to run per function from in-process calls
    assert convert_mod._read_json_map(str(types)) == {"^straße\\.": "Linear"}
    code = (
        "import sys; from ckptctl.ops.convert import _read_json_map as r; "
        "print(ascii(r(sys.argv[1])))"
    )
    # the C locale without UTF-8 mode or coercion: open()'s default encoding is ASCII here
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    root = Path(__file__).resolve().parents[2]
    probe = "import locale; print(locale.getpreferredencoding(False))"
    ascii_default = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True
    )
    assert ascii_default.stdout.strip() == "ANSI_X3.4-1968"
    done = subprocess.run(
        [sys.executable, "-c", code, str(types)], cwd=root, env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ascii({"^straße\\.": "Linear"}) + "\n"
