"""``convert --shards K/N`` runs plus ``--index-only`` against one whole run, for any input."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory``: name -> bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def assert_shares_equal_one_run(
    run_cli: Any, source: Path, tmp_path: Path, shard_size: str
) -> dict[str, bytes]:
    """Three ``--shards K/3`` runs (in any order, as a job array would) plus ``--index-only``
    write byte for byte the files of one whole run, and each run writes only its own shards
    (shard ``i`` of the sorted names is run ``i % 3 + 1``'s). Returns the whole run's files."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    size = ("--max-shard-size", shard_size)
    result = run_cli("convert", source, whole / "model.safetensors", *size)
    assert result.code == 0, result.stderr
    written = files_of(whole)
    shards = [n for n in written if not n.endswith(".index.json")]
    assert len(shards) >= 4  # more shards than runs: some runs write several
    for part in ("2/3", "1/3", "3/3"):
        before = set(files_of(split))
        result = run_cli("convert", source, split / "model.safetensors", *size, "--shards", part)
        assert result.code == 0, result.stderr
        k = int(part[0])
        mine = {n for i, n in enumerate(sorted(shards)) if i % 3 == k - 1}
        assert set(files_of(split)) - before == mine
    assert not any(n.endswith(".index.json") for n in files_of(split))
    result = run_cli("convert", source, split / "model.safetensors", *size, "--index-only")
    assert result.code == 0, result.stderr
    assert files_of(split) == written
    return written
