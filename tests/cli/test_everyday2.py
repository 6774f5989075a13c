"""Everyday use, round two (issue 30, items 6-10). Each test failed before the change it covers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.conftest import VALID


@pytest.fixture
def small(tmp_path):
    """One square attention weight, three non-square MLP weights, a norm, one metadata entry."""
    tensors = {
        "layers.0.attn.q_proj.weight": np.zeros((8, 8), "<f4"),
        "layers.0.mlp.up.weight": np.zeros((16, 8), "<f4"),
        "layers.0.mlp.down.weight": np.zeros((8, 16), "<f4"),
        "layers.0.input_layernorm.weight": np.ones(8, "<f4"),
    }
    path = tmp_path / "small.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


# --- item 10: small things ------------------------------------------------------------------


def test_the_progress_bar_speaks_one_unit_system_and_never_shows_a_question_mark():
    from rich.console import Console

    from ckptctl.cli._progress import byte_progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with byte_progress(console, "writing x.bpk") as advance:
        console.file.write("")  # the bar starts with no total
        advance(0, 1_070_700_000)
        advance(142_606_336, 1_070_700_000)
    text = out.getvalue()
    assert "0/?" not in text
    assert "?" not in text.replace("\x1b[?25l", "").replace("\x1b[?25h", "")
    assert " MB" not in text
    assert "MB/s" not in text
    assert "136.0 MiB/1021.1 MiB" in text
    assert "1,021" not in text


def test_convert_tells_the_progress_bar_its_end_before_reading(small, tmp_path):
    from ckptctl.ops.convert import ConvertOptions, convert

    calls: list[tuple[int, int | None]] = []
    convert(
        small,
        tmp_path / "o.safetensors",
        ConvertOptions(progress=lambda n, t: calls.append((n, t))),
    )
    assert calls[0] == (0, sum(n for n, _ in calls))


def test_the_counts_of_changes_come_in_one_order(run_cli, tmp_path):
    # a file whose first changed tensor is a renamed norm, and one whose first is transposed
    first_norm = {"a.norm.weight": np.ones(4, "<f4"), "b.fc.weight": np.zeros((4, 2), "<f4")}
    first_fc = {"b.fc.weight": np.zeros((4, 2), "<f4"), "a.norm.weight": np.ones(4, "<f4")}
    lines = []
    for i, tensors in enumerate((first_norm, first_fc)):
        src = tmp_path / f"s{i}.safetensors"
        save_file(tensors, str(src))
        result = run_cli("convert", src, tmp_path / f"o{i}.bpk", "-a", "pytorch-to-burn")
        assert result.code == 0, result.stderr
        lines.append(result.stderr.splitlines()[-1].split(", ", 2)[-1])
    assert lines == ["1 transposed, 1 renamed", "1 transposed, 1 renamed"]


def test_metadata_that_is_lost_is_named_in_good_grammar(run_cli, small, tmp_path):
    result = run_cli("convert", small, tmp_path / "o.pt")
    assert result.code == 0
    assert (
        "warning: metadata entry 'format' is not kept: a .pt state_dict has none" in result.stderr
    )
    many = tmp_path / "many.safetensors"
    save_file({"x": np.zeros(2, "<f4")}, str(many), metadata={"a": "1", "b": "2"})
    again = run_cli("convert", many, tmp_path / "m.pt")
    assert "warning: 2 metadata entries are not kept ('a', 'b'):" in again.stderr


def test_only_square_weights_are_counted_as_square(run_cli, tmp_path):
    gpt = tmp_path / "gpt.safetensors"
    save_file(
        {
            "h.0.attn.c_attn.weight": np.zeros((8, 24), "<f4"),
            "h.0.attn.c_proj.weight": np.zeros((8, 8), "<f4"),
            "h.0.mlp.c_fc.weight": np.zeros((8, 32), "<f4"),
            "h.0.mlp.c_proj.weight": np.zeros((32, 8), "<f4"),
        },
        str(gpt),
    )
    result = run_cli("convert", gpt, tmp_path / "g.bpk", "-a", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert lines == [
        "warning: 1 square weight typed by name only (c_proj): confirm with --module-type",
        "warning: 3 Conv1D weights typed by name only (c_attn, c_fc, c_proj): "
        "confirm with --module-type",
    ]


@pytest.mark.parametrize(
    ("shapes", "warning"),
    [
        ({"c_attn": (8, 24)}, "1 Conv1D weight typed by name only (c_attn)"),
        (
            {"c_attn": (8, 24), "c_fc": (8, 32)},
            "2 Conv1D weights typed by name only (c_attn, c_fc)",
        ),
    ],
)
def test_weights_typed_by_name_only_are_counted_in_one_line(run_cli, tmp_path, shapes, warning):
    gpt = tmp_path / "gpt.safetensors"
    save_file({f"h.0.{n}.weight": np.zeros(s, "<f4") for n, s in shapes.items()}, str(gpt))
    result = run_cli("convert", gpt, tmp_path / "g.bpk", "-a", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert lines == [f"warning: {warning}: confirm with --module-type"]


@pytest.mark.parametrize(("typed", "meant"), [("inspect", "ls"), ("info", "ls"), ("stats", "show")])
def test_commands_other_tools_have_get_did_you_mean(run_cli, typed, meant):
    result = run_cli(typed, "x")
    assert result.code == 2
    assert f"No such command '{typed}'. Did you mean '{meant}'?" in result.stderr


def test_adapter_names_and_output_extensions_get_did_you_mean(run_cli, small, tmp_path):
    adapter = run_cli("convert", small, tmp_path / "o.bpk", "-a", "pytorch2burn")
    assert adapter.code == 2
    assert "unknown adapter 'pytorch2burn'; did you mean 'pytorch-to-burn'?" in adapter.stderr
    ext = run_cli("convert", small, tmp_path / "out.safetensor")
    assert ext.code == 2
    assert f"did you mean '{tmp_path / 'out.safetensors'}'?" in ext.stderr


def test_ls_of_a_whole_model_says_not_a_state_dict_once(run_cli):
    result = run_cli("ls", VALID / "pytorch" / "module.pt")
    assert result.code == 0
    assert result.stdout.count("not a state_dict") == 1
    assert "FixtureNet" in result.stdout


def test_a_missing_output_directory_is_named(run_cli, small, tmp_path):
    result = run_cli("convert", small, tmp_path / "nodir" / "x.bpk")
    assert result.code == 5
    assert f"the directory '{tmp_path / 'nodir'}' does not exist" in result.stderr
    assert "No such file or directory" not in result.stderr


def test_verify_says_what_a_non_checkpoint_is(run_cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 8}')
    result = run_cli("verify", config)
    assert result.code == 1
    assert f"FAIL {config} (a JSON file, not a checkpoint)" in result.stdout
    assert "unreadable" not in result.stdout
    assert json.loads(run_cli("verify", config, "--json").stdout)["files"][0]["format"] is None


# --- item 8: one regex dialect, patterns quoted as typed -----------------------------------


def test_every_pattern_option_takes_the_same_rust_dialect(run_cli, small, tmp_path):
    lookbehind = run_cli("ls", small, "--filter", r"(?<=layers\.)0")
    refused = run_cli("convert", small, tmp_path / "o.bpk", "--include", r"(?<=layers\.)0")
    assert lookbehind.code == refused.code == 2
    assert "Rust regex (Burn) does not support" in lookbehind.stderr
    assert "Rust regex (Burn) does not support" in refused.stderr
    # Rust syntax Python's re lacks works in ls too, as in convert
    rust_only = run_cli("ls", small, "--filter", r"q\x{5f}proj", "--json")
    assert rust_only.code == 0, rust_only.stderr
    names = [t["name"] for t in json.loads(rust_only.stdout)["tensors"]]
    assert names == ["layers.0.attn.q_proj.weight"]


def test_patterns_in_messages_are_quoted_as_typed(run_cli, small, tmp_path):
    rule = r"model\.layers\.(\d+"
    result = run_cli("remap", small, tmp_path / "o.safetensors", "--rule", rule)
    assert result.code == 2
    assert f"remap rule '{rule}' has no '='" in result.stderr
    assert "\\\\" not in result.stderr
    bad = run_cli("ls", small, "--filter", r"(\d+")
    assert bad.code == 2
    assert r"'(\d+'" in bad.stderr
    assert "\\\\" not in bad.stderr
    assert "--filter" in bad.stderr


# --- item 7: ls --json keeps the nesting and whole values -----------------------------------


@pytest.fixture
def hparams(tmp_path):
    """A plain pickle of a dict with hyper-parameters: a short list, a long list, long text."""
    import pickle

    value = {
        "hyper_parameters": {
            "lr": 0.1,
            "params": list(range(21)),
            "schedule": list(range(5000)),
            "notes": "x" * 10_000,
        },
        "epoch": 2,
    }
    path = tmp_path / "hp.pkl"
    path.write_bytes(pickle.dumps(value, protocol=2))
    return path


def test_ls_json_keeps_the_nesting_and_whole_values(run_cli, hparams):
    from ckptctl.formats.pytorch._structure import MAX_OBJECT_LIST, MAX_OBJECT_TEXT

    report = json.loads(run_cli("ls", hparams, "--json").stdout)
    hp = report["objects"]["hyper_parameters"]  # jq '.objects.hyper_parameters'
    assert hp["lr"] == 0.1
    assert hp["params"] == list(range(21))
    assert hp["schedule"] == {"$truncated": 5000, "head": list(range(MAX_OBJECT_LIST))}
    assert hp["notes"] == {"$truncated": 10_000, "head": "x" * MAX_OBJECT_TEXT}
    assert report["objects"]["epoch"] == 2
    assert "hyper_parameters.lr" not in report["objects"]


def test_ls_text_still_shows_objects_one_per_row_and_short(run_cli, hparams):
    rows = [" ".join(line.split()) for line in run_cli("ls", hparams).stdout.splitlines()]
    assert "hyper_parameters.lr 0.1" in rows
    assert "hyper_parameters.params <21 items>" in rows
    assert "hyper_parameters.notes <10000 characters>" in rows


def test_objects_past_the_count_limit_are_counted(tmp_path):
    import pickle

    from ckptctl.formats import open_checkpoint
    from ckptctl.formats.pytorch._structure import MAX_OBJECTS

    path = tmp_path / "many.pkl"
    path.write_bytes(pickle.dumps({f"k{i}": i for i in range(MAX_OBJECTS + 3)}, protocol=2))
    with open_checkpoint(path) as ckpt:
        assert ckpt.objects["$omitted"] == 3
        assert len(ckpt.objects) == MAX_OBJECTS + 1


def test_objects_are_bounded_in_total(tmp_path):
    import pickle

    from ckptctl.formats import open_checkpoint
    from ckptctl.formats.pytorch._structure import MAX_OBJECT_BYTES

    text = ["y" * 4000] * 1000  # one list, memoised: a few KiB of pickle, 4 MB of values
    path = tmp_path / "memo.pkl"
    path.write_bytes(pickle.dumps({f"k{i}": text for i in range(50)}, protocol=2))
    assert path.stat().st_size < 100_000
    with open_checkpoint(path) as ckpt:
        kept = len(json.dumps(dict(ckpt.objects)))
        assert kept <= MAX_OBJECT_BYTES * 1.1
        assert ckpt.objects["$omitted"] > 0


# --- item 6: the manual pages work in an editable install too -------------------------------


def test_man_prints_the_committed_page(run_cli):
    from tests.conftest import REPO

    result = run_cli("man", "verify", "--roff")
    assert result.code == 0, result.stderr
    assert result.stdout == (REPO / "man" / "ckptctl-verify.1").read_text(encoding="utf-8")
    assert run_cli("man", "--roff").stdout == (REPO / "man" / "ckptctl.1").read_text(
        encoding="utf-8"
    )
    listed = run_cli("man", "--list").stdout.split()
    assert listed == sorted({p.stem for p in (REPO / "man").glob("*.1")}, key=listed.index)


def test_man_finds_its_pages_in_an_installed_package_alone(tmp_path):
    """Only the package, as site-packages holds it: no man/ directory, no share/man."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO

    site = tmp_path / "site"
    shutil.copytree(
        REPO / "ckptctl", site / "ckptctl", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "ckptctl", "man", "verify", "--roff"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO / "man" / "ckptctl-verify.1").read_text(encoding="utf-8")


def test_man_opens_the_page_in_man_on_a_terminal(run_cli, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import REPO

    shown: list[str] = []

    def fake_run(args, check):
        shown.append(Path(args[-1]).read_text(encoding="utf-8"))
        return subprocess.CompletedProcess(args, 0)

    monkeypatch.setattr("ckptctl.cli.man.shutil.which", lambda name: "/usr/bin/man")
    monkeypatch.setattr("ckptctl.cli.man.subprocess.run", fake_run)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    result = run_cli("man", "ls")
    assert result.code == 0
    assert shown == [(REPO / "man" / "ckptctl-ls.1").read_text(encoding="utf-8")]


def test_man_of_an_unknown_command_is_a_usage_error(run_cli):
    result = run_cli("man", "lss")
    assert result.code == 2
    assert "no manual page for 'lss'" in result.stderr
    assert "did you mean 'ls'?" in result.stderr


# --- item 9: narrow terminals ---------------------------------------------------------------


@pytest.fixture
def llama_names(tmp_path):
    tensors = {}
    for i in (0, 11):
        prefix = f"state_dict.model.layers.{i}."
        tensors[prefix + "input_layernorm.weight"] = np.ones(4096, "<f2")
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(4096, "<f2")
        tensors[prefix + "self_attn.q_proj.weight"] = np.ones((64, 64), "<f2")
    path = tmp_path / "narrow.safetensors"
    save_file(tensors, str(path))
    return path


def _terminal(width: int):
    from rich.console import Console

    out = io.StringIO()
    return out, Console(file=out, width=width, force_terminal=True, color_system=None)


def test_ls_at_70_columns_keeps_what_tells_rows_apart(llama_names):
    from ckptctl.ops.inspect import list_tensors
    from ckptctl.report.text import render_ls

    out, console = _terminal(70)
    render_ls(list_tensors(llama_names), console)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 70 for line in lines), lines
    start = next(i for i, line in enumerate(lines) if line.startswith("name "))
    table = lines[start : lines.index("", start)]
    names = [line.split("  ")[0] for line in table if line.strip() and not line.startswith(" ")]
    # every row is told apart: by its whole tail or, folded, by the whole name
    assert len(set(names)) == 6 + 1  # six names and the header
    for i in (0, 11):
        assert any(f"{i}.input_layernorm.weight" in n for n in names), names
        assert any(f"{i}.self_attn.q_proj.weight" in n for n in names), names
        assert f"state_dict.model.layers.{i}.post_attention_layernorm.weight" in names
    rows = [line for line in table if line.startswith(" ")]  # a folded name's cells
    assert rows
    assert all(line.rstrip().endswith("8.0 KiB") for line in rows)


def test_dry_run_plans_fit_the_terminal(llama_names, tmp_path):
    from ckptctl.ops.convert import ConvertOptions, convert
    from ckptctl.report.text import render_convert

    options = ConvertOptions(
        adapters=("pytorch-to-burn",),
        remap=(r"^state_dict\.model\.=",),
        dry_run=True,
    )
    report = convert(llama_names, tmp_path / "n.bpk", options)
    out, console = _terminal(70)
    render_convert(report, console)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 70 for line in lines), [line for line in lines if len(line) > 70]
    assert "  → layers.0.post_attention_layernorm.gamma  F16 [4096]" in lines
    assert "      layers.0.input_layernorm.weight: rule #1 '^state_dict\\.model\\.='" in lines
    # piped, the plan is not folded: one line per tensor and action, for grep
    piped = io.StringIO()
    from rich.console import Console

    render_convert(report, Console(file=piped, width=70, soft_wrap=True, no_color=True))
    assert any(len(line) > 70 for line in piped.getvalue().splitlines())


def test_man_install_makes_man_find_the_pages_after_an_editable_install(run_cli, tmp_path):
    # item 6: `pip install -e` places no share/man; `ckptctl man --install` (the README's set-up
    # runs it) writes the pages where man(1) looks for a PREFIX/bin on PATH
    import shutil
    import subprocess

    repo_man = Path(__file__).resolve().parents[2] / "man"
    result = run_cli("man", "--install", "--prefix", tmp_path)
    assert result.code == 0, result
    pages = tmp_path / "share" / "man" / "man1"
    committed = sorted(p.name for p in repo_man.glob("*.1"))
    assert sorted(p.name for p in pages.iterdir()) == committed
    for name in committed:
        assert (pages / name).read_text() == (repo_man / name).read_text()
    assert run_cli("man", "--install", "--prefix", tmp_path).code == 0  # again: replaced
    man = shutil.which("man")
    if man is None:
        pytest.skip("no man(1) on this machine")
    (tmp_path / "bin").mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    found = subprocess.run(
        [man, "-w", "ckptctl-verify"], env=env, capture_output=True, text=True, check=False
    )
    assert found.stdout.strip() == str(pages / "ckptctl-verify.1"), found
