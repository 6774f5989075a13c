"""Rules files of ``convert``: what ``remap_file`` (``--remap-file``) reads and ``write_rules``
(``--write-rules``) writes.

A rules file is read as UTF-8 whatever the locale; a file that cannot be read, is not UTF-8 or
holds a bad rule is refused with the file named (and the line); only the first ``"  # "``
starts a rule's comment. What ``write_rules`` writes reads back as the same rules: as text
(``#`` comments) and as Rust (``//`` comments, raw strings with enough ``#`` to hold a ``"#``
of the rule), the module types the target's values decided as comments after them; an
inferred rule for a tensor name holding ``=`` escapes it, so it applies and reads back.
Expected values come from the format described in docs/porting.md and man/ckptctl-convert.1, the
Rust reference's raw string literals (``r#"..."#`` ends at the first ``"#``), the OS's own
``strerror`` text and files built in each test.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckptctl import open_checkpoint
from ckptctl.adapters.rename import parse_rules
from ckptctl.errors import ExitCode, OutputError, SelectionError
from ckptctl.ops.convert import ConvertOptions, convert, read_rules_file, write_rules_file
from tests.ops.test_convert import st
from tests.strategies import array_entry

# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "keyword", "fact"),
    [
        (None, "cannot read", os.strerror(errno.ENOENT)),  # in the OS's own words
        (b"^a=b  # caf\xe9\n", "UTF-8", "rules file"),  # Latin-1
    ],
    ids=["missing", "not-utf8"],
)
def test_an_unreadable_rules_file_is_refused_naming_it(tmp_path, content, keyword, fact):
    path = tmp_path / "rules.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SelectionError, match=keyword) as info:
        read_rules_file(str(path))
    assert info.value.path == str(path)
    assert info.value.exit_code == ExitCode.USAGE
    assert fact in info.value.message
    # convert reads it the same way, before it writes anything
    src = st(tmp_path / "s.safetensors", [array_entry("a", np.zeros(1, "<f4"))])
    with pytest.raises(SelectionError, match=keyword):
        convert(src, tmp_path / "o.safetensors", ConvertOptions(remap_file=str(path)))
    assert not (tmp_path / "o.safetensors").exists()


def test_a_bad_rule_is_refused_naming_the_file_and_the_line(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("# header\nno_equals_sign  # why\n", encoding="utf-8")
    with pytest.raises(SelectionError) as info:
        read_rules_file(str(path))
    assert info.value.path == str(path)
    assert info.value.message.startswith("line 2: ")
    assert "'no_equals_sign' has no '='" in info.value.message


def test_only_the_first_two_space_hash_starts_the_comment(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("^a=b  # from loader.rs  # see its test\n", encoding="utf-8")
    assert read_rules_file(str(path)) == [("^a=b", "from loader.rs  # see its test")]


def test_a_rules_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("^straße\\.=street.  # café\n", encoding="utf-8")
    want = [("^straße\\.=street.", "café")]
    # in this process too: mutmut picks the tests to run per function from in-process calls
    assert read_rules_file(str(path)) == want
    # the C locale without UTF-8 mode or coercion: open()'s default encoding is ASCII there
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    probe = "import locale; print(locale.getpreferredencoding(False))"
    ascii_default = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert ascii_default.stdout.strip() == "ANSI_X3.4-1968"
    code = (
        "import sys; from ckptctl.ops.convert import read_rules_file as r; "
        "print(ascii(r(sys.argv[1])))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=root, env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ascii(want) + "\n"


# --- writing ------------------------------------------------------------------------------------

RULES = [("^a\\.(weight)$=b.$1", "why"), ("^c$=d", "given")]
DECIDED = [("^x$=Linear", "value check one"), ("^y$=Other", "value check two")]


def assert_module_types_follow_as_comments(lines: list[str], comment: str) -> None:
    """The decided module types, each as its ``--module-type`` option and its evidence, in
    order, on comment lines after a comment saying what they are."""
    assert all(line.startswith(comment) for line in lines)
    assert len(lines) == 1 + len(DECIDED)  # a line that says what they are, then one each
    for line, (rule, evidence) in zip(lines[1:], DECIDED, strict=True):
        assert f"--module-type '{rule}'" in line
        assert f"({evidence})" in line


def test_write_rules_text_file_is_one_rule_per_line_then_commented_module_types(tmp_path):
    path = tmp_path / "rules.txt"
    write_rules_file(str(path), RULES, force=False, module_types=DECIDED)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    assert lines[1:3] == ["^a\\.(weight)$=b.$1  # why", "^c$=d  # given"]
    assert_module_types_follow_as_comments(lines[3:], "# ")
    assert read_rules_file(str(path)) == RULES  # the module types are comments


def test_write_rules_rust_file_is_a_key_remapper_with_slash_comments(tmp_path):
    path = tmp_path / "rules.rs"
    write_rules_file(str(path), RULES, force=False, module_types=DECIDED)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:6] == [
        "KeyRemapper::from_patterns(vec![",
        "    // why",
        '    (r#"^a\\.(weight)$"#, r#"b.$1"#),',
        "    // given",
        '    (r#"^c$"#, r#"d"#),',
        "])",
    ]
    assert_module_types_follow_as_comments(lines[6:], "// ")


def test_write_rules_refuses_an_existing_file_without_force(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(OutputError, match="exists"):
        write_rules_file(str(path), RULES, force=False)
    assert path.read_text(encoding="utf-8") == "old"
    write_rules_file(str(path), RULES, force=True)
    assert read_rules_file(str(path)) == RULES


def test_rust_raw_strings_take_one_hash_more_than_the_rule_holds_after_a_quote(tmp_path):
    # r#"..."# ends at the first "#, r##"..."## at the first "##: the Rust reference's raw strings
    path = tmp_path / "rules.rs"
    write_rules_file(str(path), [('^a"#b$=c"##d', "why")], force=False)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[2] == '    (r##"^a"#b$"##, r###"c"##d"###),'


def rust_literal(code: str) -> tuple[str, str]:
    """The Rust string literal that ``code`` starts with (after spaces, ``(`` and ``,``) and
    the code after it, decoded as the Rust reference defines them: ``r`` + N ``#`` + ``"`` up
    to the first ``"`` followed by N ``#`` (no escapes, N at most 255), or ``"..."`` with
    ``\\\\``, ``\\"`` and ``\\u{HEX}`` escapes."""
    code = code.lstrip(" (,")
    if code.startswith("r"):
        hashes = len(code) - 1 - len(code[1:].lstrip("#"))
        assert 0 < hashes <= 255
        assert code[1 + hashes] == '"'
        end = code.index('"' + "#" * hashes, 2 + hashes)
        return code[2 + hashes : end], code[end + 1 + hashes :]
    assert code.startswith('"')
    out, i = [], 1
    while code[i] != '"':
        if code[i] == "\\" and code[i + 1] == "u":
            close = code.index("}", i)
            out.append(chr(int(code[i + 3 : close], 16)))
            i = close + 1
            continue
        i += code[i] == "\\"  # \\ and \" stand for the character after the backslash
        out.append(code[i])
        i += 1
    return "".join(out), code[i + 1 :]


@pytest.mark.parametrize("run", [7, 254, 255, 300])
def test_rust_strings_hold_any_run_of_hashes_after_a_quote(tmp_path, run):
    # a rule holding '"' and 7 '#' used to end convert with an internal error (StopIteration);
    # past 255 '#' no raw string can hold it, so it is written as an ordinary literal
    pattern, replacement = 'k"' + "#" * run + "\\.\t$", 'x"#'
    path = tmp_path / "rules.rs"
    write_rules_file(str(path), [(f"{pattern}={replacement}", "why")], force=False)
    line = path.read_text(encoding="utf-8").splitlines()[2]
    first, rest = rust_literal(line)
    second, _ = rust_literal(rest)
    assert (first, second) == (pattern, replacement)
    assert line.startswith("    (r" + "#" * (run + 1) + '"' if run < 255 else '    ("')


def test_the_hint_of_a_bad_rule_is_kept_when_it_comes_from_a_file(tmp_path):
    with pytest.raises(SelectionError) as given:
        parse_rules(["no-equals-sign"])  # the same rule given with --remap
    path = tmp_path / "rules.txt"
    path.write_text("no-equals-sign\n", encoding="utf-8")
    with pytest.raises(SelectionError) as read:
        read_rules_file(str(path))
    assert given.value.hint
    assert read.value.hint == given.value.hint


def test_an_inferred_rule_escapes_an_equals_sign_of_the_source_name(tmp_path):
    weights = np.arange(6, dtype="<f4").reshape(2, 3)
    src = st(tmp_path / "s.safetensors", [array_entry("k=v.weight", weights)])
    ref = st(tmp_path / "t.safetensors", [array_entry("layer.weight", np.zeros((2, 3), "<f4"))])
    rules = tmp_path / "rules.txt"
    opts = ConvertOptions(target=str(ref), write_rules=str(rules))
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.ok, report.summary
    with open_checkpoint(tmp_path / "o.safetensors") as out:
        assert list(out) == ["layer.weight"]
    assert [rule for rule, _ in read_rules_file(str(rules))] == ["^k\\=v\\.(weight)$=layer.$1"]
    # read back, without the target, the rule renames the same tensor
    again = convert(src, tmp_path / "b.safetensors", ConvertOptions(remap_file=str(rules)))
    assert again.ok
    with open_checkpoint(tmp_path / "b.safetensors") as out:
        np.testing.assert_array_equal(out["layer.weight"].load(), weights)
