"""Everyday output: counts that are right, warnings that are grouped and quiet, no wrapping in
pipes (issue 13). Each test failed before the change it covers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture
def llama(tmp_path):
    """Two layers of square attention weights, an MLP weight, an unknown 1-D weight, a norm."""
    tensors: dict[str, np.ndarray] = {}
    for i in range(2):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"layers.{i}.attn.{proj}.weight"] = np.zeros((8, 8), "<f4")
        tensors[f"layers.{i}.mlp.up.weight"] = np.zeros((16, 8), "<f4")
        tensors[f"layers.{i}.scale.weight"] = np.ones(8, "<f4")
        tensors[f"layers.{i}.input_layernorm.weight"] = np.ones(8, "<f4")
    path = tmp_path / "llama.safetensors"
    save_file(tensors, str(path))
    return path


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def test_changed_counts_only_what_changed(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    done = result.stderr.splitlines()[-1]
    # 8 square + 2 MLP weights transposed, 2 norms renamed; the 2 unknown 1-D weights are kept
    assert done.endswith("14 tensors, 4.8 KiB, 10 transposed, 2 renamed"), done
    half = run_cli("convert", llama, tmp_path / "half.bpk", "-a", "half")
    assert half.stderr.splitlines()[-1].endswith(", 12 cast")  # norms stay F32 (Burn's rule)


def test_uncertain_module_types_are_one_grouped_line_per_kind(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    lines = warnings(result.stderr)
    assert lines == [
        "warning: 8 square weights typed by name only (k_proj, o_proj, q_proj, ...): "
        "confirm with --module-type",
        "warning: 2 1-D weights with no module type kept as weight/bias, not renamed "
        "gamma/beta (scale): declare with --module-type",
    ]


def test_no_layout_warnings_when_the_chain_cannot_transpose(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "half.bpk", "-a", "half")
    assert warnings(result.stderr) == []


def test_quiet_silences_warnings_but_not_errors(run_cli, llama, tmp_path):
    quiet = run_cli("convert", llama, tmp_path / "q.bpk", "-a", "pytorch-to-burn", "-q")
    assert quiet.code == 0
    assert quiet.stderr == ""
    again = run_cli("convert", llama, tmp_path / "q.bpk", "-a", "pytorch-to-burn", "-q")
    assert again.code == 5
    assert again.stderr.startswith("ckptctl: error:")


def test_declared_module_types_leave_nothing_uncertain(run_cli, llama, tmp_path):
    result = run_cli(
        "convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn",
        "--module-type", r"attn\.=Linear", "--module-type", r"scale=LayerNorm",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert warnings(result.stderr) == []


def test_piped_output_is_never_wrapped(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    assert all(line.startswith(("warning:", "wrote")) for line in result.stderr.splitlines())
    long_name = "encoder." + "very_long_module_name." * 8 + "weight"
    path = tmp_path / "long.safetensors"
    save_file({long_name: np.zeros((2, 2), "<f4")}, str(path))
    listing = run_cli("ls", path).stdout.splitlines()
    assert any(line.startswith(long_name) and line.endswith("16 B") for line in listing)


def test_a_narrow_terminal_shortens_names_not_numbers():
    from ckptctl.report.text import PlainTable

    table = PlainTable()
    table.add_column("name")
    table.add_column("bytes", justify="right")
    table.add_row("model.layers.0.self_attn.q_proj.weight", "16,777,216")
    wide = table.lines()
    assert wide[1] == "model.layers.0.self_attn.q_proj.weight  16,777,216"
    narrow = table.lines(max_width=30)
    assert narrow[1].endswith("  16,777,216")
    assert "…" in narrow[1]
    assert len(narrow[1]) <= 30
    assert narrow[1].startswith("mode")
    assert "q_proj.weight  " in narrow[1]  # the distinguishing tail, whole (issue 30)


# --- exit codes, errors and conventions -----------------------------------------------------


def test_a_failing_verdict_survives_a_closed_pipe(tmp_path):
    import subprocess
    import sys

    a = {f"t{i:05d}": np.full(2, i, "<f4") for i in range(5000)}
    b = dict(a, t00000=np.full(2, -1, "<f4"))
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    cmd = [sys.executable, "-m", "ckptctl", "diff", "--all", "a.safetensors", "b.safetensors"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # the files differ: a closed pipe must not say otherwise
    assert b"Traceback" not in err


def test_errors_under_json_are_json_on_stdout(run_cli, tmp_path):
    import json

    result = run_cli("ls", tmp_path / "missing.pt", "--json")
    assert result.code == 3
    assert result.stderr.startswith("ckptctl: error:")
    error = json.loads(result.stdout)
    assert error["schema_version"] == 1
    assert error["ok"] is False
    assert error["error"]["exit_code"] == 3
    assert error["error"]["path"] == str(tmp_path / "missing.pt")
    usage = run_cli("diff", "--json", "--rtol", "-1", tmp_path / "a", tmp_path / "b")
    assert usage.code == 2
    assert json.loads(usage.stdout)["error"]["exit_code"] == 2


def test_outputs_get_the_umask_mode_and_keep_an_overwritten_mode(run_cli, llama, tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        out = tmp_path / "new.safetensors"
        assert run_cli("convert", llama, out).code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        out.chmod(0o640)
        assert run_cli("convert", llama, out, "--force").code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_diff_quiet_and_no_color_after_the_subcommand(run_cli, llama, tmp_path):
    same = run_cli("diff", "-q", llama, llama)
    assert (same.code, same.stdout, same.stderr) == (0, "", "")
    other = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(2, "<f4")}, str(other))
    differ = run_cli("diff", "--quiet", llama, other, "--no-color")
    assert (differ.code, differ.stdout, differ.stderr) == (1, "", "")


def test_a_mistyped_command_gets_did_you_mean(run_cli):
    result = run_cli("lss", "x")
    assert result.code == 2
    assert "No such command 'lss'. Did you mean 'ls'?" in result.stderr


def test_dtype_aliases_people_type(run_cli, llama, tmp_path):
    from ckptctl.dtypes import DType

    for alias in ("fp16", "half", "float16", "torch.float16", "F16", "np.float16"):
        assert DType.parse(alias) is DType.F16, alias
    assert DType.parse("bf16") is DType.BF16
    assert DType.parse("torch.bfloat16") is DType.BF16
    assert DType.parse("fp32") is DType.F32
    out = tmp_path / "cast.safetensors"
    assert run_cli("convert", llama, out, "-a", "cast:torch.float16").code == 0


def test_to_names_the_format_when_the_extension_does_not(run_cli, llama, tmp_path):
    import json

    ckpt = tmp_path / "model.ckpt"
    refused = run_cli("convert", llama, ckpt)
    assert refused.code == 2
    assert "name it with --to" in refused.stderr
    assert run_cli("convert", llama, ckpt, "--to", "bpk").code == 0
    assert json.loads(run_cli("ls", ckpt, "--json").stdout)["format"] == "burnpack"
    assert run_cli("convert", llama, ckpt, "--to", "nope", "--force").code == 2


def test_remap_rules_that_match_nothing_warn_and_fail_with_strict(run_cli, llama, tmp_path):
    out = tmp_path / "r.safetensors"
    result = run_cli("remap", llama, out, "--rule", r"^layers\.=blocks.", "--rule", "^nope=x")
    assert result.code == 0
    assert "warning: remap rule #2 '^nope' matches no tensor name" in result.stderr
    strict = run_cli("remap", llama, tmp_path / "s.safetensors", "-r", "^nope=x", "--strict")
    assert strict.code == 1
    assert not (tmp_path / "s.safetensors").exists()
    assert "nothing written" in strict.stderr
    assert "--strict" in strict.stderr
    python_style = run_cli("remap", llama, tmp_path / "p.safetensors", "-r", r"^layers\.(\d)=L\1")
    assert "groups are written $1" in python_style.stderr


def test_an_empty_result_warns(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "e.safetensors", "--include", "^nothing$")
    assert result.code == 0
    assert "warning: no tensors to write: the output holds none" in result.stderr


def test_verify_state_key_above_the_tensors_fails_naming_the_deeper_key(run_cli):
    from tests.conftest import VALID

    nested = VALID / "pytorch" / "nested.pt"
    result = run_cli("verify", nested, "--state-key", "optimizer")
    assert result.code == 1
    assert "no tensors directly under state key 'optimizer'" in result.stdout
    assert "hint: pass --state-key optimizer.state.0" in result.stdout
    assert run_cli("verify", nested, "--state-key", "model").code == 0


def test_files_that_are_not_checkpoints_are_named(run_cli, tmp_path):
    import zipfile

    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch\x1a\x052.1.0" + bytes(64))
    saved = tmp_path / "saved_model.pb"
    saved.write_bytes(b"\x08\x01\x12\x10tensorflow/serving" + bytes(64))
    keras = tmp_path / "m.keras"
    with zipfile.ZipFile(keras, "w") as archive:
        archive.writestr("config.json", "{}")
        archive.writestr("metadata.json", "{}")
        archive.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")
    for path, what in ((onnx, "an ONNX model"), (saved, "a TensorFlow SavedModel"),
                       (keras, "a Keras .keras model")):  # fmt: skip
        result = run_cli("ls", path)
        assert result.code == 3
        assert f"this is {what}" in result.stderr
        assert "ckptctl reads PyTorch, safetensors and Burn files" in result.stderr


def test_several_files_and_directories(run_cli, llama, tmp_path):
    import json

    from tests.conftest import VALID

    sharded = VALID / "safetensors" / "sharded"
    result = run_cli("ls", llama, sharded, tmp_path / "missing.pt", "--json")
    assert result.code == 3  # the missing file fails; the others are still listed
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o.get("format") for o in objects[:2]] == ["safetensors", "safetensors"]
    assert objects[1]["path"].endswith("model.safetensors.index.json")
    assert objects[2]["error"]["exit_code"] == 3
    text = run_cli("header", llama, sharded)
    assert text.code == 0
    assert text.stdout.count(": safetensors") >= 1
    crowded = run_cli("ls", VALID / "pytorch")
    assert crowded.code == 3
    assert "is a directory with" in crowded.stderr


def test_ls_sizes_in_binary_units_or_exact(run_cli, llama):
    human = run_cli("ls", llama).stdout
    assert "256 B" in human
    assert "KiB" in human
    exact = run_cli("ls", llama, "--bytes").stdout
    assert "256" in exact
    assert "KiB" not in exact


def test_one_naming_of_where_tensors_hide(run_cli):
    from tests.conftest import VALID

    lightning = VALID / "pytorch" / "lightning.ckpt"
    listing = run_cli("ls", lightning).stdout
    verdict = run_cli("verify", lightning).stdout
    bad_key = run_cli("ls", lightning, "--state-key", "nope").stderr
    names = "'state_dict' (4)"
    for text in (listing, verdict, bad_key):
        assert names in text, text
    assert "{" not in bad_key  # no dict repr


def test_ls_shows_what_else_a_checkpoint_holds(run_cli):
    import json

    from tests.conftest import VALID

    lightning = VALID / "pytorch" / "lightning.ckpt"
    report = json.loads(run_cli("ls", lightning, "--json").stdout)
    objects = report["objects"]
    assert objects["epoch"] == 3
    assert objects["global_step"] == 30
    group = objects["optimizer_states"]["0"]["param_groups"]["0"]  # nested (issue 30)
    assert group["lr"] == 0.01
    assert group["betas"] == [0.9, 0.999]
    text = run_cli("ls", lightning).stdout
    assert "optimizer_states.0.param_groups.0.lr" in text
    flat = json.loads(run_cli("ls", VALID / "pytorch" / "min_zip.pt", "--json").stdout)
    assert "objects" not in flat  # nothing besides tensors


def test_objects_are_bounded(tmp_path):
    from ckptctl.formats.pytorch._structure import MAX_OBJECT_TEXT, MAX_OBJECTS, _Walker

    walker = _Walker.__new__(_Walker)
    walker.objects, walker.kept_objects, walker.more_objects = {}, 0, 0
    walker.object_bytes = 0
    walker.note_object(("k0",), "x" * (MAX_OBJECT_TEXT + 1))
    for i in range(1, MAX_OBJECTS + 5):
        walker.note_object((f"k{i}",), i)
    assert len(walker.objects) == MAX_OBJECTS
    assert walker.more_objects == 5
    assert walker.objects["k0"] == {
        "$truncated": MAX_OBJECT_TEXT + 1,
        "head": "x" * MAX_OBJECT_TEXT,
    }


@pytest.mark.parametrize("fixture", ["safetensors/tiny.safetensors", "burnpack/net.bpk"])
def test_header_of_a_truncated_file_shows_what_it_can(run_cli, tmp_path, fixture):
    import json

    from tests.conftest import VALID

    data = (VALID / fixture).read_bytes()
    cut = tmp_path / ("cut" + (VALID / fixture).suffix)
    cut.write_bytes(data[: len(data) - 20])
    result = run_cli("header", cut)
    assert result.code == 3
    assert "DAMAGED:" in result.stdout
    assert "run past the end of the file" in result.stderr
    assert "truncated" in result.stdout  # the cut tensor's region says so
    report = json.loads(run_cli("header", cut, "--json").stdout)
    regions = report["regions"]
    assert regions[0]["start"] == 0
    assert regions[-1]["end"] == len(data) - 20  # still tiles what is there
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(regions))
    assert "run past the end of the file" in report["damage"]["message"]
    assert run_cli("ls", cut).code == 3  # reading it is still an error


def test_tied_weights_are_counted_once_and_can_be_written_once(run_cli, tmp_path):
    import json

    from safetensors.numpy import load_file

    from tests.conftest import VALID

    module = VALID / "pytorch" / "module.pt"  # FixtureNet: head.weight is embed.weight
    listing = json.loads(run_cli("ls", module, "--json").stdout)
    per_name = sum(t["nbytes"] for t in listing["tensors"])
    assert listing["stored"]["nbytes"] < per_name
    assert "stored)" in run_cli("ls", module).stdout
    copies = run_cli("convert", module, tmp_path / "copies.safetensors")
    assert "1 tensor is tied to another" in copies.stderr
    assert "--dedupe-tied keeps one copy of each" in copies.stderr
    once = run_cli("convert", module, tmp_path / "once.safetensors", "--dedupe-tied")
    assert once.code == 0, once.stderr
    kept = load_file(str(tmp_path / "once.safetensors"))
    assert "embed.weight" in kept
    assert "head.weight" not in kept
    meta = json.loads(run_cli("ls", tmp_path / "once.safetensors", "--json").stdout)["metadata"]
    assert json.loads(meta["tied_weights"]) == {"embed.weight": ["head.weight"]}
    flat = json.loads(run_cli("ls", VALID / "pytorch" / "min_zip.pt", "--json").stdout)
    assert "stored" not in flat


def test_quiet_over_the_whole_fixture_set_prints_no_warnings(run_cli, tmp_path):
    """Issue 13's bar: with -q, a conversion that succeeds prints nothing at all."""
    from tests.conftest import VALID

    suffixes = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".bpk", ".mpk", ".gz", ".json")
    skip = ("truth.json", "manifest.json")
    files = sorted(
        p for p in VALID.rglob("*")
        if p.is_file() and p.name.endswith(suffixes) and p.name not in skip
    )  # fmt: skip
    assert len(files) > 60
    converted = 0
    for i, path in enumerate(files):
        result = run_cli("convert", path, tmp_path / f"out{i}.safetensors", "-q")
        if result.code == 0:
            converted += 1
            assert result.stderr == "", (path, result.stderr)
            assert result.stdout == "", (path, result.stdout)
    assert converted > 40


def test_no_rust_debug_formatting_outside_burns_own_box(run_cli, tmp_path):
    import json

    save_file({"w": np.zeros((3, 4), "<f4")}, str(tmp_path / "src.safetensors"))
    save_file({"w": np.zeros((4, 3), "<f4")}, str(tmp_path / "ref.safetensors"))
    src, ref = tmp_path / "src.safetensors", tmp_path / "ref.safetensors"
    report = json.loads(run_cli("verify", src, "--expect", ref, "--json").stdout)
    [expect] = [f for f in report["files"][0]["findings"] if f["check"] == "expect"]
    [error] = expect["details"]["errors"]
    assert error["message"] == "shape mismatch for 'w': expected [4, 3], found [3, 4]"
    assert "Shape {" not in json.dumps(expect["message"]) + json.dumps(expect["hint"])
    text = run_cli("verify", src, "--expect", ref).stdout
    outside = text.split("┌─ Tensor Loading Summary")[0]
    assert "Shape {" not in outside
    assert " errors" not in outside


def test_advice_fits_the_file(run_cli, llama, tmp_path):
    from ckptctl.model import Checkpoint, CheckpointKind, Structure
    from ckptctl.ops.verify.flat_reader import flat_reader

    empty_script = Checkpoint(
        [], path="script.pt", format="torchscript", kind=CheckpointKind.TORCHSCRIPT,
        structure=Structure(module_class="__torch__.Net"),
    )  # fmt: skip
    finding, _ = flat_reader(empty_script, None)
    assert "with no tensors" in str(finding.message)
    assert "state_dict()" not in str(finding.message)
    # remap's own option is --rule: its collision hint says so (convert's says --remap)
    clash = run_cli("remap", llama, tmp_path / "x.safetensors", "-r", r"\d=N")
    assert clash.code == 2
    assert "change the --rule rules" in clash.stderr


def test_verdicts_are_coloured_on_a_terminal_only():
    import io

    from rich.console import Console

    from ckptctl.report.render_verify import render_verify
    from ckptctl.report.verify import FileResult, Finding, Status, VerifyReport

    report = VerifyReport(
        (
            FileResult("a.pt", "pytorch-zip", None, 1, (Finding("readable", Status.OK, "ok"),)),
            FileResult("b.pt", "pytorch-zip", None, 1, (Finding("readable", Status.FAIL, "no"),)),
        )
    )
    tty = io.StringIO()
    render_verify(report, Console(file=tty, force_terminal=True, color_system="standard"))
    assert "\x1b[" in tty.getvalue()
    pipe = io.StringIO()
    render_verify(report, Console(file=pipe, no_color=True, soft_wrap=True))
    assert "\x1b[" not in pipe.getvalue()
    assert pipe.getvalue().splitlines()[-1] == "failed: b.pt"
