"""The flow of ``ckptctl.ops.convert.convert``, pinned where mutation testing found gaps.

Covers what ``convert`` decides between reading and writing: the state-key warning (none for a
key that names one of the checkpoint's views, first among the warnings otherwise), adapters the
user already gave (never suggested again as a fix), the output size limit (the exact refusal,
with the limit given and with the default), and a sharded output split over several runs
(``shards`` K/N and ``index_only``: the refusals of ``_check_split`` word for word, the share
1/1, and the report of a share that holds no shard). Expected values come from the spec text
(README "A consolidated output bigger than one machine", man/ckptctl-convert.1), the fixtures'
ground truth (``fixtures/hostile/limits/README.md``, the DeepSpeed ``truth/*.json``) and
tensors written in each test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Option
from ckptctl.ops.convert import ConvertOptions, convert
from tests.conftest import VALID
from tests.formats.test_deepspeed import truth
from tests.ops.test_convert_mutants import _sharded_source, st, warnings_of
from tests.ops.test_convert_mutants_notes import rope_warning
from tests.strategies import array_entry

if TYPE_CHECKING:
    from pathlib import Path

# --- state key ----------------------------------------------------------------------------------


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
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert warnings_of(report) == [
        "1 of 2 tensors is outside state_key='model' and not written (optimizer.step)",
        rope_warning(1),
    ]


# --- target: fixes ------------------------------------------------------------------------------


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


# --- the output size limit ----------------------------------------------------------------------


def test_a_given_output_limit_refuses_a_bigger_output(tmp_path: Path) -> None:
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(16, "<f4"))])
    dst = tmp_path / "o.safetensors"
    with pytest.raises(UnsupportedError) as info:
        convert(src, dst, ConvertOptions(max_output_bytes=63))
    assert info.value.message == (
        f"converting it to {dst} would write 64 bytes of tensors, more than the limit of 63 "
        "bytes (the limit given)"
    )
    assert info.value.path == str(src)
    assert str(info.value.hint) == (
        "expanded views (stride 0) describe far more elements than the input stores; if this "
        "output is wanted, raise the limit with max_output_bytes=..."
    )
    assert not dst.exists()
    assert convert(src, dst, ConvertOptions(max_output_bytes=64)).written


def test_the_default_output_limit_scales_with_the_input(tmp_path: Path) -> None:
    """``pt_expanded_view_huge.pt``: 4 floats expanded to [2**38, 4], 4 TiB from 514 bytes."""
    src = VALID.parent / "hostile" / "limits" / "pt_expanded_view_huge.pt"
    dst = tmp_path / "o.safetensors"
    with pytest.raises(UnsupportedError) as info:
        convert(src, dst)
    size = src.stat().st_size
    assert info.value.message == (
        f"converting it to {dst} would write {2**38 * 4 * 4} bytes of tensors, more than the "
        f"limit of {2**30} bytes (the default: max({2**30}, 64 x the input's {size} bytes))"
    )
    assert info.value.path == str(src)
    assert str(info.value.hint) == (
        "expanded views (stride 0) describe far more elements than the input stores; if this "
        "output is wanted, raise the limit with max_output_bytes=..."
    )
    assert not dst.exists()


# --- a sharded output split over several runs ---------------------------------------------------


def _split_error(tmp_path: Path, **options: object) -> SelectionError:
    src = _sharded_source(tmp_path)
    with pytest.raises(SelectionError) as info:
        convert(src, tmp_path / "out.safetensors", ConvertOptions(**options))  # type: ignore[arg-type]
    assert not (tmp_path / "out.safetensors").exists()
    return info.value


@pytest.mark.parametrize("split", [{"shards": (1, 2)}, {"index_only": True}])
def test_a_share_or_the_index_alone_needs_a_sharded_output(
    tmp_path: Path, split: dict[str, object]
) -> None:
    error = _split_error(tmp_path, **split)
    assert error.message == "writing a share of the shards or only the index needs a sharded output"
    assert str(error.hint) == "pass max_shard_bytes='5GB' (the same in every run)"


def test_the_cli_names_the_shard_size_flag_with_an_example(tmp_path: Path, run_cli) -> None:
    src = _sharded_source(tmp_path)
    result = run_cli("convert", src, tmp_path / "out.safetensors", "--shards", "1/2")
    assert result.code == 2
    assert "pass --max-shard-size 5GB (the same in every run)" in result.stderr


def test_a_run_cannot_write_a_share_and_the_index(tmp_path: Path) -> None:
    error = _split_error(tmp_path, max_shard_bytes=16, shards=(1, 2), index_only=True)
    assert error.message == "a run writes either a share of the shards or only the index, not both"
    assert error.hint == "run the shares first, then one run with only the index"


@pytest.mark.parametrize(
    ("share", "hint"),
    [
        ((0, 3), "the shares of 3 runs are 1/3 .. 3/3"),
        ((4, 3), "the shares of 3 runs are 1/3 .. 3/3"),
        ((2, 1), "the shares of 1 runs are 1/1 .. 1/1"),
        ((1, 0), "the shares of 1 runs are 1/1 .. 1/1"),
    ],
)
def test_a_share_outside_one_to_n_is_refused_with_the_real_ones(
    tmp_path: Path, share: tuple[int, int], hint: str
) -> None:
    error = _split_error(tmp_path, max_shard_bytes=16, shards=share)
    k, n = share
    assert error.message == f"share {k}/{n} does not exist: K/N needs 1 <= K <= N"
    assert error.hint == hint


def test_share_one_of_one_writes_every_shard_and_no_index(tmp_path: Path) -> None:
    """Three 8-byte tensors in shards of at most 16 bytes: two shards (a+b, c)."""
    src = _sharded_source(tmp_path)
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
    src = _sharded_source(tmp_path)
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
    src = _sharded_source(tmp_path)
    (tmp_path / "out").mkdir()
    dst = tmp_path / "out" / "model.safetensors"
    report = convert(src, dst, ConvertOptions(max_shard_bytes=16, shards=(3, 3), fsync=False))
    assert list((tmp_path / "out").iterdir()) == []
    assert report.written is False
    assert report.destination == str(dst)
    assert report.bytes_written == 0
    assert warnings_of(report) == ["this share of the shards is empty: nothing written"]
