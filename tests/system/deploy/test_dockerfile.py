"""The Dockerfile, read as Docker reads its instructions (no Docker here to build it): a pinned base of the
project's Python, the project installed under requirements.lock from files the build context has, a user
that is not root, and commands that are this package's entry points."""

import fnmatch
import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[3]
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR",
    "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined; an unknown instruction raises."""
    out = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, arguments = line.strip().partition(" ")
        if word.upper() not in INSTRUCTIONS:
            raise ValueError(f"unknown Dockerfile instruction {word!r}")
        out.append((word.upper(), arguments.strip()))
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps ``path`` (relative to the context) out of the build."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatch(part, bare) for part in parts)
        ):
            return True
    return False


@pytest.fixture
def dockerfile() -> list[tuple[str, str]]:
    return instructions((ROOT / "Dockerfile").read_text())


@pytest.fixture
def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_base_is_a_pinned_slim_image_of_the_projects_python(dockerfile):
    (base,) = [arguments for word, arguments in dockerfile if word == "FROM"]
    match = re.fullmatch(r"python:(3\.\d+)\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base)
    assert match, f"{base}: not a pinned python:X.Y.Z-slim image"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f">={match[1]}" in requires


def test_the_project_is_installed_under_the_lock_from_files_the_context_has(dockerfile, dockerignore):
    copied = [src for word, args in dockerfile if word == "COPY" for src in args.split()[:-1]]
    (install,) = [args for word, args in dockerfile if word == "RUN" and "pip install" in args]
    # editable, in place: the code location finds its defs folder by the pyproject.toml above the package;
    # with Ray's dashboard agent, which KubeRay's probes ask when the image runs a Ray node
    assert "pip install -c requirements.lock -e '.[cluster]'" in install
    assert "requirements.lock" in copied and "pyproject.toml" in copied
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in copied  # setuptools reads it to build the package
    for source in copied:
        assert (ROOT / source).exists() and not ignored(source, dockerignore), source
    package_files = [
        p.relative_to(ROOT).as_posix() for p in (ROOT / "marin_pipelines").rglob("*") if p.is_file()
    ]
    shipped = [f for f in package_files if not ignored(f, dockerignore)]
    assert "marin_pipelines/evals/tasks/mc.jsonl" in shipped  # package data reaches the image
    assert not [f for f in shipped if "__pycache__" in f]


def test_environments_outputs_and_tests_stay_out_of_the_build(dockerignore):
    for path in [".venv/bin/python", ".marin/store/x", "tests/conftest.py", ".git/HEAD", "wandb/run/x"]:
        assert ignored(path, dockerignore), path


def test_it_runs_as_a_user_with_the_charts_dagster_home(dockerfile):
    users = [args for word, args in dockerfile if word == "USER"]
    assert users and users[-1] not in {"root", "0"}
    assert any(word == "RUN" and "useradd" in args and users[-1] in args for word, args in dockerfile)
    env = " ".join(args for word, args in dockerfile if word == "ENV")
    assert "DAGSTER_HOME=/opt/dagster/dagster_home" in env  # where the chart mounts the instance config


def test_the_default_command_serves_the_module_the_helm_values_name(dockerfile):
    (cmd,) = [json.loads(args) for word, args in dockerfile if word == "CMD"]  # exec form
    assert cmd[:3] == ["dagster", "code-server", "start"]
    module, name = cmd[cmd.index("-m") + 1], cmd[cmd.index("--location-name") + 1]
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", module, "--location-name", name]
    dg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["dg"]["project"]
    assert name == dg["code_location_name"]  # else every load of the location warns that they differ
    assert str(deployment["port"]) == cmd[cmd.index("-p") + 1]
    assert importlib.util.find_spec(module) is not None
    # no ENTRYPOINT: a pod's command (python -m marin_pipelines.cli train ...) replaces the default whole
    assert not [word for word, _ in dockerfile if word == "ENTRYPOINT"]
    assert importlib.util.find_spec("marin_pipelines.cli.__main__") is not None


def test_a_misspelt_instruction_is_refused():
    text = (ROOT / "Dockerfile").read_text().replace("\nWORKDIR ", "\nWORKDIRR ", 1)
    with pytest.raises(ValueError, match="WORKDIRR"):
        instructions(text)
