"""``ckptctl verify``: the CI gate."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from ckptctl.cli._options import (
    CheckpointRef,
    InputPath,
    OutputFormat,
    emit_verdict,
    jobs_option,
    quiet_option,
    remote_options,
    sarif_output_options,
    state_key_option,
)
from ckptctl.cli._progress import data_progress, file_name
from ckptctl.errors import ExitCode
from ckptctl.ops.config import SETTINGS
from ckptctl.ops.verify import ALWAYS_REPORTED, CHECKS

if TYPE_CHECKING:
    from ckptctl.model import JSONValue, Progress
    from ckptctl.report.verify import VerifyReport


#: The command's --help (and man page) text; its Examples are run by tests/test_docs.py.
HELP = """Check each FILE for CI: exit 0 when every file passes, 1 when any fails.

Every file is checked for: readable (opens and passes every structural check; lfs-pointer
instead when it, or a part of it such as a shard, is a git-lfs pointer: run git lfs pull),
safe-pickle (pickle-based files: the verdict safe, needs-trust or unsafe, with every global
named; safe means torch.load(weights_only=True) loads it, or, for a DCP directory or
DeepSpeed save, that it names only the inert classes its producer's loader reads besides;
unsafe always fails and needs-trust fails unless --trust or --allow-global), sharded-index
(*.index.json against its shards), flat-reader (a reader expecting a top-level name ->
tensor map, such as candle's from_pth, would find tensors: nested checkpoints, whole pickled
models, TorchScript archives and empty files fail, with the fix; no flat reader opens a DCP
directory, so a nested one passes) and quant-layout (files with GPTQ, AWQ, bitsandbytes, FP8
or compressed-tensors modules: packed shapes, scales, zero points and group index agree; a
broken module is named with the disagreement); GGUF files also get gguf-layout (offsets,
types and names as llama.cpp's reader requires, where gguf-py is more lenient; a
general.architecture key) and chat-template (a tokenizer.chat_template that reaches Python
internals when rendered by Jinja, such as __globals__ or cycler's internals, is unsafe, the
construct named); ONNX models whose external data declares a checksum get onnx-checksum
(each data file hashed whole against the SHA-1 the model declares). Unreadable, corrupt or
unsafe files are reported as failures, not errors, and never stop the other files; a file
that is no checkpoint but holds pickles (a NumPy object array, a zip with a pickle under
another name) still gets a safe-pickle verdict. --no-nan, --expect, --min-tensors,
--optimizer and --hashes add checks; --check and --skip choose which are reported.

A directory is walked (sorted, hidden directories left out): every file named like a
checkpoint (*.safetensors, *.pt, *.pth, *.bin, *.ckpt, *.bpk, *.mpk[.gz], *.pkl, *.gguf,
*.onnx, *.npy, *.npz, *.distcp, *.index.json) is checked and fails when no reader accepts
it; files with other names that are no checkpoint and hold no pickle (configs, tokenizers)
are skipped, counted, and listed with -v (--json: summary.skipped_paths); a directory with
one *.index.json stays one sharded checkpoint. After several files the summary counts them
by verdict (safe, needs-trust, unsafe, unreadable). -j N checks N files at once; the output
is the same.

Settings come from [tool.ckptctl.verify] in pyproject.toml or [verify] in .ckptctl.toml,
the first found from the current directory upwards (keys: check, skip, allow-global, also
as a table of path glob = [globals], min-tensors, no-nan, state-key, also as a table of
path glob = "key"; a file two globs give different keys is refused, exit 2); an option
given on the command line replaces the file's value. --show-config prints what is in
force.

\b
Examples:
  ckptctl verify weights.pt model.bpk
  ckptctl verify checkpoint.pt  # exit 1: tensors are under 'model'
  ckptctl verify checkpoint.pt --state-key model --no-nan
  ckptctl verify trained.bpk --optimizer optim.bpk
  ckptctl verify whole_model.pt --check safe-pickle --trust
  ckptctl verify models/ -j 4 -q
  ckptctl verify models/ -v
  ckptctl verify models/ --format sarif
  ckptctl verify args.pt --print-safe-globals
  ckptctl verify --show-config
  ckptctl verify model.safetensors --hashes model.manifest
"""


@click.command("verify", help=HELP)
@click.argument("files", nargs=-1, type=InputPath(), metavar="FILES...")
@state_key_option
@click.option(
    "--no-nan",
    is_flag=True,
    help="Also scan every float tensor for NaN and Inf (reads all tensor bytes, in chunks; a "
    "progress bar on a terminal).",
)
@click.option(
    "--expect",
    metavar="REF",
    type=CheckpointRef(),
    help="Fail unless the tensor names and shapes match the reference checkpoint REF "
    "(prints the Tensor Loading Summary with 'Did you mean').",
)
@click.option(
    "--min-tensors",
    metavar="N",
    type=click.IntRange(min=0),
    help="Fail files with fewer than N tensors.",
)
@click.option(
    "--optimizer",
    metavar="OPTIM",
    type=CheckpointRef(),
    help="Check that the Burn optimizer record OPTIM (optim-N.bpk) attaches to each FILE's "
    "ParamIds (prints the Optimizer State Check).",
)
@click.option(
    "--hashes",
    metavar="MANIFEST",
    type=click.Path(exists=True, dir_okay=False),
    help="Fail unless every tensor's name, dtype, shape and digest match MANIFEST (written by "
    "ckptctl hash; reads every tensor byte, with a progress bar on a terminal).",
)
@click.option(
    "--check",
    "checks",
    metavar="NAME",
    multiple=True,
    type=click.Choice(CHECKS),
    help="Report only this check (repeatable; readable and lfs-pointer are always reported): "
    "e.g. "
    "--check safe-pickle for optimizer, scheduler and training-argument files.",
)
@click.option(
    "--skip",
    metavar="NAME",
    multiple=True,
    type=click.Choice([c for c in CHECKS if c not in ALWAYS_REPORTED]),
    help="Do not report this check (repeatable).",
)
@click.option(
    "--allow-global",
    "allow_globals",
    metavar="MODULE.NAME",
    multiple=True,
    help="Trust this pickle global (repeatable), as torch.serialization.add_safe_globals does: "
    "a needs-trust file whose only untrusted globals are allowed passes. Unsafe globals stay "
    "unsafe.",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Accept needs-trust pickles with a warning instead of failing (unsafe ones still fail).",
)
@click.option(
    "--show-config",
    is_flag=True,
    help="Print the settings in force (check, skip, allow-global, min-tensors, no-nan, "
    "state-key) and where each comes from (command line, configuration file and line, "
    "default), then exit 0 without checking anything.",
)
@click.option(
    "--print-safe-globals",
    is_flag=True,
    help="Print the Python that lets torch.load(FILE, weights_only=True) load each needs-trust "
    "FILE (torch.serialization.add_safe_globals with the imports) and check nothing; refuses "
    "unsafe files (exit 3) and files that need trust for other reasons (exit 4).",
)
@click.option(
    "--no-config",
    is_flag=True,
    help="Ignore .ckptctl.toml and [tool.ckptctl.verify] in pyproject.toml.",
)
@jobs_option(
    "Check N files at once (worker processes), and with --no-nan scan N tensors at once; the "
    "report is the same, in the same order, for any N."
)
@quiet_option("Show only files that fail or warn, and no progress bar.")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="List every file a directory walk skipped (one 'skipped: PATH' line each, after the "
    "count); --json and --format sarif always list them.",
)
@remote_options
@sarif_output_options
def command(
    files: tuple[str, ...],
    state_key: str | None,
    no_nan: bool,
    expect: str | None,
    min_tensors: int | None,
    optimizer: str | None,
    hashes: str | None,
    checks: tuple[str, ...],
    skip: tuple[str, ...],
    allow_globals: tuple[str, ...],
    trust: bool,
    show_config: bool,
    print_safe_globals: bool,
    no_config: bool,
    jobs: int,
    quiet: bool,
    verbose: bool,
    fmt: OutputFormat,
) -> int:
    """``ckptctl verify``: see ``HELP``."""
    from ckptctl.ops.config import VerifyConfig, load_verify_config, settings_in_force

    ctx = click.get_current_context()
    if fmt is OutputFormat.SARIF and (show_config or print_safe_globals):
        flag = "--show-config" if show_config else "--print-safe-globals"
        raise click.UsageError(f"--format sarif reports checks; {flag} prints text or --json")
    if not files and not show_config:
        param = next(p for p in ctx.command.params if p.name == "files")
        raise click.MissingParameter(ctx=ctx, param=param)
    if print_safe_globals:
        from ckptctl.ops.safe_globals import safe_globals_for

        snippet = safe_globals_for(files)
        return emit_verdict(snippet, fmt, 0)
    config = VerifyConfig() if no_config else load_verify_config()
    shown = settings_in_force(config, _given(ctx), os.getcwd())
    if show_config:
        return emit_verdict(shown, fmt, 0)
    values = {s.key: s.value for s in shown.settings}
    what = f"verifying {file_name(files[0])}" if len(files) == 1 else "verifying"
    reads_data = bool(values["no-nan"] or hashes)
    with data_progress(what, fmt, quiet=quiet or not reads_data, thread=False) as bar:
        report = _verify(
            files, values, config.root, expect=expect, optimizer=optimizer, trust=trust,
            jobs=jobs, hashes=hashes, progress=bar,
        )  # fmt: skip
    code = ExitCode.OK if report.ok else ExitCode.CHECK_FAILED
    return emit_verdict(report, fmt, code, quiet=quiet, verbose=verbose)


def _given(ctx: click.Context) -> dict[str, JSONValue]:
    """The settings given as options on the command line (repeatable ones as lists, as the
    configuration file gives them)."""
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, setting in SETTINGS.items()
        if ctx.get_parameter_source(setting.param) is ParameterSource.COMMANDLINE
        for value in (ctx.params[setting.param],)
    }


def _verify(
    files: tuple[str, ...],
    values: dict[str, JSONValue],
    root: str | None,
    *,
    expect: str | None,
    optimizer: str | None,
    trust: bool,
    jobs: int,
    hashes: str | None,
    progress: Progress | None,
) -> VerifyReport:
    """The checks, with the settings in force (``values``: key -> value)."""
    from ckptctl.ops.verify import verify

    allow, key = values["allow-global"], values["state-key"]
    return verify(
        files,
        state_key=key if isinstance(key, str) else None,
        state_key_for=key if isinstance(key, dict) else None,
        no_nan=bool(values["no-nan"]),
        expect=expect,
        min_tensors=values["min-tensors"],
        optimizer=optimizer,
        checks=values["check"],
        skip=values["skip"],
        allow_globals=allow if isinstance(allow, list) else (),
        allow_globals_for=allow if isinstance(allow, dict) else None,
        globs_root=root,
        trust=trust,
        jobs=jobs,
        hashes=hashes,
        progress=progress,
    )
