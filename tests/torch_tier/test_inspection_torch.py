"""Issue 27 against torch: hashes of one checkpoint in three formats, values and statistics.

Each checkpoint here is built with torch and saved by torch itself (``torch.save``), by
``safetensors.torch.save_file`` and by ckptctl's burnpack writer; ground truth is what torch
says about its own tensors.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.torch


def _state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(27)
    base = torch.randn(6, 4, generator=g)
    return {
        "model.embed.weight": torch.randn(10, 4, generator=g),
        "model.layers.0.attn.weight": torch.randn(4, 4, generator=g).to(torch.bfloat16),
        "model.layers.1.attn.weight": torch.randn(4, 4, generator=g).to(torch.float16),
        "model.layers.0.fp8": (torch.randn(8, generator=g) * 3).to(torch.float8_e4m3fn),
        "model.layers.1.fp8": (torch.randn(8, generator=g) * 3).to(torch.float8_e5m2),
        "model.mask": torch.rand(5, generator=g) > 0.5,
        "model.steps": torch.arange(-3, 9, dtype=torch.int64).reshape(3, 4),
        "model.codes": torch.randint(0, 255, (7,), dtype=torch.uint8, generator=g),
        "model.small": torch.randint(-100, 100, (2, 2), dtype=torch.int8, generator=g),
        "model.transposed": base.t(),  # a non-contiguous view in the .pt
        "model.f64": torch.randn(3, dtype=torch.float64, generator=g),
    }


def _torch_digest(t) -> str:
    raw = t.contiguous().view(-1).view(torch.uint8) if t.numel() else torch.empty(0)
    return "sha256:" + hashlib.sha256(raw.numpy().tobytes()).hexdigest()


@pytest.fixture
def three_formats(tmp_path):
    from ckptctl.formats import open_checkpoint, save_checkpoint

    state = _state()
    torch.save(state, tmp_path / "model.pt")
    safetensors_torch.save_file({k: v.contiguous() for k, v in state.items()},
                                str(tmp_path / "model.safetensors"))  # fmt: skip
    with open_checkpoint(tmp_path / "model.pt") as ckpt:  # burnpack has no FP8 dtypes
        save_checkpoint(tmp_path / "model.bpk", [e for e in ckpt.entries() if "fp8" not in e.name])
    return state, tmp_path


def test_hashes_agree_across_pt_safetensors_bpk_and_torch(three_formats, run_cli):
    state, root = three_formats
    manifests = {}
    for ext in ("pt", "safetensors", "bpk"):
        result = run_cli("hash", root / f"model.{ext}")
        assert result.code == 0, result.stderr
        manifests[ext] = {json.loads(line)["name"]: json.loads(line)
                          for line in result.stdout.splitlines()}  # fmt: skip
    assert manifests["pt"] == manifests["safetensors"]
    assert manifests["bpk"] == {k: v for k, v in manifests["pt"].items() if "fp8" not in k}
    for name, t in state.items():
        assert manifests["pt"][name]["digest"] == _torch_digest(t), name
        assert manifests["pt"][name]["shape"] == list(t.shape)
    (root / "m.jsonl").write_text(run_cli("hash", root / "model.pt").stdout)
    verdict = run_cli("verify", root / "model.safetensors", "--hashes", root / "m.jsonl")
    assert verdict.code == 0, verdict.stdout
    partial = run_cli("verify", root / "model.bpk", "--hashes", root / "m.jsonl", "--json")
    assert partial.code == 1  # the FP8 tensors are missing from the .bpk, and named
    (finding,) = [f for f in json.loads(partial.stdout)["files"][0]["findings"]
                  if f["check"] == "hashes"]  # fmt: skip
    assert sorted(finding["details"]["missing"]) == ["model.layers.0.fp8", "model.layers.1.fp8"]


def _tree_model():
    from torch import nn

    class Block(nn.Module):  # type: ignore[misc]  # torch is untyped to mypy here
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.Linear(8, 8)
            self.norm = nn.BatchNorm1d(8)  # buffers too: running stats, num_batches_tracked

    class Net(nn.Module):  # type: ignore[misc]  # torch is untyped to mypy here
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            self.layers = nn.ModuleList(Block() for _ in range(12))
            self.head = nn.Linear(8, 20, bias=False)
            self.head.weight = self.embed.weight  # tied

    return Net()


def test_tree_totals_are_torchs_own_counts_per_module(tmp_path, run_cli):
    net = _tree_model()
    torch.save(net.state_dict(), tmp_path / "net.pt")
    tree = json.loads(run_cli("ls", tmp_path / "net.pt", "--tree", "--expand", "--json").stdout)
    nodes = {}

    def walk(node):
        nodes[node["path"]] = node
        for child in node.get("children", []):
            walk(child)

    walk(tree["tree"])
    seen: set[int] = set()
    first_owner = {}
    for name, t in net.state_dict(keep_vars=False).items():  # torch's order: first owner counts
        ptr = t.untyped_storage().data_ptr()
        first_owner[name] = ptr not in seen
        seen.add(ptr)
    for prefix, module in net.named_modules():
        if not prefix:
            continue
        state = module.state_dict()
        buffers = {name for name, _ in module.named_buffers()}  # torch's own split
        owned = {k: t for k, t in state.items() if first_owner[f"{prefix}.{k}"]}
        params = sum(t.numel() for k, t in owned.items() if k not in buffers)
        in_buffers = sum(t.numel() for k, t in owned.items() if k in buffers)
        nbytes = sum(t.numel() * t.element_size() for t in owned.values())
        node = nodes[prefix]
        assert (node["tensors"], node["parameters"], node["buffers"], node["nbytes"]) == (
            len(state),
            params,
            in_buffers,
            nbytes,
        ), prefix
    assert nodes["head.weight"]["tied_to"] == "embed.weight"
    # torch's parameters() counts a tied one once, and buffers apart
    assert tree["tree"]["parameters"] == sum(p.numel() for p in net.parameters())
    assert tree["tree"]["buffers"] == sum(b.numel() for b in net.buffers())
    collapsed = json.loads(run_cli("ls", tmp_path / "net.pt", "--tree", "--json").stdout)["tree"]
    (layers,) = [c for c in collapsed["children"] if c["path"].startswith("layers")]
    assert (layers["name"], layers["repeat"]) == ("layers.{0..11}", 12)


def test_show_decodes_every_dtype_as_torch_does(three_formats, run_cli):
    state, root = three_formats
    for ext in ("pt", "safetensors"):
        result = run_cli("show", root / f"model.{ext}", "--filter", ".", "--json")
        assert result.code == 0, result.stderr
        shown = {t["name"]: t for t in json.loads(result.stdout)["tensors"]}
        for name, t in state.items():
            narrow = t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
            values = (t.float() if narrow else t).contiguous().numpy()
            assert shown[name]["preview"] == str(values), (ext, name)  # torch's decoding
            stats = shown[name]["stats"]
            wide = t.double()
            finite = wide[torch.isfinite(wide)]
            assert stats["min"] == finite.min().item(), name
            assert stats["max"] == finite.max().item(), name
            assert stats["absmax"] == finite.abs().max().item(), name
            assert math.isclose(stats["mean"], finite.mean().item(), rel_tol=1e-12), name
            assert math.isclose(stats["std"], finite.std().item(), rel_tol=1e-9), name  # corr. 1
            assert stats["zeros"] == int((wide == 0).sum()), name
            assert stats["nan"] == int(torch.isnan(wide).sum()), name
            assert stats["inf"] == int(torch.isinf(wide).sum()), name


def test_statistics_match_torch_on_a_large_bf16_tensor_with_nan(tmp_path, run_cli):
    g = torch.Generator().manual_seed(3)
    t = (torch.randn(3000, 1500, generator=g) * 7 - 2).to(torch.bfloat16)  # 9 MB: two chunks
    t[5, 5] = float("nan")
    t[7, 1] = float("-inf")
    t[100:200] = 0
    torch.save({"w": t}, tmp_path / "w.pt")
    stats = json.loads(run_cli("show", tmp_path / "w.pt", "w", "--json").stdout)["tensors"][0]
    stats = stats["stats"]
    wide = t.double()
    finite = wide[torch.isfinite(wide)]
    assert (stats["min"], stats["max"]) == (finite.min().item(), finite.max().item())
    assert math.isclose(stats["mean"], finite.mean().item(), rel_tol=1e-12)
    assert math.isclose(stats["std"], finite.std().item(), rel_tol=1e-9)
    assert (stats["nan"], stats["inf"], stats["zeros"]) == (1, 1, int((wide == 0).sum()))
    hist, _ = torch.histogram(
        finite.float(), bins=32, range=(finite.min().item(), finite.max().item())
    )
    assert stats["histogram"]["counts"] == [int(c) for c in hist]
