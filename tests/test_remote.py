"""Remote checkpoints (issue 16): every command that reads a file reads a URL, by range requests.

A loopback server (``tests/loopback.py``, 127.0.0.1, random port) serves the fixture set; no test
touches the internet. Skipped, with the reason, when the ``remote`` extra is not installed (the
``dev`` extra installs it, so CI runs these).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, VALID, run_measured, time_bound

pytest.importorskip("fsspec", reason="the 'remote' extra (fsspec) is not installed")
pytest.importorskip("aiohttp", reason="the 'remote' extra (aiohttp) is not installed")

from ckptctl.sources import remote as _remote
from tests.loopback import LoopbackServer, serve

FIXTURES = sorted(
    p.relative_to(VALID).as_posix()
    for p in VALID.rglob("*")
    if p.is_file()
    and p.suffix not in (".md", ".py")
    and p.name != "truth.json"
    # a DeepSpeed save is a local folder: its `latest` and model states stand for the whole
    # save only there (a URL of one of them is read as that one file)
    and not p.relative_to(VALID).as_posix().startswith("deepspeed/")
)


@pytest.fixture(scope="module")
def server():
    with serve(VALID) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch):
    server.no_range = False
    server.drop = 0
    server.forbidden = set()
    server.required_token = None
    server.gzip_body = None
    server.bad_range = None
    server.drip_seconds = 0.0
    server.log.clear()
    monkeypatch.setattr(_remote, "RETRY_DELAY_SECONDS", 0.01)
    _remote.TRAFFIC.take()


def _strip_paths(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip_paths(v) for k, v in obj.items() if k not in ("path", "remote")}
    if isinstance(obj, list):
        return [_strip_paths(v) for v in obj]
    return obj


def _json(text: str) -> object:
    return json.loads(text) if text.strip() else None


@pytest.mark.parametrize("name", FIXTURES)
def test_remote_ls_matches_local(name: str, server: LoopbackServer, run_cli) -> None:
    local = run_cli("ls", "--json", VALID / name)
    remote = run_cli("ls", "--json", f"{server.url}/{name}")
    assert remote.code == local.code, remote.stderr
    lj, rj = _json(local.stdout), _json(remote.stdout)
    assert _strip_paths(rj) == _strip_paths(lj)
    if local.code == 0:
        assert isinstance(rj, dict)
        assert rj["path"] == f"{server.url}/{name}"
        assert rj["remote"]["requests"] >= 2
        assert rj["remote"]["bytes_fetched"] <= 4 * (VALID / name).stat().st_size + (1 << 20)


@pytest.mark.parametrize("name", FIXTURES)
def test_remote_convert_matches_local(
    name: str, server: LoopbackServer, run_cli, tmp_path: Path
) -> None:
    local = run_cli("convert", VALID / name, tmp_path / "local.safetensors", "-q", "--no-fsync")
    remote = run_cli(
        "convert", f"{server.url}/{name}", tmp_path / "remote.safetensors", "-q", "--no-fsync"
    )
    assert remote.code == local.code, remote.stderr
    if (tmp_path / "local.safetensors").exists():
        assert (tmp_path / "remote.safetensors").read_bytes() == (
            tmp_path / "local.safetensors"
        ).read_bytes()
    else:
        assert not (tmp_path / "remote.safetensors").exists()


def _sparse_safetensors(path: Path, total: int, tensors: int = 64) -> None:
    """A safetensors file of ``total`` bytes whose data is a hole (a sparse file)."""
    each = (total - 65536) // tensors // 4 * 4
    header = {f"layers.{i}.weight": {"dtype": "F32", "shape": [each // 4],
                                     "data_offsets": [i * each, (i + 1) * each]}
              for i in range(tensors)}  # fmt: skip
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + each * tensors)


def test_one_gib_safetensors_lists_cheaply(tmp_path: Path, run_cli) -> None:
    _sparse_safetensors(tmp_path / "big.safetensors", 1 << 30)
    with serve(tmp_path) as srv:
        result = run_cli("ls", "--json", f"{srv.url}/big.safetensors")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["tensors"]) == 64
    assert report["remote"]["requests"] <= 3
    assert report["remote"]["bytes_fetched"] < 1 << 20
    assert report["remote"]["requests"] == len(srv.log)


def test_pt_zip_lists_in_few_requests(server: LoopbackServer, run_cli) -> None:
    zips = [n for n in FIXTURES if n.endswith(".pt") and (VALID / n).read_bytes()[:2] == b"PK"]
    assert zips
    for name in zips:
        server.log.clear()
        result = run_cli("ls", "--json", f"{server.url}/{name}")
        if result.code == 0:
            assert json.loads(result.stdout)["remote"]["requests"] <= 6, name
            assert len(server.log) <= 6, name


def test_header_and_verify_read_urls(server: LoopbackServer, run_cli) -> None:
    url = f"{server.url}/safetensors/tiny.safetensors"
    local = run_cli("header", "--json", VALID / "safetensors" / "tiny.safetensors")
    remote = run_cli("header", "--json", url)
    assert remote.code == local.code == 0
    assert _strip_paths(json.loads(remote.stdout)) == _strip_paths(json.loads(local.stdout))
    verify = run_cli("verify", "--json", "--no-nan", url)
    assert verify.code == 0, verify.stderr
    assert json.loads(verify.stdout)["remote"]["requests"] >= 2


def test_diff_remote_against_local(server: LoopbackServer, run_cli) -> None:
    name = "safetensors/tiny.safetensors"
    result = run_cli("diff", "--json", f"{server.url}/{name}", VALID / name)
    assert result.code == 0, result.stdout + result.stderr


def test_sharded_index_opens_shards_remotely(server: LoopbackServer, run_cli) -> None:
    indexes = [n for n in FIXTURES if n.endswith(".index.json")]
    assert indexes
    for name in indexes:
        local = run_cli("ls", "--json", VALID / name)
        remote = run_cli("ls", "--json", f"{server.url}/{name}")
        assert remote.code == local.code, remote.stderr
        assert _strip_paths(_json(remote.stdout)) == _strip_paths(_json(local.stdout))


def test_404_and_403_exit_3_with_status_and_url(server: LoopbackServer, run_cli) -> None:
    missing = run_cli("ls", f"{server.url}/nope.safetensors")
    assert missing.code == 3
    assert "404" in missing.stderr
    assert f"{server.url}/nope.safetensors" in missing.stderr
    assert "Traceback" not in missing.stderr
    server.forbidden = {"safetensors/tiny.safetensors"}
    forbidden = run_cli("ls", f"{server.url}/safetensors/tiny.safetensors")
    assert forbidden.code == 3
    assert "403" in forbidden.stderr


def test_credentials_never_printed(server: LoopbackServer, run_cli) -> None:
    url = server.url.replace("http://", "http://user:s3cret@") + "/nope.bin?token=abc123&v=1"
    result = run_cli("ls", "--json", url)
    assert result.code == 3
    for secret in ("s3cret", "abc123"):
        assert secret not in result.stderr + result.stdout


def test_no_range_support_is_refused_unless_download(
    server: LoopbackServer, run_cli, tmp_path: Path
) -> None:
    _sparse_safetensors(tmp_path / "mid.safetensors", 4 << 20, tensors=4)
    with serve(tmp_path) as srv:
        srv.no_range = True
        # a header beyond the first block: the second read starts past byte 0
        refused = run_cli("ls", f"{srv.url}/mid.safetensors", "--filter", "x")
        small = _remote.BLOCK_BYTES * (1 + _remote.READAHEAD_BLOCKS)
        if (tmp_path / "mid.safetensors").stat().st_size > small:
            big = run_cli("verify", "--no-nan", f"{srv.url}/mid.safetensors")
            assert big.code == 1
            assert "range requests" in big.stdout + big.stderr
        assert refused.code in (0, 3)
        fetched = run_cli("verify", "--no-nan", "--download", f"{srv.url}/mid.safetensors")
        assert fetched.code == 0, fetched.stdout + fetched.stderr


def test_dropped_connections_are_retried(server: LoopbackServer, run_cli) -> None:
    server.drop = 2
    result = run_cli("ls", "--json", f"{server.url}/safetensors/tiny.safetensors")
    assert result.code == 0, result.stderr


def test_dropped_connections_give_up_with_exit_3(server: LoopbackServer, run_cli) -> None:
    server.drop = 1000
    result = run_cli("ls", f"{server.url}/safetensors/tiny.safetensors")
    assert result.code == 3
    assert f"failed {_remote.MAX_ATTEMPTS} times" in result.stderr
    assert len(server.log) <= 4 * _remote.MAX_ATTEMPTS  # info: HEAD, then GET; bounded


def test_file_changed_between_requests_exits_3(tmp_path: Path) -> None:
    _sparse_safetensors(tmp_path / "moving.safetensors", 8 << 20, tensors=4)
    with serve(tmp_path) as srv:
        source = _remote.RemoteSource(f"{srv.url}/moving.safetensors")
        try:
            source.read(0, 8)
            st = (tmp_path / "moving.safetensors").stat()
            os.utime(tmp_path / "moving.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
            with pytest.raises(_remote.RemoteError, match="changed"):
                source.read(4 << 20, 16)
        finally:
            source.close()


def test_legacy_pt_needs_yes_above_the_threshold(
    server: LoopbackServer, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = [n for n in FIXTURES if n.endswith(".pt") and (VALID / n).read_bytes()[:1] == b"\x80"]
    assert legacy
    name = legacy[0]
    monkeypatch.setattr(_remote, "MAX_UNCONFIRMED_FETCH_BYTES", 16)
    refused = run_cli("ls", f"{server.url}/{name}")
    assert refused.code == 2
    assert "--yes" in refused.stderr
    allowed = run_cli("ls", "--yes", "--json", f"{server.url}/{name}")
    local = run_cli("ls", "--json", VALID / name)
    assert allowed.code == local.code
    assert _strip_paths(_json(allowed.stdout)) == _strip_paths(_json(local.stdout))


def test_hf_urls_resolve_against_hf_endpoint(
    server: LoopbackServer, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    server.required_token = "hf_secret_token"
    local = run_cli("ls", "--json", VALID / "safetensors" / "tiny.safetensors")
    remote = run_cli("ls", "--json", "hf://safetensors/tiny.safetensors@main")
    assert remote.code == 0, remote.stderr
    assert _strip_paths(json.loads(remote.stdout)) == _strip_paths(json.loads(local.stdout))
    assert json.loads(remote.stdout)["path"] == "hf://safetensors/tiny.safetensors"
    assert any("/safetensors/resolve/main/tiny.safetensors" in p for _, p, _, _ in server.log)
    monkeypatch.setenv("HF_TOKEN", "wrong")
    denied = run_cli("ls", "hf://safetensors/tiny.safetensors")
    assert denied.code == 3
    assert "401" in denied.stderr
    assert "wrong" not in denied.stderr


def test_hf_parse_and_bare_repo_resolution(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _remote.parse_hf("hf://org/repo/model.safetensors@v1") == _remote.HubFile(
        "org/repo", "model.safetensors", "v1"
    )
    assert _remote.parse_hf("hf://org/repo@v1/sub/model.bin") == _remote.HubFile(
        "org/repo", "sub/model.bin", "v1"
    )
    assert _remote.parse_hf("hf://org/repo").filename is None
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    assert _remote.HubFile("org/repo", "a b.bin", "refs/pr/1").url() == (
        "https://hub.example/org/repo/resolve/refs%2Fpr%2F1/a%20b.bin"
    )
    (tmp_path / "org" / "repo").mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "org" / "repo" / name).write_bytes(b"{}")
    with serve(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
        resolved = _remote.resolve_url("hf://org/repo", (".safetensors", ".bin"))
    assert resolved == "hf://org/repo/model.safetensors"


def test_redact() -> None:
    assert _remote.redact("https://u:p@h/x.pt?X-Amz-Signature=s&v=1") == (
        "https://h/x.pt?X-Amz-Signature=REDACTED&v=1"
    )


def test_local_paths_never_import_fsspec() -> None:
    code = (
        "import sys; from ckptctl.cli import main\n"
        "try:\n    main(['ls', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('fsspec', 'aiohttp', 'requests', 'ckptctl.sources.remote')\n"
        "       if m in sys.modules]\n"
        "assert not bad, bad"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(VALID / "safetensors" / "tiny.safetensors")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_without_fsspec_a_url_names_the_extra(server: LoopbackServer) -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"
        "from ckptctl.cli import main\nmain(['ls', sys.argv[1]])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, f"{server.url}/safetensors/tiny.safetensors"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "pip install 'ckptctl[remote]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_reference_and_optimizer_options_take_urls(
    server: LoopbackServer, run_cli, tmp_path
) -> None:
    model, optim = f"{server.url}/optim/model.bpk", f"{server.url}/optim/optim.bpk"
    attached = run_cli("verify", VALID / "optim" / "model.bpk", "--optimizer", optim)
    assert attached.code == 0, attached.stdout + attached.stderr
    expect = run_cli("verify", VALID / "optim" / "model.bpk", "--expect", model)
    assert expect.code == 0, expect.stdout + expect.stderr
    out = tmp_path / "fitted.bpk"
    fitted = run_cli("convert", VALID / "optim" / "model.bpk", out, "--target", model)
    assert fitted.code == 0, fitted.stderr
    missing = run_cli("verify", VALID / "optim" / "model.bpk", "--expect", f"{server.url}/nope.bpk")
    assert missing.code == 1
    assert "cannot be read" in missing.stdout


def test_a_failed_remote_command_leaves_no_count_for_the_next(run_cli) -> None:
    """Counts left by a command that failed after fetching (no report took them) must not show
    up in the next command's report in the same process."""
    _remote.TRAFFIC.add(2, 4096)  # what a remote read that then failed leaves behind
    local = run_cli("ls", "--json", VALID / "safetensors" / "tiny.safetensors")
    assert local.code == 0
    assert "remote" not in json.loads(local.stdout)


@pytest.mark.parametrize(
    "name", ["safetensors/tiny.safetensors", "burnpack/net.bpk", "pytorch/nested.pt"]
)
def test_remote_tree_is_header_only(name: str, server: LoopbackServer, run_cli) -> None:
    # ls --tree needs the names only: as many requests as plain ls, the same tree as locally
    plain = json.loads(run_cli("ls", "--json", f"{server.url}/{name}").stdout)
    remote = json.loads(run_cli("ls", "--tree", "--json", f"{server.url}/{name}").stdout)
    local = json.loads(run_cli("ls", "--tree", "--json", VALID / name).stdout)
    assert remote["tree"] == local["tree"]
    assert remote["remote"]["requests"] == plain["remote"]["requests"]
    assert remote["remote"]["bytes_fetched"] == plain["remote"]["bytes_fetched"]


# --- issue 44: what a server answers is checked, never trusted ---------------------------------


def _random_safetensors(path: Path, tensors: int = 2, floats: int = 1 << 18) -> None:
    """A safetensors file of random F32 tensors of ``floats`` values each (1 MiB by default):
    every tensor after the first starts well past byte 4096, and is read by its own request."""
    rng = np.random.default_rng(44)
    each = floats * 4
    header = {f"t{i}": {"dtype": "F32", "shape": [floats],
                        "data_offsets": [i * each, (i + 1) * each]}
              for i in range(tensors)}  # fmt: skip
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = rng.standard_normal(floats * tensors).astype("<f4").tobytes()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """384 MiB of zeros gzipped to about 1.7 MiB: what a server may send for a small range."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join([*(packer.compress(zeros) for _ in range(384)), packer.flush()])


@pytest.mark.bounded
def test_gzip_encoded_range_is_refused_never_inflated(
    server: LoopbackServer, gzip_bomb: bytes, tmp_path: Path
) -> None:
    """A range answered with Content-Encoding: gzip used to be inflated whole (the bomb's 384
    MiB, in a child measured by its peak RSS); it is refused before its body is read."""
    server.gzip_body = gzip_bomb
    url = f"{server.url}/safetensors/tiny.safetensors"
    run = run_measured(["hash", url], tmp_path)
    assert run.code == 3, run.output
    assert "Content-Encoding" in run.output
    assert url in run.output
    assert "Traceback" not in run.output
    assert run.peak_rss < 256 << 20, f"peak {run.peak_rss >> 20} MiB"
    ranged = [h for method, _, rng, h in server.log if method == "GET" and rng]
    assert ranged
    assert all(h.get("Accept-Encoding") == "identity" for h in ranged)


@pytest.mark.parametrize("mode", ["shift", "total", "missing"])
def test_a_206_of_other_bytes_than_asked_exits_3(mode: str, run_cli, tmp_path: Path) -> None:
    """A 206 whose Content-Range starts 4 KiB before the request (or names another file size,
    or is absent) gave wrong digests with exit 0; now exit 3 naming the request's range."""
    _random_safetensors(tmp_path / "r.safetensors")
    local = run_cli("hash", tmp_path / "r.safetensors")
    assert local.code == 0
    with serve(tmp_path) as srv:
        url = f"{srv.url}/r.safetensors"
        honest = run_cli("hash", url)
        assert (honest.code, honest.stdout) == (0, local.stdout)  # the ground truth over HTTP
        srv.bad_range = mode
        result = run_cli("hash", url)
    assert result.code == 3, result.stdout
    assert url in result.stderr
    assert result.stdout == ""
    asked = [r for _, _, r, _ in srv.log if r and int(r[6:].split("-")[0]) >= 4096][-1]
    assert f"{asked[6:]}/" in result.stderr  # "a request of bytes S-E/SIZE"
    assert "answered" in result.stderr


def test_a_200_serves_only_a_read_from_byte_0(run_cli, tmp_path: Path) -> None:
    """A server ignoring Range answers 200 and the whole file: good for a read at byte 0, of
    which only the bytes asked for are taken; any other read exits 3 naming range requests."""
    _random_safetensors(tmp_path / "r.safetensors", tensors=4)
    with serve(tmp_path) as srv:
        srv.no_range = True
        url = f"{srv.url}/r.safetensors"
        listed = run_cli("ls", "--json", url)
        assert listed.code == 0, listed.stderr
        fetched = json.loads(listed.stdout)["remote"]["bytes_fetched"]
        assert fetched <= (1 + _remote.READAHEAD_BLOCKS) * _remote.BLOCK_BYTES
        hashed = run_cli("hash", url)
    assert hashed.code == 3
    assert "range requests" in hashed.stderr
    assert url in hashed.stderr


@pytest.mark.bounded
def test_a_byte_at_a_time_meets_the_whole_request_deadline(
    server: LoopbackServer, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One byte every 50 ms never trips the per-read timeout (5 s here); the whole-request
    deadline (CKPTCTL_REMOTE_DEADLINE) ends the read, without retrying it."""
    monkeypatch.setenv("CKPTCTL_REMOTE_TIMEOUT", "5")
    monkeypatch.setenv("CKPTCTL_REMOTE_DEADLINE", "0.5")
    server.drip_seconds = 0.05
    url = f"{server.url}/safetensors/dtypes.safetensors"  # 1186 bytes: a minute of dripping
    start = time.monotonic()
    result = run_cli("ls", url)
    seconds = time.monotonic() - start
    assert result.code == 3, result.stdout
    assert url in result.stderr
    assert "CKPTCTL_REMOTE_DEADLINE" in result.stderr
    assert seconds < time_bound(5.0), f"took {seconds:.1f} s"
    assert sum(1 for method, *_ in server.log if method == "GET") == 1


def _index_naming(shard: str) -> bytes:
    tensors = ("step", "fc.bias", "fc.weight", "mask")  # tiny.safetensors' tensors
    return json.dumps({"metadata": {}, "weight_map": dict.fromkeys(tensors, shard)}).encode()


@pytest.mark.parametrize(
    "shard",
    [
        "%2e%2e/%2e%2e/secret/model.safetensors",
        "%2E%2E%2F%2E%2E%2Fsecret%2Fmodel.safetensors",
        "sub/%2e%2e/%2e%2e/%2e%2e/secret/model.safetensors",
        ".%2e/.%2e/secret/model.safetensors",
    ],
)
def test_a_remote_index_never_fetches_outside_its_folder(
    shard: str, run_cli, tmp_path: Path
) -> None:
    """URL libraries decode %2e to a dot and then drop ``..`` with the folder before it: a
    shard name that would leave the index's folder is refused, and nothing outside is fetched."""
    (tmp_path / "secret").mkdir()
    shutil.copy(
        VALID / "safetensors" / "tiny.safetensors", tmp_path / "secret" / "model.safetensors"
    )
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "model.safetensors.index.json").write_bytes(_index_naming(shard))
    with serve(tmp_path) as srv:
        result = run_cli("ls", f"{srv.url}/a/b/model.safetensors.index.json")
    assert result.code == 3, result.stdout
    assert "leave" in result.stderr
    assert f"{srv.url}/a/b/" in result.stderr
    assert not [p for _, p, _, _ in srv.log if "secret" in p]


def test_a_remote_index_still_reads_shards_in_subfolders(run_cli, tmp_path: Path) -> None:
    (tmp_path / "a" / "sub").mkdir(parents=True)
    shutil.copy(
        VALID / "safetensors" / "tiny.safetensors", tmp_path / "a" / "sub" / "x..y.safetensors"
    )
    index = tmp_path / "a" / "model.safetensors.index.json"
    index.write_bytes(_index_naming("sub/x..y.safetensors"))
    with serve(tmp_path) as srv:
        result = run_cli("ls", "--json", f"{srv.url}/a/model.safetensors.index.json")
    assert result.code == 0, result.stderr
    assert len(json.loads(result.stdout)["tensors"]) == 4


@pytest.mark.parametrize(
    "url",
    [
        "hf://org/repo/../../x/model.safetensors",
        "hf://org/repo/%2e%2e/%2e%2e/x/model.safetensors",
        "hf://org/repo/./../../x/model.safetensors",
        "hf://org/repo/model.safetensors@..",
    ],
)
def test_hf_urls_never_leave_the_repo(
    url: str, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what /org/repo/resolve/main/../../x/model.safetensors becomes once normalised
    for folder in ("org/repo/x", "org/repo", "x"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(
            VALID / "safetensors" / "tiny.safetensors", tmp_path / folder / "model.safetensors"
        )
    with serve(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        result = run_cli("ls", url)
        fine = run_cli("ls", "hf://org/repo/model.safetensors")
    assert fine.code == 0, fine.stderr
    assert result.code == 3, result.stdout
    assert "hf://org/repo" in result.stderr
    assert len(srv.log) == 2  # the good URL's two requests; none for the refused one
