"""``expect``: names and shapes against a reference (the Tensor Loading Summary), with a
``convert`` command that writes a copy that fits."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl import save_checkpoint
from ckptctl.errors import CkptError
from ckptctl.fix import Command, Note, Option, hint_of
from ckptctl.formats import open_checkpoint
from ckptctl.ops.verify import Status
from tests.conftest import VALID
from tests.ops.test_verify import finding, one
from tests.ops.verify.test_flat_reader import truth_tensors

PT = VALID / "pytorch"
TINY = VALID / "safetensors" / "tiny.safetensors"
MIN_ZIP = PT / "min_zip.pt"


def _files(
    tmp_path: Path, source: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> tuple[Path, Path]:
    save_file(source, str(tmp_path / "file.safetensors"))
    save_file(ref, str(tmp_path / "ref.safetensors"))
    return tmp_path / "file.safetensors", tmp_path / "ref.safetensors"


def z(*shape: int) -> np.ndarray:
    return np.zeros(shape, "<f4")


def _example_a(tmp_path: Path) -> tuple[Path, Path]:
    """Burn's "Example A" (the research notes on burn-store): encoder.layer.N in the file, layers.N
    in the model."""
    source = {
        "encoder.layer.0.weight": z(8, 8),
        "encoder.layer.0.bias": z(8),
        "head.weight": z(8, 3),
    }
    ref = {k.replace("layer.", "layers."): v for k, v in source.items()}
    ref["head.weight"] = z(8, 5)
    return _files(tmp_path, source, ref)


def test_expect_mismatch_names_every_problem_and_a_fitting_copy(tmp_path):
    path, ref = _example_a(tmp_path)
    expect = finding(one(path, expect=ref), "expect")
    assert expect.status is Status.FAIL
    assert expect.summary is not None
    assert expect.summary.fixes  # the layer. -> layers. remap
    message = str(expect.message)
    assert str(ref) in message
    assert "0 of 3 reference tensors" in message
    for problem in ("2 missing", "1 shape mismatch", "2 not in the reference"):
        assert problem in message
    assert isinstance(expect.hint, Note)
    assert "did you mean 'encoder.layer.0.bias'?" in expect.hint.text
    assert expect.hint.fixes == (
        Command(
            "convert",
            (str(path), "fitted.safetensors"),
            (*expect.summary.fixes, Option("target", str(ref))),
        ),
    )
    assert expect.details == {}


def test_expect_fitting_copy_keeps_the_reference_format(tmp_path):
    path, ref = _example_a(tmp_path)
    bpk = tmp_path / "ref.bpk"
    with open_checkpoint(ref) as ckpt:
        save_checkpoint(bpk, list(ckpt.values()))
    bare = tmp_path / "reference"
    shutil.copy(ref, bare)
    for reference, name in ((bpk, "fitted.bpk"), (bare, "fitted.safetensors")):
        hint = finding(one(path, expect=reference), "expect").hint
        assert isinstance(hint, Note)
        (fitted,) = hint.fixes
        assert isinstance(fitted, Command)
        assert fitted.args == (str(path), name)  # no extension: safetensors


def test_expect_fitting_copy_below_a_state_key(tmp_path):
    path = PT / "nested.pt"
    ref = tmp_path / "ref.safetensors"
    # truth.json: model.0.weight (2, 3), model.0.bias (2,), model.2.weight (1, 2), model.2.bias (1,)
    shapes = {
        t["name"][6:]: tuple(t["shape"])
        for t in truth_tensors("nested.pt")
        if t["name"].startswith("model.")
    }
    save_file({f"layers.{k}": z(*s) for k, s in shapes.items()}, str(ref))
    expect = finding(one(path, state_key="model", expect=ref), "expect")
    assert expect.summary is not None
    assert expect.summary.fixes
    assert "0 of 4 reference tensors" in str(expect.message)
    assert "(4 missing, 4 not in the reference)" in str(expect.message)
    assert isinstance(expect.hint, Note)
    assert expect.hint.fixes == (
        Command(
            "convert",
            (str(path), "fitted.safetensors"),
            (Option("state_key", "model"), *expect.summary.fixes, Option("target", str(ref))),
        ),
    )
    assert "'layers.0.bias'" in expect.hint.text
    assert "'0.bias'" in expect.hint.text


@pytest.mark.parametrize(
    ("ref", "matched", "mismatches"),
    [
        ({"a": z(3), "b": z(4)}, 0, "2 shape mismatches"),
        ({"a": z(3), "b": z(3)}, 1, "1 shape mismatch)"),
    ],
)
def test_expect_shape_mismatches_alone(tmp_path, ref, matched, mismatches):
    path, ref_path = _files(tmp_path, {"a": z(2), "b": z(3)}, ref)
    expect = finding(one(path, expect=ref_path), "expect")
    assert expect.status is Status.FAIL
    assert f"{matched} of 2 reference tensors" in str(expect.message)
    assert mismatches in str(expect.message)
    assert "missing" not in str(expect.message)
    assert str(expect.hint).endswith("Tensor Loading Summary")
    assert "did you mean" not in str(expect.hint)


def test_expect_missing_without_a_suggestion(tmp_path):
    path, ref = _files(tmp_path, {"a": z(2), "b": z(3)}, {"a": z(2), "zzzz.qqq": z(7)})
    expect = finding(one(path, expect=ref), "expect")
    assert expect.status is Status.FAIL
    assert expect.summary is not None
    assert [m.suggestion for m in expect.summary.missing] == [None]
    assert "(1 missing, 1 not in the reference)" in str(expect.message)
    assert str(expect.hint).endswith("Tensor Loading Summary")
    assert "did you mean" not in str(expect.hint)


def test_expect_the_same_file_passes():
    expect = finding(one(TINY, expect=TINY), "expect")
    assert expect.status is Status.OK
    assert "4 of 4 reference tensors match" in str(expect.message)
    assert "(" not in str(expect.message).split(": ", 1)[1]  # no problem counted
    assert expect.hint is None
    assert expect.summary is not None


def test_expect_extra_tensors_only_warn(tmp_path):
    ref = tmp_path / "ref.safetensors"
    save_file({"fc.weight": z(3, 4)}, str(ref))
    result = one(TINY, expect=ref)
    expect = finding(result, "expect")
    assert expect.status is Status.WARN
    assert "1 of 1 reference tensors" in str(expect.message)
    assert "(3 not in the reference)" in str(expect.message)
    assert expect.hint is None
    assert result.ok


def test_expect_unreadable_reference(tmp_path):
    ref = tmp_path / "ref.safetensors"
    ref.write_bytes(b"<html></html>" * 4)
    with pytest.raises(CkptError) as info:
        open_checkpoint(ref)
    expect = finding(one(MIN_ZIP, expect=ref), "expect")
    assert expect.status is Status.FAIL
    assert str(ref) in str(expect.message)
    assert str(expect.message).endswith(info.value.message)
    assert expect.hint == hint_of(info.value)
