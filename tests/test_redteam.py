"""The red team's findings (issue #17) as regression tests: output injection, decoys beside pickles, reads
outside the policy's repository, writing over special files, and the file modes of written reports.

Each test builds the hostile input the finding describes and asserts the specific result: what a CI log,
a terminal or a PR comment receives, which file the gate reads, what a written report looks like on disk.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import threading
from pathlib import Path

import pytest

from qcheck.cli import main
from qcheck.errors import UsageError
from qcheck.report import write_output
from qcheck.report.sanitize import guard, json_text, sanitized, visible
from support import builders
from support.gate_helpers import TEST_MATRIX, q4_gguf

#: what a GitHub Actions runner takes as a workflow command: ``::`` or ``##[`` at the start of a line
WORKFLOW_COMMAND = re.compile(r"^\s*(::|##\[)")
#: our own annotation lines: ``::error file=...,title=...::message``, nothing else may start with ``::``
OUR_ANNOTATION = re.compile(r"^::(error|warning|notice)( file=[^,:]*,)?( ?title=[^:]*)::[^\n]*$")
#: what a terminal or a reader must never receive from a file: C0/C1 controls (ESC starts ANSI/OSC), bidi
#: overrides and isolates, zero-width and other format characters, line/paragraph separators
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2069\ufeff]")

HOSTILE = ("@team $x^2$ https://e.example www.e.example <img src=x> llama\n::error file=.github/workflows/ci.yml,"
           "line=1::pwned\r\n::stop-commands::tok3n\n\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 \x1b[2J"
           "\u202eevil\u2066")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _hostile_dir(root: Path) -> Path:
    """A real safetensors model whose config strings and a tensor name carry every injection at once."""
    fixture = builders.bf16_llama()
    fixture.tensors["x\n::warning::injected\u202e\x1b[31m"] = ("BF16", (4,))
    path = fixture.write(root / "hostile")
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = [HOSTILE]
    config["model_type"] = "llama\n##[error]legacy command"
    (path / "config.json").write_text(json.dumps(config))
    return path


def _assert_inert_lines(text: str, allow_annotations: bool = False) -> None:
    assert not INVISIBLE.search(text), repr(INVISIBLE.search(text))
    for line in text.splitlines():
        if WORKFLOW_COMMAND.match(line):
            assert allow_annotations and OUR_ANNOTATION.match(line), line
            assert "stop-commands" not in line.split("::", 2)[1]


# ----------------------------------------------------------------------------------- 1. output injection
def test_visible_escapes_every_invisible_character() -> None:
    assert visible("a\nb\rc\td\x1b[31m\u202e\u2066\u200b\ufeff\udcff\x85") == \
        "a\\nb\\rc\\td\\x1b[31m\\u202e\\u2066\\u200b\\ufeff\\udcff\\x85"
    assert visible("plain – text, ünïcode, 中文") == "plain – text, ünïcode, 中文"
    assert guard("ok\n  ::error::x\n##[group]y\na::b") == "ok\n  %3A:error::x\n%23#[group]y\na::b"


def test_json_output_keeps_values_and_escapes_invisible_characters() -> None:
    raw = json.dumps({"k": "a\u202eb\U000e0041c\u2028"}, ensure_ascii=False)
    text = json_text(raw)
    assert not INVISIBLE.search(text) and "\U000e0041" not in text
    assert json.loads(text) == {"k": "a\u202eb\U000e0041c\u2028"}


def test_sanitized_copies_results_and_leaves_them_unchanged() -> None:
    from qcheck.model import TensorInfo

    t = TensorInfo(name="a\nb", dtype="F16", shape=(1,), nbytes=2, offset=0, file="m.safetensors")
    clean = sanitized({"tensors": [t], "n": 1})
    assert clean["tensors"][0].name == "a\\nb" and t.name == "a\nb"
    same = {"a": ["b", 1]}
    assert sanitized(same) is same  # nothing to escape: nothing copied


@pytest.mark.parametrize("command", ["inspect", "check"])
def test_text_and_github_output_cannot_inject_workflow_commands(command: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    path = _hostile_dir(tmp_path)
    extra = ["--engine", "fastserve", "--gpu", "a100"] if command == "check" else []
    code, out, err = _run([command, str(path), *extra, "--github"], capsys)
    assert code in (0, 1), err
    assert "pwned" in out or "x\\n::warning" in out  # the hostile strings are shown, escaped, not dropped
    _assert_inert_lines(out, allow_annotations=True)
    _assert_inert_lines(err)


@pytest.mark.parametrize("fmt", ["text", "markdown", "junit", "sarif", "json", "github"])
def test_every_format_is_inert(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    path = _hostile_dir(tmp_path)
    code, out, _ = _run(["check", str(path), "--engine", "fastserve", "--gpu", "a100", "--format", fmt], capsys)
    assert code in (0, 1)
    _assert_inert_lines(out, allow_annotations=fmt == "github")
    if fmt == "markdown":
        # no live mention, link, math or HTML: those tokens are code spans, the rest is escaped
        assert "`@team`" in out and "`https://e.example`" in out and "`www.e.example`" in out
        assert "\\$x^2\\$" in out and "<img" not in out
    if fmt == "json":
        data = json.loads(out)
        assert data["inspection"]["architecture"] == HOSTILE  # the JSON keeps the exact value


def test_error_line_is_one_inert_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x\n::error::pwned\u202e.safetensors"
    bad.write_bytes(b"\x00" * 4)
    code, out, err = _run(["inspect", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("qcheck: error: ")
    _assert_inert_lines(err)


def test_non_utf8_file_name_is_reported_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A file name that is not UTF-8 (a surrogate-escaped str in Python) once crashed the text output after
    JUnit and SARIF had been written saying 0 failures."""
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    raw = os.fsencode(str(tmp_path)) + b"/m\xff\xfe.gguf"
    q4_gguf(Path(os.fsdecode(raw)))
    junit = tmp_path / "r.xml"
    code, out, err = _run(["check", os.fsdecode(raw), "--engine", "tinycpp", "--gpu", "cpu", "--junit", str(junit)],
                          capsys)
    assert code == 0, err
    assert "m\\udcff\\udcfe.gguf" in out
    assert "m\\udcff\\udcfe.gguf" in junit.read_text()


def test_a_terminal_that_cannot_show_a_name_gets_escapes_not_a_crash(tmp_path: Path) -> None:
    """Before, JUnit and SARIF were written saying 0 failures, then printing the text crashed (exit 1)."""
    import subprocess

    model = q4_gguf(tmp_path / "modèle-✓.gguf")
    junit = tmp_path / "r.xml"
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "QCHECK_MATRICES": str(TEST_MATRIX)}
    run = subprocess.run([sys.executable, "-m", "qcheck", "check", str(model), "--engine", "tinycpp", "--gpu", "cpu",
                          "--junit", str(junit)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "mod\\xe8le-\\u2713.gguf" in run.stdout and "modèle-✓.gguf" in junit.read_text(encoding="utf-8")


def test_html_eval_report_is_inert() -> None:
    from qcheck.eval.html import render_html
    from support.eval_report import META, candidate, data

    hostile = candidate("q8\u202e<script>alert(1)</script>\x1b[2J", 3.22e-6)
    page = render_html(data({}, [hostile]), META)
    assert not INVISIBLE.search(page) and "<script>" not in page
    assert "q8\\u202e&lt;script&gt;" in page


def test_hook_lines_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "a\n::error::pwned.safetensors"
    bad.write_bytes(b"\x00" * 4)
    code, out, _ = _run(["hook", str(bad)], capsys)
    assert code == 2
    _assert_inert_lines(out)
    assert "a\\n::error::pwned.safetensors: error:" in out


def test_hook_does_not_read_a_symlink_out_of_the_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "token"
    secret.write_text("hf_SECRETSECRETSECRET")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "model.gguf").symlink_to(secret)
    monkeypatch.chdir(repo)
    code, out, _ = _run(["hook", "model.gguf"], capsys)
    assert code == 2 and "model.gguf: error: a symlink out of the repository; not read" in out
    assert "SECRET" not in out and "68 66" not in out


# ------------------------------------------------------------------- 3. decoy safetensors beside a pickle
def test_decoy_safetensors_beside_the_pickle_transformers_would_load(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fixture = builders.bf16_llama()
    fixture.filename = "weights.safetensors"
    path = fixture.write(tmp_path / "decoy")
    (path / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    code, out, err = _run(["check", str(path), "--engine", "vllm", "--gpu", "h100"], capsys)
    assert code == 2 and out == ""
    assert re.fullmatch(r"qcheck: error: .*decoy: pytorch_model.bin beside safetensors not named model.safetensors: "
                        r"transformers.from_pretrained .* would torch.load the pickle.*\n", err), err


def test_pickle_beside_model_safetensors_is_not_what_transformers_loads(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = builders.bf16_llama().write(tmp_path / "both")  # model.safetensors: transformers prefers it
    (path / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    code, out, err = _run(["inspect", str(path), "--json"], capsys)
    assert code == 0, err
    assert any("pickle files present" in w for w in json.loads(out)["warnings"])


# ----------------------------------------------------------- 4. policy paths inside the repository
def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "ci").mkdir()
    q4_gguf(repo / "models" / "m.gguf")
    return repo


def _policy(repo: Path, models: list[str], extra: str = "") -> Path:
    policy = repo / "ci" / "qcheck.toml"
    policy.write_text(f"models = {json.dumps(models)}\n{extra}\n[[targets]]\nengine = \"tinycpp\"\ngpu = \"cpu\"\n")
    return policy


@pytest.mark.parametrize("entry", ["/etc/passwd", "~/.bashrc", "../../outside.gguf", "../../*.gguf",
                                   "../models/link-out.gguf"])
def test_policy_paths_leaving_the_repository_are_refused(entry: str, tmp_path: Path) -> None:
    from qcheck.policy import load_policy

    repo = _repo(tmp_path)
    q4_gguf(tmp_path / "outside.gguf")
    (repo / "models" / "link-out.gguf").symlink_to(tmp_path / "outside.gguf")
    policy = _policy(repo, [entry])
    with pytest.raises(UsageError, match=r"outside the policy's repository|a symlink out|home-directory"):
        load_policy(policy, validate=False)
    if not entry.startswith("~"):
        assert load_policy(policy, validate=False, allow_outside=True).models  # the flag allows it


def test_symlink_out_inside_a_model_directory_is_refused(tmp_path: Path) -> None:
    from qcheck.policy import load_policy

    repo = _repo(tmp_path)
    secret = tmp_path / "token"
    secret.write_text("hf_SECRET")
    model = builders.bf16_llama().write(repo / "models" / "dir")
    (model / "tokenizer.json").symlink_to(secret)
    with pytest.raises(UsageError, match=r"'tokenizer.json' is a symlink out of the policy's repository"):
        load_policy(_policy(repo, ["../models/dir"]), validate=False)


def test_unknown_file_bytes_never_reach_any_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    repo = _repo(tmp_path)
    (repo / "models" / "notes.bin").write_text("hf_abcdefghijklmnopqrstuvwxyz")
    policy = _policy(repo, ["../models/notes.bin"])
    reports = {f: tmp_path / f"r.{f}" for f in ("junit", "sarif", "markdown")}
    code, out, err = _run(["gate", "--policy", str(policy), *[a for f, p in reports.items()
                                                            for a in (f"--{f}", str(p))]], capsys)
    assert code == 2
    for text in (out, err, *(p.read_text() for p in reports.values())):
        assert "hf_abc" not in text and "68 66 5f" not in text
    assert "it looks like text" in out


def test_glob_does_not_follow_symlink_cycles(tmp_path: Path) -> None:
    from qcheck.policy import load_policy

    repo = _repo(tmp_path)
    (repo / "models" / "a").mkdir()
    (repo / "models" / "a" / "loop").symlink_to(repo / "models")
    (repo / "models" / "up").symlink_to(repo)
    policy = load_policy(_policy(repo, ["../**/*.gguf"]), validate=False)
    assert [m.name for m in policy.models] == ["../models/m.gguf"]


def test_glob_stops_at_the_model_limit_while_expanding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import qcheck.policy as policy_mod

    repo = _repo(tmp_path)
    for i in range(30):
        (repo / "models" / f"x{i}.gguf").write_bytes(b"")
    monkeypatch.setattr(policy_mod, "MAX_MODELS", 5)
    with pytest.raises(UsageError, match=r"matches more than 5 models"):
        policy_mod.load_policy(_policy(repo, ["../models/*.gguf"]), validate=False)
    monkeypatch.setattr(policy_mod, "MAX_GLOB_ENTRIES", 10)
    with pytest.raises(UsageError, match=r"visits more than 10 files"):
        policy_mod.load_policy(_policy(repo, ["../**/none"]), validate=False)


def test_models_are_named_as_the_policy_names_them(tmp_path: Path) -> None:
    """#16: a symlinked model and a ``../`` path keep the policy's spelling, so ``models`` globs match."""
    from qcheck.policy import load_policy

    repo = _repo(tmp_path)
    (repo / "models" / "current.gguf").symlink_to(repo / "models" / "m.gguf")
    policy = _policy(repo, ["../models/current.gguf", "../models/m.gguf"])
    policy.write_text(policy.read_text() + '\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
                      'models = ["../models/current*"]\n')
    loaded = load_policy(policy, validate=False)
    assert [m.name for m in loaded.models] == ["../models/current.gguf", "../models/m.gguf"]
    assert [t.applies_to(loaded.models[0]) for t in loaded.targets] == [True, True]
    assert [t.applies_to(loaded.models[1]) for t in loaded.targets] == [True, False]


# ------------------------------------------------------------------------- 5. writing output files
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_follow_the_umask(umask: int, tmp_path: Path) -> None:
    old = os.umask(umask)
    try:
        write_output(str(tmp_path / "new.xml"), "<x/>")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.xml").stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["new.xml"]  # no temporary file left


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.sarif"
    target.write_text("old")
    target.chmod(0o644)
    old = os.umask(0o077)
    try:
        write_output(str(target), "new")
    finally:
        os.umask(old)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_output(str(link), "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_dev_null_stays_a_device() -> None:
    write_output("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_is_streamed_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_output(str(fifo), "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_stdout_redirected_to_a_file_is_appended_not_replaced(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "out.txt"
    code = "from qcheck.report import write_output; print('main', flush=True); write_output('/dev/stdout', 'junit\\n')"
    with open(out, "w") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True, timeout=60)
    assert out.read_text() == "main\njunit\n" and not out.is_symlink()


def test_a_regular_file_under_dev_shm_is_replaced_atomically() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = f"/dev/shm/qcheck-test-{os.getpid()}.json"
    try:
        with open(path, "w") as fh:
            fh.write("old and longer")
        write_output(path, "new")
        assert Path(path).read_text() == "new"
    finally:
        os.unlink(path)


def test_dash_and_dev_stdout_go_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    write_output("-", "one\n")
    sys.stdout.flush()
    write_output("/dev/stdout", "two\n")
    assert capfd.readouterr().out == "one\ntwo\n"


def test_cli_reports_follow_the_umask(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    model = q4_gguf(tmp_path / "m.gguf")
    old = os.umask(0o022)
    try:
        code, _, err = _run(["check", str(model), "--engine", "tinycpp", "--gpu", "cpu", "-o", str(tmp_path / "o.txt"),
                             "--junit", str(tmp_path / "j.xml"), "--sarif", str(tmp_path / "s.sarif")], capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir() if p.suffix != ".gguf"} == \
        {"o.txt": 0o644, "j.xml": 0o644, "s.sarif": 0o644}
