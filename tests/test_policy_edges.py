"""Policy loading at its edges: every limit at exactly its value and one past it, every default the same whether a
policy file or Python code builds the policy, and the branches that decide which settings a deployment is judged
with (issue #36: the mutation run of qcheck/policy.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qcheck import policy as policy_mod
from qcheck.policy import MemorySpec, Policy, PolicyError, QualitySpec, TargetSpec, find_policy, load_policy
from support.gate_helpers import q4_gguf

TARGET = '[[targets]]\nengine = "tinycpp"\ngpu = ["cpu"]\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository (``.git``) with one GGUF model and one compose file."""
    (tmp_path / ".git").mkdir()
    q4_gguf(tmp_path / "models" / "q4.gguf")
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "compose.yaml").write_text("services: {}\n")
    return tmp_path


def _load(repo: Path, text: str) -> Policy:
    path = repo / "qcheck.toml"
    path.write_text(text)
    return load_policy(path, validate=False)


def _error(repo: Path, text: str) -> str:
    with pytest.raises(PolicyError) as exc:
        _load(repo, text)
    return str(exc.value)


# ------------------------------------------------------------------------------------------ one answer for defaults
def test_a_policy_built_in_python_has_the_defaults_of_a_policy_file(repo: Path) -> None:
    """The Python API (``Policy``, ``TargetSpec``, ``MemorySpec``, ``QualitySpec``) and a file that sets nothing
    give the same policy: the same strictness, LFS mode, batch, enforcement and quality settings."""
    loaded = _load(repo, 'models = ["models/q4.gguf"]\n' + TARGET + "[memory]\n"
                   '[quality]\nreference = "models"\ntier = "good"\n')
    built = Policy(file=loaded.file, models=loaded.models, targets=[TargetSpec(engines=["tinycpp"], gpus=["cpu"],
                                                                               key="targets[0]")],
                   memory=MemorySpec(), base_dir=loaded.base_dir,
                   quality=QualitySpec(reference=loaded.quality.reference, tasks=[],
                                       thresholds=loaded.quality.thresholds))
    assert built.to_json() == loaded.to_json()
    assert (loaded.allow_outside, loaded.allow_nothing_judged) == (built.allow_outside, built.allow_nothing_judged)
    assert (built.require_native, built.allow_unknown, built.require_kv_scales, built.kernels_only,
            built.allow_outside, built.allow_nothing_judged, built.lfs_pointers) == (
        False, False, False, False, False, False, "error")
    target = built.targets[0]
    assert (target.require_native, target.allow_unknown, target.require_kv_scales, target.kernels_only,
            target.models) == (False, False, False, False, None)
    assert (built.memory.batch, built.memory.enforce, built.memory.context) == (1, True, None)
    q = built.quality
    assert (q.backend, q.max_length, q.stride, q.windows, q.reference_dtype, q.device, q.simulate_engine,
            q.kv_split) == ("simulated", 512, None, "sliding", "float32", "cpu", "auto", True)
    assert built.asked(target) == loaded.asked(loaded.targets[0])


def test_top_level_strictness_is_every_targets_default_and_a_target_overrides_it(repo: Path) -> None:
    keys = ("require-native", "allow-unknown", "require-kv-scales", "kernels-only")
    loaded = _load(repo, "".join(f"{k} = true\n" for k in keys) + 'allow-nothing-judged = true\n'
                   'models = ["models/q4.gguf"]\n' + TARGET + TARGET + "".join(f"{k} = false\n" for k in keys))
    assert (loaded.require_native, loaded.allow_unknown, loaded.require_kv_scales, loaded.kernels_only,
            loaded.allow_nothing_judged) == (True, True, True, True, True)
    first, second = loaded.targets
    assert (first.require_native, first.allow_unknown, first.require_kv_scales, first.kernels_only) == (
        True, True, True, True)
    assert (second.require_native, second.allow_unknown, second.require_kv_scales, second.kernels_only) == (
        False, False, False, False)


# ------------------------------------------------------------------------------------------ what is asked
def test_what_a_deployment_and_a_target_are_asked_with_and_without_memory(repo: Path) -> None:
    """Deployments: the top-level strictness, the ``[memory]`` batch (1 without one), settings always named (the
    manifest's command line is the deployment). Targets: the ``[memory]`` settings, named only when there is one."""
    plain = _load(repo, 'models = ["models/q4.gguf"]\n' + TARGET)
    (target,) = plain.targets
    deployment, judged = plain.asked(), plain.asked(target)
    assert (deployment.deploy.batch, deployment.settings_named, deployment.kernels_only) == (1, True, False)
    assert (judged.settings_named, judged.kernels_only, judged.deploy.context, judged.deploy.batch) == (
        False, False, None, 1)
    assert (judged.engines, judged.gpus) == (("tinycpp",), ("cpu",))
    with_memory = _load(repo, 'models = ["models/q4.gguf"]\n' + TARGET + "[memory]\ncontext = 4096\nbatch = 3\n")
    (target,) = with_memory.targets
    assert (with_memory.asked().deploy.batch, with_memory.asked().kernels_only) == (3, False)
    judged = with_memory.asked(target)
    assert (judged.settings_named, judged.deploy.context, judged.deploy.batch, judged.kernels_only) == (
        True, 4096, 3, False)


@pytest.mark.parametrize("enforce", [True, False])
@pytest.mark.parametrize("top, per_target", [(False, False), (True, False), (False, True), (True, True)])
def test_kernels_only_is_the_strictness_or_an_unenforced_memory_table(repo: Path, enforce, top, per_target) -> None:
    """A target's own kernels-only (which overrides the top level's) or ``enforce = false``; deployments take the
    top level's."""
    text = (f"kernels-only = {str(top).lower()}\n" 'models = ["models/q4.gguf"]\n' + TARGET
            + f"kernels-only = {str(per_target).lower()}\n" + f"[memory]\nenforce = {str(enforce).lower()}\n")
    loaded = _load(repo, text)
    assert loaded.asked(loaded.targets[0]).kernels_only is (per_target or not enforce)
    assert loaded.asked().kernels_only is (top or not enforce)


# ------------------------------------------------------------------------------------------ the report
def test_the_report_lists_deployments_only_when_there_are_some_and_quality_as_json(repo: Path) -> None:
    plain = _load(repo, 'models = ["models/q4.gguf"]\n' + TARGET)
    assert "deployments" not in plain.to_json()
    both = _load(repo, 'models = ["models/q4.gguf"]\ndeployments = ["deploy/compose.yaml"]\n' + TARGET
                 + '[quality]\nreference = "models"\nmax-kld = 0.05\nkv-cache-dtype = "q8_0"\n')
    data = both.to_json()
    assert [d["shown"] for d in data["deployments"]] == ["deploy/compose.yaml"]
    quality = data["quality"]
    assert quality["thresholds"] == both.quality.thresholds.to_json()
    assert quality["kv_cache"] == both.quality.kv_cache.to_json()
    assert quality["max_length"] == 512 and quality["reference"] == str(repo / "models")


# ------------------------------------------------------------------------------------------ finding the policy
def test_a_pyproject_without_tool_qcheck_is_no_policy(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.black]\nline-length = 100\n')
    assert find_policy(repo) is None
    with pytest.raises(PolicyError) as exc:
        load_policy(repo / "pyproject.toml", validate=False)
    assert str(exc.value) == f"{repo / 'pyproject.toml'}: [tool.qcheck]: missing: this pyproject.toml has no qcheck policy"
    (repo / "pyproject.toml").write_text('[tool.qcheck]\nmodels = ["models/q4.gguf"]\n' + TARGET.replace(
        "[[targets]]", "[[tool.qcheck.targets]]"))
    assert find_policy(repo) == repo / "pyproject.toml"
    assert [m.name for m in load_policy(repo / "pyproject.toml", validate=False).models] == ["models/q4.gguf"]


def test_a_policy_file_of_exactly_the_size_limit_is_read_one_byte_more_is_not(repo: Path) -> None:
    head = 'models = ["models/q4.gguf"]\n' + TARGET + "#"
    text = head + "x" * (policy_mod.MAX_POLICY_BYTES - len(head) - 1) + "\n"
    assert len(text.encode()) == policy_mod.MAX_POLICY_BYTES == 4 * 1024 * 1024
    assert [m.name for m in _load(repo, text).models] == ["models/q4.gguf"]
    message = _error(repo, text + "\n")
    assert message.endswith(f"qcheck.toml: {4 * 1024 * 1024 + 1} bytes is too large for a policy file "
                            f"(at most {4 * 1024 * 1024})")


# ------------------------------------------------------------------------------------------ deployments
def test_deployments_at_exactly_their_limit_and_one_past_it(repo: Path) -> None:
    assert policy_mod.MAX_DEPLOYMENTS == 1_000
    many = ", ".join(['"deploy/compose.yaml"'] * 1_000)
    assert len(_load(repo, f"deployments = [{many}]\n").deployments) == 1_000
    assert _error(repo, f'deployments = [{many}, "deploy/compose.yaml"]\n').endswith(
        "qcheck.toml: deployments: 1001 entries; at most 1000")


def test_deployments_with_models_need_targets_and_keep_memory_to_the_load(repo: Path) -> None:
    both = _load(repo, 'deployments = ["deploy/compose.yaml"]\nmodels = ["models/q4.gguf"]\n' + TARGET)
    assert ([m.name for m in both.models], len(both.targets), len(both.deployments)) == (["models/q4.gguf"], 1, 1)
    assert "targets: missing: list where the models must run" in _error(
        repo, 'deployments = ["deploy/compose.yaml"]\nmodels = ["models/q4.gguf"]\n')
    assert "models: missing: list the models to gate" in _error(
        repo, 'deployments = ["deploy/compose.yaml"]\n' + TARGET)
    message = _error(repo, 'deployments = ["deploy/compose.yaml"]\nmodels = ["models/q4.gguf"]\n' + TARGET
                     + "[memory]\ncontext = 8192\n")
    assert "memory.context: cannot apply to the policy's deployments" in message
    kept = _load(repo, 'deployments = ["deploy/compose.yaml"]\nmodels = ["models/q4.gguf"]\n' + TARGET
                 + "[memory]\nbatch = 2\nenforce = false\n")
    assert (kept.memory.batch, kept.memory.enforce) == (2, False)


# ------------------------------------------------------------------------------------------ misplaced keys
def test_a_top_level_key_under_a_target_is_named_as_misplaced_and_a_target_must_be_a_table(repo: Path) -> None:
    message = _error(repo, 'models = ["models/q4.gguf"]\n' + TARGET + 'lfs-pointers = "skip"\n')
    assert "targets[0].lfs-pointers: unknown key here; it is a top-level key" in message
    # a list of words is not a table, even when one word is a top-level key's name
    message = _error(repo, 'models = ["models/q4.gguf"]\ntargets = [["memory"]]\n')
    assert "targets[0]" in message and "must be a table" in message and "top-level key" not in message


# ------------------------------------------------------------------------------------------ bounded walks
def _files(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.close(os.open(directory / f"m{i:06d}.gguf", os.O_CREAT | os.O_WRONLY, 0o644))


def test_a_glob_of_exactly_max_models_matches_is_taken_one_more_is_refused(repo: Path) -> None:
    assert policy_mod.MAX_MODELS == 10_000
    _files(repo / "many", 10_000)
    c = policy_mod._Checker("qcheck.toml")
    found = policy_mod.bounded_glob(c, "models[0]", "many/*.gguf", repo)
    assert len(found) == 10_000 and found[0] == ("many/m000000.gguf", str(repo / "many" / "m000000.gguf"))
    _files(repo / "many", 10_001)
    with pytest.raises(PolicyError) as exc:
        policy_mod.bounded_glob(c, "models[0]", "many/*.gguf", repo)
    assert str(exc.value) == "qcheck.toml: models[0]: the glob 'many/*.gguf' matches more than 10000 models"


def test_a_glob_visiting_exactly_max_glob_entries_is_walked_one_more_is_refused(repo: Path, monkeypatch) -> None:
    assert policy_mod.MAX_GLOB_ENTRIES == 200_000
    monkeypatch.setattr(policy_mod, "MAX_GLOB_ENTRIES", 6)
    _files(repo / "walk" / "a", 2)  # the walk visits: a, b, a/2 files, b/2 files = 6 entries
    _files(repo / "walk" / "b", 2)
    c = policy_mod._Checker("qcheck.toml")
    assert len(policy_mod.bounded_glob(c, "models[0]", "walk/**/*.gguf", repo)) == 4
    (repo / "walk" / "b" / "extra.txt").write_text("")
    with pytest.raises(PolicyError, match="visits more than 6 files and directories"):
        policy_mod.bounded_glob(c, "models[0]", "walk/**/*.gguf", repo)


def test_a_model_directory_of_exactly_max_dir_entries_is_checked_one_more_is_refused(repo: Path,
                                                                                     monkeypatch) -> None:
    assert policy_mod.MAX_DIR_ENTRIES == 100_000
    monkeypatch.setattr(policy_mod, "MAX_DIR_ENTRIES", 3)
    model = repo / "models" / "dir"
    _files(model, 2)
    (model / "sub").mkdir()  # a, b and sub: 3 entries
    confine = policy_mod.Confinement(repo)
    assert confine.problem("models/dir", model) is None
    (model / "sub" / "c").write_text("")
    assert confine.problem("models/dir", model) == "'models/dir' holds more than 3 entries: not a model directory"
    assert confine.problem("models/dir", model, walk=False) is None


def test_only_a_symlink_that_leaves_the_repository_is_refused(repo: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    model = repo / "models" / "linked"
    model.mkdir()
    (model / "inside").symlink_to(repo / "models" / "q4.gguf")  # a symlink within the repository: fine
    (model / "plain.json").write_text("{}")
    confine = policy_mod.Confinement(repo)
    assert confine.problem("models/linked", model) is None
    (model / "z-out").symlink_to(outside)
    assert confine.problem("models/linked", model) == (
        f"'models/linked': 'z-out' is a symlink out of the policy's repository ({repo}); pass --allow-outside "
        "to follow it")
    assert policy_mod.Confinement(repo, allow_outside=True).problem("models/linked", model) is None


# ------------------------------------------------------------------------------------------ glob matching
@pytest.mark.parametrize("parts, pats, want", [
    ([], [], True), (["a"], [], False), ([], ["*"], False),
    (["m.gguf"], ["*.gguf"], True), ([".m.gguf"], ["*.gguf"], False), ([".m.gguf"], [".*.gguf"], True),
    (["a", "m.gguf"], ["**", "*.gguf"], True), (["m.gguf"], ["**", "*.gguf"], True),
    (["a", "b", "m.gguf"], ["**", "*.gguf"], True), ([".git", "m.gguf"], ["**", "*.gguf"], False),
    (["a", ".h", "m.gguf"], ["**", "*.gguf"], False), (["a"], ["**"], True), ([], ["**"], True),
    (["a", "m.gguf"], ["a", "*.gguf"], True), (["b", "m.gguf"], ["a", "*.gguf"], False),
    (["a", "m.gguf", "x"], ["a", "*.gguf"], False)])
def test_glob_components_match_like_a_shell_with_double_star(parts, pats, want) -> None:
    assert policy_mod._match_parts(parts, pats) is want


@pytest.mark.parametrize("parts, pats, want", [
    (["a"], ["a", "*.gguf"], True), (["b"], ["a", "*.gguf"], False), (["a", "b"], ["a", "*.gguf"], False),
    (["a"], ["**", "*.gguf"], True), (["a", "b", "c"], ["a", "**"], True), ([".h"], ["*", "*.gguf"], False),
    ([".h"], [".*", "*.gguf"], True), (["a"], ["a"], False), ([], ["a"], True), (["a", "b"], ["*", "*"], False),
    (["a", "b"], ["a"], False), (["a", "b", "c"], ["*", "*.gguf"], False)])
def test_a_directory_is_entered_only_if_it_can_hold_a_match(parts, pats, want) -> None:
    assert policy_mod._could_descend(parts, pats) is want



# ------------------------------------------------------------------------------------------ deployment entries
def test_deployment_entries_resolve_their_model_paths_and_refuse_bad_tables(repo: Path) -> None:
    loaded = _load(repo, 'deployments = [{file = "deploy/compose.yaml", gpu = "h100", model = "models/q4.gguf", '
                   'models = {"/models/q4.gguf" = "models/q4.gguf", "/models/hub" = "org/name"}}, '
                   '{file = "deploy/compose.yaml", model = "org/other"}]\n')
    first, second = loaded.deployments
    local = str(repo / "models" / "q4.gguf")
    assert (first.file, first.shown, first.gpu, first.key) == (
        str(repo / "deploy" / "compose.yaml"), "deploy/compose.yaml", "h100", "deployments[0]")
    assert first.models == {"/models/q4.gguf": local, "/models/hub": "org/name"}  # a Hub id stays as written
    assert (first.model, second.model, second.models, second.gpu) == (local, "org/other", {}, None)
    assert _error(repo, 'deployments = [{gpu = "h100"}]\n').endswith("deployments[0].file: missing")
    for models in ('["models/q4.gguf"]', '{"/models/m" = ""}', '{"/models/m" = 3}'):
        assert _error(repo, f'deployments = [{{file = "deploy/compose.yaml", models = {models}}}]\n').endswith(
            "deployments[0].models: must be a table of container path = model path or Hub id")


def test_a_deployments_only_policy_refuses_a_quality_table_and_says_why(repo: Path) -> None:
    head = 'deployments = ["deploy/compose.yaml"]\n[quality]\ntier = "good"\n'
    assert _error(repo, head + 'reference = "no/such/dir/here"\n').endswith(
        "quality.reference: 'no/such/dir/here': no such directory, and not a Hub repo id")
    for reference in ("models", "org/name"):  # a directory, a Hub id: the reference is fine, the table is not
        assert _error(repo, head + f'reference = "{reference}"\n').endswith(
            "quality: a quality gate evaluates the policy's models, and this policy lists none (only deployments): "
            "add models = [...] and [[targets]], or remove [quality]")


def test_parse_policy_confines_paths_unless_asked_not_to(repo: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("elsewhere")
    q4_gguf(outside / "m.gguf")
    data = {"models": [str(outside / "m.gguf")], "targets": [{"engine": "tinycpp", "gpu": ["cpu"]}]}
    with pytest.raises(PolicyError, match="is outside the policy's repository"):
        policy_mod.parse_policy(data, "qcheck.toml", repo)
    allowed = policy_mod.parse_policy(data, "qcheck.toml", repo, allow_outside=True)
    assert ([m.path for m in allowed.models], allowed.allow_outside) == ([str(outside / "m.gguf")], True)
    assert policy_mod.parse_policy({**data, "models": ["models/q4.gguf"]}, "qcheck.toml", repo).allow_outside is False


def test_a_target_applies_when_any_of_its_patterns_matches_the_name_or_the_path(repo: Path) -> None:
    model = policy_mod.ModelSpec(name="models/q4.gguf", path=str(repo / "models" / "q4.gguf"))
    assert TargetSpec([], [], models=["*.gguf", "nothing*"]).applies_to(model)
    assert TargetSpec([], [], models=["nothing*", str(repo / "models" / "*")]).applies_to(model)  # by its path
    assert not TargetSpec([], [], models=["nothing*", "*.safetensors"]).applies_to(model)
    assert TargetSpec([], []).applies_to(model)


def test_a_directory_the_glob_cannot_list_is_skipped_not_the_end_of_the_walk(repo: Path, monkeypatch) -> None:
    """As root every directory can be listed, so the unreadable one is injected: the walk goes on past it."""
    _files(repo / "walk" / "a", 1)
    _files(repo / "walk" / "b", 1)
    _files(repo / "walk" / "c", 1)
    real = os.scandir

    def scandir(path):
        if Path(path).name == "b":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(policy_mod.os, "scandir", scandir)
    c = policy_mod._Checker("qcheck.toml")
    assert [name for name, _ in policy_mod.bounded_glob(c, "models[0]", "walk/*/*.gguf", repo)] == [
        "walk/a/m000000.gguf", "walk/c/m000000.gguf"]


# ------------------------------------------------------------------------------------------ model entries
def test_model_entries_names_globs_and_home_paths(repo: Path) -> None:
    _files(repo / "two", 2)
    assert _error(repo, 'models = [{name = "x"}]\n' + TARGET).endswith("models[0].path: missing")
    assert _error(repo, 'models = [{path = "two/*.gguf", name = "pair"}]\n' + TARGET).endswith(
        "models[0].name: a name needs a single model, but 'two/*.gguf' matches 2")
    one = _load(repo, 'models = [{path = "two/*0.gguf", name = "first"}]\n' + TARGET)
    assert [(m.name, m.path) for m in one.models] == [("first", str(repo / "two" / "m000000.gguf"))]
    both = _load(repo, 'models = ["two/*.gguf"]\n' + TARGET)
    assert [m.name for m in both.models] == ["two/m000000.gguf", "two/m000001.gguf"]
    assert _error(repo, 'models = ["~/m.gguf"]\n' + TARGET).endswith(
        "models[0]: '~/m.gguf': a home-directory path is outside the policy's repository; pass --allow-outside to "
        "use it")


def test_a_dangling_symlink_is_a_local_model_not_a_hub_id(repo: Path, tmp_path_factory) -> None:
    (repo / "models" / "gone.gguf").symlink_to(repo / "models" / "deleted.gguf")
    loaded = _load(repo, 'models = ["models/gone.gguf"]\n' + TARGET)
    (model,) = loaded.models
    assert (model.name, model.path, model.hub) == ("models/gone.gguf", str(repo / "models" / "gone.gguf"), False)
    (repo / "models" / "away.gguf").symlink_to(tmp_path_factory.mktemp("away") / "x.gguf")
    assert "'models/away.gguf' is outside the policy's repository" in _error(
        repo, 'models = ["models/away.gguf"]\n' + TARGET)


def test_the_model_count_limit_holds_across_entries_at_exactly_its_value(repo: Path, monkeypatch) -> None:
    monkeypatch.setattr(policy_mod, "MAX_MODELS", 3)
    _files(repo / "g", 3)
    assert len(_load(repo, 'models = ["models/q4.gguf", "g/m00000[01].gguf"]\n' + TARGET).models) == 3
    assert _error(repo, 'models = ["models/q4.gguf", "g/*.gguf"]\n' + TARGET).endswith(
        "models[1]: more than 3 models")
    listed = ", ".join(f'"g/m{i:06d}.gguf"' for i in range(3))
    assert len(_load(repo, f"models = [{listed}]\n" + TARGET).models) == 3
    assert _error(repo, f'models = [{listed}, "models/q4.gguf"]\n' + TARGET).endswith("models[3]: more than 3 models")


def test_a_target_needs_an_engine_or_a_gpu_and_either_alone_is_enough(repo: Path) -> None:
    engine_only = _load(repo, 'models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp"\n')
    gpu_only = _load(repo, 'models = ["models/q4.gguf"]\n[[targets]]\ngpu = "cpu"\n')
    assert [(t.engines, t.gpus) for t in engine_only.targets + gpu_only.targets] == [(["tinycpp"], []), ([], ["cpu"])]
    assert _error(repo, 'models = ["models/q4.gguf"]\n[[targets]]\nmodels = ["*"]\n').endswith(
        'targets[0]: needs an engine and/or a gpu (allowed: engine = "vllm==0.11.0", gpu = ["h100", "l4"])')


@pytest.mark.parametrize("key, top", [("tp", 1 << 16), ("pp", 1 << 16), ("ep", 1 << 16), ("batch", 1 << 16),
                                      ("context", 1 << 24)])
def test_memory_integers_at_both_ends_of_their_range(repo: Path, key: str, top: int) -> None:
    head = 'models = ["models/q4.gguf"]\n' + TARGET + "[memory]\n"
    for value in (1, top):
        memory = _load(repo, head + f"{key} = {value}\n").memory
        got = getattr(memory.parallel, key) if key in ("tp", "pp", "ep") else getattr(memory, key)
        assert got == value
    for value in (0, top + 1):
        assert _error(repo, head + f"{key} = {value}\n").endswith(
            f"memory.{key}: must be an integer from 1 to {top}, not {value}")


# ------------------------------------------------------------------------------------------ [quality]
QUALITY = 'models = ["models/q4.gguf"]\n' + TARGET + "[quality]\n"


def test_quality_paths_names_and_ranges(repo: Path) -> None:
    (repo / "tasks.jsonl").write_text('{"prompt": "2+2=", "answer": "4"}\n')
    assert _error(repo, QUALITY + 'tier = "good"\n').endswith("quality.reference: missing")
    loaded = _load(repo, QUALITY + 'reference = "models"\ntier = "good"\ntasks = ["tasks.jsonl", "arithmetic"]\n'
                   'models = ["models/q4.gguf"]\nmax-items = 10000000\n')
    q = loaded.quality
    assert (q.reference, q.tasks, q.models, q.max_items) == (
        str(repo / "models"), [str(repo / "tasks.jsonl"), "arithmetic"], ["models/q4.gguf"], 10_000_000)
    assert _error(repo, QUALITY + 'reference = "models"\ntier = "good"\nmodels = ["other"]\n').endswith(
        "quality.models[0]: 'other' is not one of the policy's models (allowed: models/q4.gguf)")
    for key, low, high in (("max-length", 8, 1_000_000), ("max-items", 1, 10_000_000)):
        head = QUALITY + f'reference = "models"\ntier = "good"\n{key} = '
        for value in (low, high):
            spec = _load(repo, head + f"{value}\n").quality
            assert getattr(spec, key.replace("-", "_")) == value
        for value in (low - 1, high + 1):
            assert _error(repo, head + f"{value}\n").endswith(
                f"quality.{key}: must be an integer from {low} to {high}, not {value}")


def test_quality_backends_are_the_registered_path_backends(repo: Path) -> None:
    assert policy_mod.quality_backends() == ("simulated", "llamacpp")  # "endpoint" takes a URL, not a model path
    head = QUALITY + 'reference = "models"\ntier = "good"\nbackend = '
    assert _load(repo, head + '"llamacpp"\n').quality.backend == "llamacpp"
    assert "quality.backend: 'endpoint' is not allowed (allowed: simulated, llamacpp)" in _error(
        repo, head + '"endpoint"\n')


def test_quality_inputs_are_checked_before_any_model_is_judged(repo: Path) -> None:
    """``check_quality_inputs``: the reference exists or is a Hub id, no evaluated model is a Hub repo, the tasks
    load; a policy without [quality] has nothing to check."""
    check = policy_mod.check_quality_inputs
    check(_load(repo, 'models = ["models/q4.gguf"]\n' + TARGET))
    hub = 'models = ["models/q4.gguf", "org/name"]\n' + TARGET + "[quality]\n"
    check(_load(repo, hub + 'reference = "models"\ntier = "good"\ntasks = ["arithmetic"]\n'))  # Hub models skipped
    check(_load(repo, hub + 'reference = "org/reference"\ntier = "good"\n'))  # a Hub reference is fine
    gone = _load(repo, hub + 'reference = "no/such/dir"\ntier = "good"\n')  # read at load, checked here
    with pytest.raises(PolicyError) as exc:
        check(gone)
    assert str(exc.value).endswith("quality.reference: 'no/such/dir': no such directory, and not a Hub repo id")
    named = _load(repo, hub + 'reference = "models"\ntier = "good"\nmodels = ["org/name"]\n')
    with pytest.raises(PolicyError) as exc:
        check(named)
    assert str(exc.value).endswith("quality.models: org/name is a Hub repo; the quality gate needs local model files")
    bad_tasks = _load(repo, hub + 'reference = "models"\ntier = "good"\ntasks = ["nosuchtask"]\n')
    with pytest.raises(PolicyError) as exc:
        check(bad_tasks)
    assert "quality.tasks: --tasks nosuchtask: no such file, and not a bundled set" in str(exc.value)


def test_the_cache_directory_is_confined_but_not_walked_as_a_model_directory(repo: Path, monkeypatch,
                                                                             tmp_path_factory) -> None:
    monkeypatch.setattr(policy_mod, "MAX_DIR_ENTRIES", 1)
    _files(repo / ".cache" / "qcheck", 2)  # a cache grows past any model directory's size: never walked
    head = QUALITY + 'reference = "models"\ntier = "good"\ncache-dir = '
    assert _load(repo, head + '".cache/qcheck"\n').quality.cache_dir == str(repo / ".cache" / "qcheck")
    outside = tmp_path_factory.mktemp("cache-out")
    assert f"quality.cache-dir: '{outside}' is outside the policy's repository" in _error(repo, head + f'"{outside}"\n')


# ------------------------------------------------------------------------------------------ --init
def test_discover_models_two_levels_deep_one_entry_per_model_directory(tmp_path: Path) -> None:
    for rel in ("a.gguf", "b.safetensors", "notes.txt", "x/c.gguf", "x/y/two.gguf", "x/y/z/too-deep.gguf", "big-00001-of-00002.gguf",
                "big-00002-of-00002.gguf", ".hidden/h.gguf", "node_modules/n.gguf", "venv/v.gguf",
                "model/config.json", "model/model.safetensors", "model/sub/inner.gguf", "cfg/config.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert policy_mod.discover_models(tmp_path) == [
        "a.gguf", "b.safetensors", "big-00001-of-00002.gguf", "model", "x/c.gguf", "x/y/two.gguf"]
    root_model = tmp_path / "root"
    for rel in ("config.json", "model-00001-of-00002.safetensors", "extra/e.gguf"):
        (root_model / rel).parent.mkdir(parents=True, exist_ok=True)
        (root_model / rel).write_bytes(b"")
    assert policy_mod.discover_models(root_model) == ["."]  # the directory itself is the model


@pytest.mark.parametrize("sizes, listed", [((100, 100, 1), 201), ((100, 101, 1), 201), ((150, 150, 150), 300)])
def test_discover_models_stops_after_the_directory_that_passes_two_hundred(tmp_path: Path, sizes, listed) -> None:
    """At exactly 200 models the walk goes on; the directory that takes it past 200 is the last one listed."""
    for name, size in zip("abc", sizes, strict=True):
        _files(tmp_path / name, size)
    found = policy_mod.discover_models(tmp_path)
    assert len(found) == listed and found[0] == "a/m000000.gguf"


@pytest.mark.parametrize("files, targets, target_models", [
    ([], [("llama.cpp", '["cpu", "rtx-4090"]')], []),
    (["m.gguf"], [("llama.cpp", '["cpu", "rtx-4090"]')], []),
    (["m.safetensors"], [("vllm", '["h100"]')], []),
    (["m.gguf", "d/config.json", "d/w.safetensors"], [("llama.cpp", '["cpu", "rtx-4090"]'), ("vllm", '["h100"]')],
     ['models = ["*.gguf"]', 'models = ["d"]'])])
def test_the_starter_policy_has_a_target_per_kind_of_model_found(tmp_path: Path, files, targets,
                                                                 target_models) -> None:
    from qcheck.toml_compat import tomllib

    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    text = policy_mod.starter_policy(tmp_path)
    data = tomllib.loads(text)
    found = policy_mod.discover_models(tmp_path)
    assert data["models"] == (found or ["models/*.gguf"])
    assert [(t["engine"], str(t["gpu"]).replace("'", '"')) for t in data["targets"]] == targets
    assert [f'models = ["{t["models"][0]}"]' for t in data["targets"] if "models" in t] == target_models
    assert ("No model files were found here" in text) is (not files)


@pytest.mark.parametrize("text, toml", [
    ("plain/path.gguf", '"plain/path.gguf"'), ('q"uote', '"q\\"uote"'), ("back\\slash", '"back\\\\slash"'),
    ("\x00\x1f", '"\\u0000\\u001f"'), (" ~\x7f\x80é", '" ~\\u007f\x80é"')])
def test_toml_strings_escape_quotes_backslashes_and_control_characters(text: str, toml: str) -> None:
    from qcheck.toml_compat import tomllib

    assert policy_mod._toml_str(text) == toml
    assert tomllib.loads(f"v = {toml}")["v"] == text


def test_targets_must_be_a_non_empty_array_of_tables(repo: Path) -> None:
    for targets in ("[]", '"vllm"'):
        assert _error(repo, f'models = ["models/q4.gguf"]\ntargets = {targets}\n').endswith(
            'targets: must be a non-empty array of tables ([[targets]] with engine and gpu) (allowed: [[targets]] '
            'engine = "vllm", gpu = ["h100"])')


def test_a_task_file_outside_the_repository_is_refused(repo: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("tasks") / "t.jsonl"
    outside.write_text('{"prompt": "2+2=", "answer": "4"}\n')
    (repo / "linked.jsonl").symlink_to(outside)
    for written in (str(outside), "linked.jsonl"):
        assert f"quality.tasks[0]: '{written}' is outside the policy's repository" in _error(
            repo, QUALITY + f'reference = "models"\ntier = "good"\ntasks = ["{written}"]\n')
