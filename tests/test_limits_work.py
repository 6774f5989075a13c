"""Work bounded by the input (issue 44, part 3): inputs of ordinary size whose naive reading did
work out of all proportion to them. Each is built in a temporary directory
(``tests/hostile_work.py``) and its command runs as a child process, measured as the other
hostile inputs are (``tests/test_limits.py``): within 10 s of CPU and 512 MiB, with the
expected outcome. Beside each, small in-process cases pin down what the bound must keep: real
layouts still read, the refusal names its cause.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from safetensors.numpy import load_file

from ckptctl import CorruptCheckpointError, UnsupportedError, open_checkpoint
from ckptctl.formats import sharded
from ckptctl.ops.verify import verify
from tests.conftest import REPO, load_module, run_measured, time_bound
from tests.hostile_work import (
    Chunk,
    Shared,
    Tensor,
    burn_record_of_zeros,
    dcp_metadata,
    gzip_of_zeros,
    safetensors_bytes,
    write_dcp,
    write_index,
)

pytestmark = pytest.mark.bounded

CHILD_SECONDS = time_bound(10.0)
CHILD_WALL_SECONDS = time_bound(60.0)
CHILD_BYTES = 512 << 20


def run_bounded(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``ckptctl ARGS`` as a child; assert it kept within the bounds; (exit code, output)."""
    run = run_measured(args, cwd)
    assert run.wall_seconds < CHILD_WALL_SECONDS, f"took {run.wall_seconds:.1f} s of wall clock"
    assert run.cpu_seconds < CHILD_SECONDS, f"took {run.cpu_seconds:.1f} s of CPU time"
    assert run.peak_rss < CHILD_BYTES, f"peak RSS {run.peak_rss >> 20} MiB"
    return run.code, run.output


# --- DCP: the tiling check ---------------------------------------------------------------------


def _columns(n: int, rows: int = 2) -> Tensor:
    """A ``[rows, n]`` tensor split into ``n`` one-column chunks (every pair shares its rows)."""
    return Tensor("w", (rows, n), tuple(Chunk((0, j), (rows, 1)) for j in range(n)))


def test_thousands_of_chunks_of_one_tensor_list_quickly(tmp_path: Path) -> None:
    # Compared pairwise, 8,000 column chunks took 35 s of CPU to list (issue 44).
    write_dcp(tmp_path / "ckpt", [_columns(8000)], same_item=True)
    code, output = run_bounded(["ls", str(tmp_path / "ckpt")], tmp_path)
    assert (code, "[2, 8000]" in output, "8,000 chunks" in output) == (0, True, True), output


def _metadata_only(directory: Path, tensor: Tensor) -> Path:
    """A ``.metadata`` for ``tensor`` alone (its chunks placed in one rank file that is not
    written: tiling is judged before the rank files are opened)."""
    directory.mkdir()
    places = {(tensor.name, c.offsets): ("__0_0.distcp", i, 1) for i, c in enumerate(tensor.chunks)}
    (directory / ".metadata").write_bytes(dcp_metadata([tensor], places))
    return directory


def test_overlapping_column_chunks_are_refused_naming_both(tmp_path: Path) -> None:
    chunks = list(_columns(6).chunks[:5])
    chunks[2] = Chunk((0, 2), (2, 2))  # columns 2-3, over chunk [0, 3]; column 5 is left over
    tensor = Tensor("w", (2, 6), tuple(chunks))
    with pytest.raises(CorruptCheckpointError, match=r"chunks \[0, 2\] and \[0, 3\] .* overlap"):
        open_checkpoint(_metadata_only(tmp_path / "ckpt", tensor))


def test_a_chunk_inside_another_is_an_overlap(tmp_path: Path) -> None:
    whole = Chunk((0, 0), (4, 4))
    inner = Chunk((1, 1), (2, 2))
    tensor = Tensor("w", (4, 4), (whole, inner))
    with pytest.raises(CorruptCheckpointError, match=r"chunks \[0, 0\] and \[1, 1\] .* overlap"):
        open_checkpoint(_metadata_only(tmp_path / "ckpt", tensor))


def test_a_gap_is_refused(tmp_path: Path) -> None:
    tensor = Tensor("w", (2, 6), _columns(6).chunks[:5])
    with pytest.raises(CorruptCheckpointError, match=r"cover 10 of its 12 elements"):
        open_checkpoint(_metadata_only(tmp_path / "ckpt", tensor))


def test_tilings_that_are_no_grid_read_whole(tmp_path: Path) -> None:
    # A brick wall: rows of chunks cut at different columns, and a 3-d split; every value is
    # assembled from its chunk.
    bricks = (
        Chunk((0, 0), (2, 3)), Chunk((0, 3), (2, 5)),
        Chunk((2, 0), (1, 1)), Chunk((2, 1), (1, 6)), Chunk((2, 7), (1, 1)),
    )  # fmt: skip
    cube = (
        *(Chunk((i, j, 0), (1, 2, 3)) for i in range(2) for j in (0, 2)),
        Chunk((2, 0, 0), (1, 4, 3)),
    )
    expected = write_dcp(
        tmp_path / "ckpt", [Tensor("wall", (3, 8), bricks), Tensor("cube", (3, 4, 3), cube)]
    )
    with open_checkpoint(tmp_path / "ckpt") as ckpt:
        for name, values in expected.items():
            np.testing.assert_array_equal(ckpt[name].load(), values)


def test_a_scattered_layout_past_the_checked_blocks_is_unsupported(tmp_path: Path) -> None:
    # 3-d slabs each cut at their own place: about 170 cuts per dimension, 4.9 million blocks
    # for 680 chunks, more than the overlap check marks.
    slabs = 170
    chunks = tuple(
        Chunk((i, j0, k0), (1, j1 - j0, k1 - k0))
        for i in range(slabs)
        for j0, j1 in ((0, i + 1), (i + 1, slabs + 1))
        for k0, k1 in ((0, i + 1), (i + 1, slabs + 1))
    )
    tensor = Tensor("w", (slabs, slabs + 1, slabs + 1), chunks)
    with pytest.raises(UnsupportedError, match=r"680 chunks of tensor 'w' cut it into \d+ blocks"):
        open_checkpoint(_metadata_only(tmp_path / "ckpt", tensor))


# --- DCP: planner_data key paths --------------------------------------------------------------


def _planner_case(directory: Path, parts: tuple[str, ...], names: int = 300) -> Path:
    """``names`` one-element tensors whose planner_data paths are one shared path of ``parts``
    (memoised once in the pickle)."""
    path = Shared(parts)
    tensors = [Tensor(f"t{i}", (1,), (Chunk((0,), (1,)),)) for i in range(names)]
    write_dcp(directory, tensors, {t.name: path for t in tensors}, same_item=True)
    return directory


def test_a_shared_key_path_of_200000_parts_is_refused_quickly(tmp_path: Path) -> None:
    # 15 s and 530 MiB before the bound (issue 44).
    directory = _planner_case(tmp_path / "ckpt", ("p",) * 200_000)
    assert (directory / ".metadata").stat().st_size < 2_000_000
    code, output = run_bounded(["ls", str(directory)], tmp_path)
    assert (code, "200000 parts" in output) == (3, True), output


def test_key_paths_up_to_the_limit_nest_the_tensors(tmp_path: Path) -> None:
    parts = tuple(f"k{i}" for i in range(65))
    directory = _planner_case(tmp_path / "ckpt", parts[:64], names=2)
    with open_checkpoint(directory) as ckpt:
        assert ckpt.structure is not None
        assert ckpt.structure.top_level_keys == ("k0",)
        assert list(ckpt.structure.containers.values()) == [2]  # both under the 63 outer keys
    (tmp_path / "long").mkdir()
    with pytest.raises(CorruptCheckpointError, match="65 parts"):
        open_checkpoint(_planner_case(tmp_path / "long" / "ckpt", parts, names=2))


# --- DCP: rank files past ``ulimit -n`` -----------------------------------------------------


def _run_with_open_files(
    args: list[str], cwd: Path, limit: int
) -> subprocess.CompletedProcess[str]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True, cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, preexec_fn=lower,
        timeout=CHILD_WALL_SECONDS, check=False,
    )  # fmt: skip


def test_more_rank_files_than_open_files_allowed(tmp_path: Path) -> None:
    # 1,100 rank files under ``ulimit -n 1024`` (a common default): "Too many open files"
    # before the pool (issue 44).
    n = 1100
    tensor = Tensor("w", (n, 2), tuple(Chunk((i, 0), (1, 2), f"__{i}_0.distcp") for i in range(n)))
    expected = write_dcp(tmp_path / "ckpt", [tensor])
    listed = _run_with_open_files(["ls", str(tmp_path / "ckpt")], tmp_path, 1024)
    assert (listed.returncode, "1,100 rank files" in listed.stdout) == (0, True), listed.stderr
    out = tmp_path / "out.safetensors"
    converted = _run_with_open_files(["convert", str(tmp_path / "ckpt"), str(out)], tmp_path, 1024)
    assert converted.returncode == 0, converted.stderr
    np.testing.assert_array_equal(load_file(out)["w"], expected["w"])


def test_a_rank_file_replaced_while_pooled_is_refused(tmp_path: Path) -> None:
    from ckptctl.sources import FilePool, PooledSource

    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"a" * 10)
    second.write_bytes(b"b" * 10)
    pool = FilePool(1)
    a, b = PooledSource(first, pool), PooledSource(second, pool)  # b's opening closes a
    try:
        assert b.read(0, 2) == b"bb"
        first.unlink()
        first.write_bytes(b"c" * 10)  # another file by the same name
        with pytest.raises(CorruptCheckpointError, match="replaced or changed"):
            a.read(0, 2)
    finally:
        a.close()
        b.close()


# --- a sharded index --------------------------------------------------------------------------


@pytest.mark.slow  # a 61 MB file
def test_an_index_of_two_million_names_for_one_small_shard(tmp_path: Path) -> None:
    # A 61 MB index: 18 s / 783 MiB to list, 29 s / 1.09 GiB to verify before (issue 44).
    index = write_index(tmp_path / "model", 2_000_000)
    code, output = run_bounded(["ls", str(index)], tmp_path)
    assert (code, "model.safetensors" in output, "hold at most 5" in output) == (3, True, True)
    code, output = run_bounded(["verify", str(index)], tmp_path)
    assert (code, "hold at most 5" in output) == (1, True), output[-2000:]


def test_many_misplaced_names_are_counted_past_the_first(tmp_path: Path) -> None:
    # Within what the shard can hold, every misplaced name is a problem: the first
    # MAX_PROBLEMS are described, the rest counted.
    index = write_index(tmp_path / "model", 500)
    problems = sharded.check_index(index)
    assert len(problems) == sharded.MAX_PROBLEMS + 1
    assert problems[-1] == "and 399 more problems of these kinds"
    with pytest.raises(CorruptCheckpointError, match=r"'t1' .* \(498 more problems\)"):
        open_checkpoint(index)


def test_verify_counts_every_problem_not_the_sentences_shown(tmp_path: Path) -> None:
    # verify said "101 problems" here: the 100 described plus the sentence counting the rest.
    index = write_index(tmp_path / "model", 500)
    report = verify([str(index)], checks=("sharded-index",))
    finding = next(f for f in report.files[0].findings if f.check == "sharded-index")
    assert str(finding.message).startswith("499 problems:"), finding.message
    assert len(finding.details["problems"]) == sharded.MAX_PROBLEMS + 1


def test_an_index_within_its_shards_sizes_opens(tmp_path: Path) -> None:
    names = {f"t{i}": np.full(1, i, "<f4") for i in range(3000)}
    (tmp_path / "a.safetensors").write_bytes(safetensors_bytes(names))
    body = ",".join(f'"{n}": "./a.safetensors"' for n in names)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {}, "weight_map": {' + body + "}}", encoding="utf-8")
    with open_checkpoint(index) as ckpt:
        assert len(ckpt) == 3000
        assert ckpt["t2999"].load()[0] == 2999


# --- a gzip record ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def burn_records() -> ModuleType:
    module: ModuleType = load_module(REPO / "fixtures" / "make_burn_records.py")
    return module


@pytest.mark.slow  # an 8 MiB file that claims 8 GiB
def test_a_gzip_record_inflating_to_8_gib_is_refused_quickly(
    burn_records: ModuleType, tmp_path: Path
) -> None:
    # 8 MiB of gzip, two 4 GiB tensors of zeros: 20 s to list before (issue 44).
    path = tmp_path / "bomb.mpk.gz"
    path.write_bytes(gzip_of_zeros(burn_record_of_zeros(burn_records, [4095 << 20] * 2)))
    assert path.stat().st_size < 9 << 20
    code, output = run_bounded(["ls", str(path)], tmp_path)
    assert (code, "inflates to more than" in output) == (3, True), output


def test_a_gzip_record_within_the_budget_reads(burn_records: ModuleType, tmp_path: Path) -> None:
    # 60 MiB of zeros in 60 KiB: under the least budget any record has.
    path = tmp_path / "zeros.mpk.gz"
    path.write_bytes(gzip_of_zeros(burn_record_of_zeros(burn_records, [60 << 20])))
    with open_checkpoint(path) as ckpt:
        assert ckpt["t0"].shape == (60 << 20,)
        assert not ckpt["t0"].load().any()


def test_the_inflation_budget_grows_with_the_file(burn_records: ModuleType, tmp_path: Path) -> None:
    # 128 MiB of zeros: past the least budget in 128 KiB, within it once the file is 3 MiB.
    parts = burn_record_of_zeros(burn_records, [128 << 20])
    path = tmp_path / "zeros.mpk.gz"
    path.write_bytes(gzip_of_zeros(parts))
    with pytest.raises(CorruptCheckpointError, match="inflates to more than 67108864 bytes"):
        open_checkpoint(path)
    padded = tmp_path / "padded.mpk.gz"
    packed = gzip_of_zeros(parts)
    padded.write_bytes(packed + bytes((3 << 20) - len(packed)))  # trailing bytes, ignored
    with open_checkpoint(padded) as ckpt:
        assert ckpt["t0"].shape == (128 << 20,)
