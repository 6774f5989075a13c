"""``show`` and ``ls --stats`` (issue 27, item 2).

Ground truth: numpy's own ``str(array)`` of the arrays the files were written from, and
numpy's statistics in float64 over their finite values (the torch tier checks the same against
torch's printing and statistics, BF16 and FP8 included).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

SHAPES = [(), (3,), (1000,), (1001,), (6, 6, 6, 6), (7, 3, 1000), (2, 0, 5), (10, 10, 11),
          (1, 1, 2000), (40, 40)]  # fmt: skip


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(27)
    out = {f"f32_{i}": rng.standard_normal(s).astype("<f4") for i, s in enumerate(SHAPES)}
    out["f16"] = (rng.standard_normal((50, 50)) * 100).astype("<f2")
    out["f64"] = rng.standard_normal(3000).astype("<f8") * 1e-7
    out["i64"] = rng.integers(-(2**40), 2**40, (33, 33)).astype("<i8")
    out["u8"] = rng.integers(0, 256, 5000).astype("u1")
    out["bool"] = rng.random((30, 40)) > 0.7
    bad = rng.standard_normal(2000).astype("<f4")
    bad[[3, 500, 1999]] = np.nan
    bad[[7, 8]] = [np.inf, -np.inf]
    bad[100:150] = 0.0
    bad[150] = -0.0
    out["bad"] = bad
    out["allnan"] = np.full(4, np.nan, "<f4")
    return out


@pytest.fixture(scope="module")
def model(arrays, tmp_path_factory):
    path = tmp_path_factory.mktemp("show") / "values.safetensors"
    save_file(arrays, str(path))
    return path


def _show(run_cli, *args):
    result = run_cli("show", *args, "--json")
    assert result.code == 0, result.stderr
    return {t["name"]: t for t in json.loads(result.stdout)["tensors"]}


def test_the_preview_is_numpys_own_printing(run_cli, model, arrays):
    shown = _show(run_cli, model, *arrays)
    for name, array in arrays.items():
        assert shown[name]["preview"] == str(array), name


def _truth(array: np.ndarray) -> dict[str, float | int | None]:
    values = array.astype(np.float64).reshape(-1)
    finite = values[np.isfinite(values)]
    some = finite.size > 0
    return {
        "count": values.size,
        "min": float(finite.min()) if some else None,
        "max": float(finite.max()) if some else None,
        "mean": float(finite.mean()) if some else None,
        "std": float(finite.std(ddof=1)) if finite.size > 1 else None,
        "absmax": float(np.abs(finite).max()) if some else None,
        "zeros": int(np.count_nonzero(values == 0)),
        "nan": int(np.isnan(values).sum()),
        "inf": int(np.isinf(values).sum()),
    }


def test_statistics_are_numpys_over_the_finite_values(run_cli, model, arrays):
    shown = _show(run_cli, model, *arrays)
    for name, array in arrays.items():
        stats, truth = shown[name]["stats"], _truth(array)
        for key, want in truth.items():
            got = stats[key]
            if want is None or isinstance(want, int):
                assert got == want, (name, key)
            else:
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-300), (name, key)


def test_the_histogram_counts_every_finite_value(run_cli, model, arrays):
    shown = _show(run_cli, model, "bad", "f32_2")
    for name in ("bad", "f32_2"):
        hist = shown[name]["stats"]["histogram"]
        finite = arrays[name][np.isfinite(arrays[name])]
        want, _ = np.histogram(finite, bins=len(hist["counts"]), range=(finite.min(), finite.max()))
        assert hist["counts"] == want.tolist()


def test_a_tensor_of_several_chunks_streams_to_the_same_numbers(run_cli, tmp_path):
    rng = np.random.default_rng(5)
    big = (rng.standard_normal((3, 1 << 20)) * 4 + 1000).astype("<f4")  # 12 MiB, mean >> std
    save_file({"big": big}, str(tmp_path / "big.safetensors"))
    stats = _show(run_cli, tmp_path / "big.safetensors", "big")["big"]["stats"]
    truth = _truth(big)
    assert math.isclose(stats["mean"], float(truth["mean"] or 0), rel_tol=1e-12)
    assert math.isclose(stats["std"], float(truth["std"] or 0), rel_tol=1e-9)
    assert (stats["min"], stats["max"]) == (truth["min"], truth["max"])


def test_text_shows_values_stats_and_a_unicode_histogram(run_cli, model, arrays, monkeypatch):
    monkeypatch.delenv("NO_COLOR")
    text = run_cli("show", model, "f32_1").stdout
    assert str(arrays["f32_1"]) in text
    assert "zeros 0 (0.0%)  NaN 0  Inf 0" in text
    (hist,) = [
        line for line in text.splitlines() if line.startswith(f"{arrays['f32_1'].min():.4g}")
    ]
    assert "█" in hist


def test_no_color_draws_the_histogram_in_ascii(run_cli, model):
    text = run_cli("show", model, "f32_2").stdout  # run_cli sets NO_COLOR
    last = text.splitlines()[-1]
    assert last.isascii()
    assert "@" in last


def test_filter_and_names_and_unknown_names(run_cli, model):
    shown = _show(run_cli, model, "u8", "--filter", "^f16$")
    assert list(shown) == ["u8", "f16"]
    missing = run_cli("show", model, "f33_1")
    assert missing.code == 2
    assert "no tensor named 'f33_1'" in missing.stderr
    assert "did you mean" in missing.stderr


def test_no_stats_reads_only_the_preview(run_cli, model):
    shown = _show(run_cli, model, "f32_2", "--no-stats")
    assert shown["f32_2"]["stats"] is None


def test_ls_stats_adds_the_columns_and_the_numbers(run_cli, model, arrays):
    listing = json.loads(run_cli("ls", model, "--stats", "--json").stdout)
    for item in listing["tensors"]:
        truth = _truth(arrays[item["name"]])
        assert item["stats"]["nan"] == truth["nan"]
        assert item["stats"]["zeros"] == truth["zeros"]
        assert item["stats"]["max"] == truth["max"]
    text = run_cli("ls", model, "--stats").stdout
    header = text.splitlines()[1].split()
    assert header[-8:] == ["min", "max", "mean", "std", "absmax", "zeros", "NaN", "Inf"]


def test_blocks_summed_in_one_pass_and_in_two_give_numpys_numbers(run_cli, tmp_path):
    # Blocks of spread-out values take the one-pass sum of squares; a block whose mean is 10^6
    # times its spread, a constant one and an all-zero one cancel and are summed in two passes.
    from ckptctl.ops.values import BLOCK_ELEMENTS

    rng = np.random.default_rng(8)
    n = BLOCK_ELEMENTS
    blocks = [
        rng.standard_normal(n) * 3 - 1,
        10_000 + rng.standard_normal(n) * 0.01,  # one pass would keep no digit of the std here
        np.full(n, 0.1),
        np.zeros(n),
        rng.standard_normal(n // 3) * 1e-30,
    ]
    for name, values in {"mixed": np.concatenate(blocks), "offset": blocks[1]}.items():
        array = values.astype("<f4")
        save_file({name: array}, str(tmp_path / "b.safetensors"))
        stats = _show(run_cli, tmp_path / "b.safetensors", name)[name]["stats"]
        truth = _truth(array)
        assert math.isclose(stats["mean"], float(truth["mean"] or 0), rel_tol=1e-12), name
        assert math.isclose(stats["std"], float(truth["std"] or 0), rel_tol=1e-12), name
        assert stats["zeros"] == truth["zeros"], name
