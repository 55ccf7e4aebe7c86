"""One Hub-target rule in every layer: the strings that three detectors used to classify differently
(``hf.co/org/name``, ``_org/name``, ``http://huggingface.co/a/b``, ``org/na--me``) read the same way in the
parser, the readers, the policy, the report locations and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcheck.cli import main
from qcheck.errors import InputError, UsageError
from qcheck.hub.target import hub_target, looks_like_repo_id, origin_of, parse_target, repo_id_problem
from qcheck.policy import PolicyError, parse_policy
from qcheck.readers import load_checkpoint
from qcheck.readers import looks_like_repo_id as readers_looks_like_repo_id
from qcheck.report.findings import artifact_of, error_finding, eval_findings, findings_of
from support.hubserver import gguf_bytes

#: text -> the repo id it names on the Hub, or None for "a local path (missing here)"
CASES = {
    "hf.co/org/name": "org/name",
    "_org/name": "_org/name",
    "http://huggingface.co/a/b": "a/b",
    "org/na--me": None,
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture
def repos(hub, tmp_path: Path) -> dict[str, str]:
    """Every Hub repo the cases name, each holding one small GGUF: repo id -> commit."""
    data = gguf_bytes(str(tmp_path / "m.gguf"), file_type=7)
    return {repo: hub.add_repo(repo, {"m-Q8_0.gguf": data}) for repo in sorted({r for r in CASES.values() if r})}


@pytest.mark.parametrize(("text", "repo"), CASES.items())
def test_the_parser_and_the_readers_agree(text, repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = hub_target(text)
    assert (target.repo_id if target else None) == repo
    assert looks_like_repo_id(text) is readers_looks_like_repo_id(text) is (repo is not None)
    assert origin_of(text) == ("hub" if repo else "local")
    # a local path of that name wins, in every layer
    (tmp_path / text).mkdir(parents=True)
    assert origin_of(text) == "local"


@pytest.mark.parametrize(("text", "repo", "revision", "selector"), [
    ("https://huggingface.co/org/name/resolve/main/x-Q4_0.gguf?download=true", "org/name", "main", "x-Q4_0.gguf"),
    ("https://www.huggingface.co/org/name#files", "org/name", None, None),
    ("http://hf.co/org/name/tree/refs%2Fpr%2F3", "org/name", "refs/pr/3", None),
    ("huggingface.co/org/name:Q4_K_M", "org/name", None, "Q4_K_M"),
    ("hf://_org/na.me@v1", "_org/na.me", "v1", None),
    ("org/x.gguf@main", "org/x.gguf", "main", None),
])
def test_links_are_normalised(text, repo, revision, selector):
    t = hub_target(text)
    assert t is not None and (t.repo_id, t.revision, t.selector) == (repo, revision, selector)


@pytest.mark.parametrize(("text", "message"), [
    ("https://huggingface.co/datasets/a/b", "is a Hub dataset link; qcheck reads model repos"),
    ("https://huggingface.co/spaces/a/b", "is a Hub space link"),
    ("https://example.com/a/b", "is not a Hub model link"),
    ("ftp://huggingface.co/a/b", "is not a Hub model link"),
    ("https://huggingface.co/a/b/commit/abc", "is not a Hub model link"),
    ("hf.co/org/na--me", "is not a Hub repo id: '--' and '..' are not allowed"),
])
def test_a_link_that_is_not_a_model_repo_is_one_clear_line(text, message):
    with pytest.raises(UsageError, match=message) as exc:
        hub_target(text)
    assert "\n" not in str(exc.value)
    assert not looks_like_repo_id(text)


@pytest.mark.parametrize(("repo_id", "problem"), [
    ("org/name", None), ("_org/name_", None), ("a.b-c_d/E.f", None), ("org/" + "n" * 96, None),
    ("org/" + "n" * 97, "at most 96"), ("org/na--me", "'--'"), ("org/na..me", "'--' and '..'"),
    ("org/name.git", "'.git'"), ("-org/name", "neither part starts or ends"), ("org/name-", "neither part"),
    ("org/caf\u00e9", "letters, digits"), ("a/b/c", "namespace/name"), ("name", "namespace/name"),
])
def test_repo_ids_follow_huggingface_hub_rules(repo_id, problem):
    found = repo_id_problem(repo_id)
    assert (found is None) if problem is None else (problem in str(found))


@pytest.mark.parametrize("text", ["./org/name", "/abs/org/name", "~/org/name", "org\\name", "C:/org/name",
                                  "org/x.gguf", "org/x.safetensors", "name", "org/name.git", ""])
def test_local_looking_paths_are_never_repo_ids(text):
    assert hub_target(text) is None and origin_of(text) == "local"


@pytest.mark.parametrize(("text", "repo"), CASES.items())
def test_the_readers_route_by_the_parser_and_record_the_origin(text, repo, repos, hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if repo is None:
        with pytest.raises(InputError, match=rf"^{text}: no such file or directory \(nor a Hub repo id: '--'"):
            load_checkpoint(text)
        assert hub.requests(r".") == []  # never went to the network
        return
    ckpt = load_checkpoint(text)
    assert ckpt.origin == "hub" and ckpt.revision == repos[repo] and ckpt.path == text
    assert hub.requests(rf"^/api/models/{repo}")
    # a local checkpoint of the same name: read from disk, recorded as local
    local = tmp_path / text
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(gguf_bytes(str(tmp_path / "x.gguf"), file_type=7))
    hub.clear_log()
    ckpt = load_checkpoint(text)
    assert ckpt.origin == "local" and ckpt.revision is None and hub.requests(r".") == []


@pytest.mark.parametrize(("text", "repo"), CASES.items())
def test_the_policy_reads_models_by_the_parser(text, repo, tmp_path):
    if repo is None:
        with pytest.raises(PolicyError, match=r"no such file or directory .*not a Hub repo id"):
            parse_policy({"models": [text], "targets": [{"engine": "vllm", "gpu": "h100"}]}, "qcheck.toml", tmp_path)
        return
    [model] = parse_policy({"models": [text], "targets": [{"engine": "vllm", "gpu": "h100"}]}, "qcheck.toml", tmp_path).models
    assert model.hub and model.path == text


def test_report_locations_read_the_recorded_origin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hub_insp = {"revision": "0" * 40, "files": [{"name": "config.json"}]}
    local_insp = {"revision": None, "files": [{"name": "config.json"}]}
    for text, repo in CASES.items():
        # the inspection says where the model came from: no guessing from the name
        assert artifact_of(hub_insp, text) is None
        assert artifact_of(local_insp, text) == f"{text}/config.json"
        # without an inspection (a model that failed to load): the readers' rule
        assert error_finding(text, "boom").artifact == (None if repo else text)
        candidate = {"name": "c", "path": text, "gate": {"failures": [{"message": "m", "metric": "kl"}]}}
        assert eval_findings({"candidates": [candidate]})[0].artifact == (None if repo else text)
    assert error_finding("https://example.com/a/b", "boom").artifact == "https://example.com/a/b"


@pytest.mark.parametrize(("text", "repo"), CASES.items())
def test_the_cli_reads_each_case_the_same_way(text, repo, repos, hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "inspect", text, "--json")
    if repo is None:
        assert (code, out) == (2, "")
        assert err == f"qcheck: error: {text}: no such file or directory (nor a Hub repo id: '--' and '..' are " \
                      "not allowed in a repo id)\n"
        assert hub.requests(r".") == []
        return
    data = json.loads(out)
    assert code == 0 and data["path"] == text and data["revision"] == repos[repo]
    code, out, _ = run(capsys, "check", text, "-e", "llama.cpp", "-g", "cpu", "--allow-unknown", "--format", "sarif")
    sarif = json.loads(out)
    results = sarif["runs"][0]["results"]
    assert code == 0 and all("physicalLocation" not in loc for r in results for loc in r.get("locations", []))
    code, out, _ = run(capsys, "check", text, "-e", "llama.cpp", "-g", "cpu", "--json")
    assert [f.artifact for f in findings_of(json.loads(out), "check")] == [None] * len(
        findings_of(json.loads(out), "check"))


def test_a_bad_link_through_the_cli_is_one_line(hub, capsys):
    code, out, err = run(capsys, "inspect", "https://huggingface.co/datasets/org/name")
    assert (code, out) == (2, "")
    assert err == ("qcheck: error: 'https://huggingface.co/datasets/org/name' is a Hub dataset link; qcheck reads "
                   "model repos (https://huggingface.co/org/name or org/name[@revision][:file|:QUANT])\n")
    assert hub.requests(r".") == []
    assert parse_target("https://huggingface.co/org/name").repo_id == "org/name"
