"""``verify``'s configuration file (issue 28): found upwards, keys like the long options, the
command line over the file over the defaults, ``--show-config``, errors naming file and line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.ops._walk import glob_matches
from ckptctl.ops.config import load_verify_config
from tests.conftest import VALID

PT = VALID / "pytorch"
NEEDS_TRUST = VALID / "trust" / "argparse_namespace.pt"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp/proj with models/ (a nested checkpoint, two needs-trust files), cwd = proj/sub."""
    root = tmp_path / "proj"
    (root / "models" / "legacy").mkdir(parents=True)
    (root / "sub").mkdir()
    shutil.copy(PT / "nested.pt", root / "models" / "nested.pt")
    shutil.copy(NEEDS_TRUST, root / "models" / "args.pt")
    shutil.copy(NEEDS_TRUST, root / "models" / "legacy" / "args.pt")
    monkeypatch.chdir(root / "sub")
    return root


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_pyproject_is_found_upwards_and_its_settings_apply(run_cli, project: Path) -> None:
    nested = project / "models" / "nested.pt"
    assert run_cli("verify", nested).code == 1  # tensors are under 'model'
    write(
        project / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.ckptctl.verify]\nstate-key = "model"\n',
    )
    result = run_cli("verify", nested)
    assert result.code == 0, result.stdout
    assert "below state key 'model'" in result.stdout


def test_the_command_line_overrides_the_file_key_by_key(run_cli, project: Path) -> None:
    write(
        project / ".ckptctl.toml",
        '[verify]\nstate-key = "model"\nmin-tensors = 100\n',
    )
    nested = project / "models" / "nested.pt"
    failed = run_cli("verify", nested, "--json")
    assert failed.code == 1
    (file,) = json.loads(failed.stdout)["files"]
    statuses = {f["check"]: f["status"] for f in file["findings"]}
    assert statuses["min-tensors"] == "fail"
    assert statuses["flat-reader"] == "ok"  # state-key from the file still applies
    assert run_cli("verify", nested, "--min-tensors", "4").code == 0

    shown = run_cli("verify", "--show-config", "--min-tensors", "4", "--json")
    assert shown.code == 0
    data = json.loads(shown.stdout)
    assert data["path"] == str(project / ".ckptctl.toml")
    assert data["table"] == "[verify]"
    settings = {s["key"]: s for s in data["settings"]}
    assert list(settings) == ["check", "skip", "allow-global", "min-tensors", "no-nan", "state-key"]
    assert settings["min-tensors"] == {
        "key": "min-tensors",
        "value": 4,
        "source": "command line",
        "line": None,
    }
    assert settings["state-key"] == {
        "key": "state-key",
        "value": "model",
        "source": str(project / ".ckptctl.toml"),
        "line": 2,
    }
    assert settings["no-nan"] == {
        "key": "no-nan",
        "value": False,
        "source": "default",
        "line": None,
    }


def test_show_config_text_names_each_source(run_cli, project: Path) -> None:
    write(project / ".ckptctl.toml", "# ours\n[verify]\n\nskip = ['flat-reader']\n")
    result = run_cli("verify", "--show-config", "--no-nan")
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"configuration: {project / '.ckptctl.toml'} [verify]"
    rows = {row[0]: row[1:] for row in (re.split(r"\s{2,}", line) for line in lines[1:])}
    assert rows["skip"] == ['["flat-reader"]', f"{project / '.ckptctl.toml'}:4"]
    assert rows["no-nan"] == ["true", "command line"]
    assert rows["check"] == ["[]", "default"]


def test_show_config_without_a_file(run_cli, project: Path) -> None:
    result = run_cli("verify", "--show-config")
    assert result.code == 0
    assert result.stdout.splitlines()[0].startswith("configuration: none found")
    assert "default" in result.stdout


def test_the_nearest_file_wins_and_ckptctl_toml_before_pyproject(project: Path) -> None:
    write(project / "pyproject.toml", "[tool.ckptctl.verify]\nno-nan = true\n")
    write(project / "sub" / "pyproject.toml", '[project]\nname = "not ours"\n')  # no table: skipped
    assert load_verify_config(project / "sub").values == {"no-nan": True}
    write(project / ".ckptctl.toml", "[verify]\nmin-tensors = 3\n")
    config = load_verify_config(project / "sub")
    assert config.path == str(project / ".ckptctl.toml")
    assert config.values == {"min-tensors": 3}
    write(project / "sub" / ".ckptctl.toml", "[verify]\ncheck = ['safe-pickle']\n")
    assert load_verify_config(project / "sub").values == {"check": ["safe-pickle"]}


def test_another_projects_broken_pyproject_is_ignored(run_cli, project: Path) -> None:
    write(project / "pyproject.toml", "[project\nname = \n")
    assert run_cli("verify", PT / "min_zip.pt").code == 0


def test_allow_global_everywhere_and_per_glob(run_cli, project: Path) -> None:
    models = project / "models"
    write(
        project / "pyproject.toml",
        "[tool.ckptctl.verify]\ncheck = ['safe-pickle']\n\n"
        "[tool.ckptctl.verify.allow-global]\n'models/legacy/*.pt' = ['argparse.Namespace']\n",
    )
    result = run_cli("verify", models, "--json")
    verdicts = {
        Path(f["path"]).relative_to(models).as_posix(): f["ok"]
        for f in json.loads(result.stdout)["files"]
    }
    assert verdicts == {"args.pt": False, "legacy/args.pt": True, "nested.pt": True}
    assert result.code == 1
    # the command line replaces the file's allow-global, globs included
    assert run_cli("verify", models / "legacy" / "args.pt", "--allow-global", "x.Y").code == 1
    write(
        project / "pyproject.toml",
        "[tool.ckptctl.verify]\ncheck = ['safe-pickle']\nallow-global = ['argparse.Namespace']\n",
    )
    assert run_cli("verify", models).code == 0
    assert run_cli("verify", models, "--no-config").code == 1


def test_no_nan_from_the_file(run_cli, project: Path) -> None:
    path = project / "models" / "nan.safetensors"
    save_file({"w": np.array([1.0, np.nan], dtype=np.float32)}, str(path))
    assert run_cli("verify", path).code == 0
    write(project / ".ckptctl.toml", "[verify]\nno-nan = true\n")
    result = run_cli("verify", path)
    assert result.code == 1
    assert "NaN or Inf in 1 of 1 float tensor" in result.stdout


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "pyproject.toml",
            '[project]\nname = "x"\n\n[tool.ckptctl.verify]\ncheck = []\nmin_tensors = 3\n',
            "line 6: unknown key 'min_tensors' in [tool.ckptctl.verify]",
        ),
        (
            "pyproject.toml",
            "[tool.ckptctl]\nverify = { no-nan = true }\n\n[tool.ckptctl.ls]\nx = 1\n",
            "line 4: unknown key 'ls' in [tool.ckptctl]",
        ),
        (
            ".ckptctl.toml",
            "[verify]\nno-nan = true\n\n[verfy]\n",
            "line 4: unknown key 'verfy' in the top level",
        ),
        (
            ".ckptctl.toml",
            "[verify]\n\n\ncheck = ['safe-pickle', 'safe-pickles']\n",
            "line 4: unknown check 'safe-pickles' in 'check'",
        ),
        (".ckptctl.toml", "[verify]\nskip = ['readable']\n", "line 2: unknown check 'readable'"),
        (".ckptctl.toml", "[verify]\nmin-tensors = '3'\n", "line 2: 'min-tensors' must be a whole"),
        (".ckptctl.toml", "[verify]\nno-nan = 1\n", "line 2: 'no-nan' must be true or false"),
        (".ckptctl.toml", "[verify]\nstate-key = ''\n", "line 2: 'state-key' must be a non-empty"),
        (
            ".ckptctl.toml",
            "[verify]\nno-nan = true\n\n[verify.state-key]\n'*.pt' = ['model']\n",
            "line 4: 'state-key' must be a non-empty dotted key",
        ),
        (
            ".ckptctl.toml",
            "[verify]\nallow-global = 'a.B'\n",
            "line 2: 'allow-global' must be a list",
        ),
        (".ckptctl.toml", "[verify]\nno-nan = tru\n", "invalid TOML: "),
    ],
    ids=[
        "pyproject-key",
        "tool-table",
        "own-table",
        "check",
        "skip-readable",
        "int",
        "bool",
        "str",
        "state-key-glob",
        "list",
        "toml",
    ],
)
def test_a_bad_file_is_a_usage_error_naming_file_and_line(
    run_cli, project: Path, name: str, text: str, message: str
) -> None:
    path = write(project / name, text)
    result = run_cli("verify", PT / "min_zip.pt")
    assert result.code == 2
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"ckptctl: error: {path}: "), first
    assert message in first
    assert "Traceback" not in result.stderr
    assert run_cli("verify", PT / "min_zip.pt", "--no-config").code == 0


def test_an_unknown_key_gets_did_you_mean(run_cli, project: Path) -> None:
    write(project / ".ckptctl.toml", "[verify]\nmin-tensor = 3\n")
    result = run_cli("verify", PT / "min_zip.pt")
    assert result.stderr.splitlines()[1].startswith("hint: did you mean 'min-tensors'?")


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("models/legacy/*.pt", "models/legacy/a.pt", True),
        ("models/legacy/*.pt", "models/legacy/deeper/a.pt", False),
        ("models/**/*.pt", "models/legacy/deeper/a.pt", True),
        ("models/**/*.pt", "models/a.pt", True),
        ("**", "anything/at/all.bin", True),
        ("*.pt", "models/a.pt", False),
        ("model-?.pt", "model-1.pt", True),
        ("model-[!0].pt", "model-0.pt", False),
        ("a+b.pt", "a+b.pt", True),
    ],
)
def test_glob_matches(pattern: str, path: str, matches: bool) -> None:
    assert glob_matches(pattern, path) is matches


# --- state-key per path glob (issue 48) --------------------------------------------------------

STATE_KEY_GLOBS = "[tool.ckptctl.verify.state-key]\n'**/*.pt' = 'model'\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository holding a flat model.safetensors and a {model, optimizer} ckpt.pt (cwd)."""
    root = tmp_path / "repo"
    (root / "runs" / "1").mkdir(parents=True)
    shutil.copy(VALID / "safetensors" / "tiny.safetensors", root / "model.safetensors")
    shutil.copy(PT / "nested.pt", root / "runs" / "1" / "ckpt.pt")
    monkeypatch.chdir(root)
    return root


def _flat_reader(result) -> dict[str, str]:
    """flat-reader's status per file, by path relative to the repository."""
    return {
        Path(f["path"]).as_posix(): next(
            g["status"] for g in f["findings"] if g["check"] == "flat-reader"
        )
        for f in json.loads(result.stdout)["files"]
    }


def test_state_key_per_glob_covers_flat_files_and_nested_checkpoints(run_cli, repo: Path) -> None:
    failed = run_cli("verify", ".", "--json")
    assert failed.code == 1  # no one state key fits both files
    assert _flat_reader(failed) == {"model.safetensors": "ok", "runs/1/ckpt.pt": "fail"}
    assert run_cli("verify", ".", "--state-key", "model").code == 1  # now the flat file fails

    write(repo / "pyproject.toml", '[project]\nname = "x"\n\n' + STATE_KEY_GLOBS)
    result = run_cli("verify", ".", "--json")
    assert result.code == 0, result.stdout
    assert _flat_reader(result) == {"model.safetensors": "ok", "runs/1/ckpt.pt": "ok"}
    text = run_cli("verify", ".")
    assert "below state key 'model'" in text.stdout
    # the globs are relative to the configuration file's directory, wherever verify runs
    assert run_cli("verify", repo / "runs").code == 0


def test_state_key_globs_in_ckptctl_toml_and_show_config(run_cli, repo: Path) -> None:
    path = write(repo / ".ckptctl.toml", "[verify]\nno-nan = true\n\n[verify.state-key]\n"
                 "'runs/**' = 'model'\n'*.safetensors' = 'model'\n")  # fmt: skip
    result = run_cli("verify", ".", "--json")
    assert _flat_reader(result) == {"model.safetensors": "fail", "runs/1/ckpt.pt": "ok"}
    shown = run_cli("verify", "--show-config", "--json")
    settings = {s["key"]: s for s in json.loads(shown.stdout)["settings"]}
    assert settings["state-key"]["value"] == {"runs/**": "model", "*.safetensors": "model"}
    assert settings["state-key"]["source"] == str(path)
    assert settings["state-key"]["line"] == 4
    # the command line replaces the file's table, as it does allow-global's
    replaced = run_cli("verify", "runs", "--state-key", "optimizer", "--json")
    assert _flat_reader(replaced) == {"runs/1/ckpt.pt": "fail"}


def test_globs_giving_one_file_two_state_keys_are_a_usage_error(run_cli, repo: Path) -> None:
    write(
        repo / ".ckptctl.toml",
        "[verify.state-key]\n'**/*.pt' = 'model'\n'runs/**' = 'model'\n'runs/1/*' = 'state_dict'\n",
    )
    result = run_cli("verify", ".")
    assert result.code == 2
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert "ckpt.pt" in first
    assert "'**/*.pt'" in first
    assert "'runs/1/*'" in first
    assert "Traceback" not in result.stderr
    # the command line replaces the globs (and the flat file fails below 'model')
    assert run_cli("verify", ".", "--state-key", "model").code == 1
    # the same key from several globs is no conflict
    write(repo / ".ckptctl.toml", "[verify.state-key]\n'**/*.pt' = 'model'\n'runs/**' = 'model'\n")
    assert run_cli("verify", ".").code == 0


def test_the_library_takes_state_keys_per_glob(repo: Path) -> None:
    from ckptctl.errors import SelectionError
    from ckptctl.ops.verify import verify

    report = verify([repo], state_key_for={"runs/**": "model"}, globs_root=repo)
    assert report.ok
    with pytest.raises(SelectionError, match="state-key globs"):
        verify([repo], state_key_for={"runs/**": "model", "**.pt": "x"}, globs_root=repo)
