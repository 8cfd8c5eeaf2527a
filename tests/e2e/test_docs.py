"""The documentation stays true: the site builds strictly (no broken link, anchor or page), the generated
reference matches the code, every Python block in the docs runs, and every command the docs show exists
with the flags they give it."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marin_pipelines.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
# the line above a block may say why it is not run (it is still compiled), or that it is an excerpt of a file
# (each of its lines must then be a line of that file)
NOT_RUN = re.compile(r"<!-- (not run: (?P<why>[^>]+)|excerpt of (?P<file>\S+)) -->\s*$")
# what every page's blocks may take as given: the experiment helpers and the demo they build on
PRELUDE = """
import os
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import *
"""
SHELL = ("bash", "sh", "shell", "console")
INLINE = re.compile(r"(?<!`)`(?:\S*/)?(marin-pipelines [a-z][^`]*)`")


def blocks(page: Path, languages: tuple[str, ...]) -> list[tuple[int, str, re.Match | None]]:
    """(line, code, the note above it or None) of each fenced block in one of ``languages``."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match["lang"] in languages:
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            note = NOT_RUN.search(before)
            found.append((text.count("\n", 0, match.start()) + 1, textwrap.dedent(match["body"]), note))
    return found


def relative(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [str(Path(sys.executable).with_name("mkdocs")), "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "reference" / "commands" / "index.html").exists()


def test_the_generated_reference_matches_the_code(capsys):
    path = ROOT / "docs" / "generate_reference.py"
    spec = importlib.util.spec_from_file_location("generate_reference", path)
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    assert generate.main(["--check"]) == 0, capsys.readouterr().err
    # every command and every stage is on its page
    commands = (ROOT / "docs" / "reference" / "commands.md").read_text()
    configs = (ROOT / "docs" / "reference" / "configs.md").read_text()
    assert all(f"## `{name}`" in commands for name in subcommands())
    assert all(f"## `{stage.name}`" in configs for _, stage in generate.stages())


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, ("python",))], ids=relative)
def test_every_python_block_runs(page):
    namespace: dict = {}
    exec(PRELUDE, namespace)
    for line, code, note in blocks(page, ("python",)):
        where = f"{relative(page)}:{line}"
        compiled = compile(code, where, "exec")  # even a block not run is valid Python
        if note is None:
            exec(compiled, namespace)
        elif note["file"]:
            source = {text.strip() for text in (ROOT / note["file"]).read_text().splitlines()}
            strays = [text for text in code.splitlines() if text.strip() not in source | {"", "..."}]
            assert not strays, f"{where}: not lines of {note['file']}: {strays}"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (commands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices


def shell_commands(page: Path) -> list[tuple[int, list[str]]]:
    """Each ``marin-pipelines`` command line in the page's shell blocks (continuation lines joined, comments
    and prompts dropped) and in its inline code, as words."""
    found = []
    for line, code, _ in blocks(page, SHELL):
        for offset, text in enumerate(code.replace("\\\n", " ").splitlines()):
            text = text.split(" #", 1)[0].strip().removeprefix("$ ")
            if re.match(r"^(\S*/)?marin-pipelines\s", text):
                found.append((line + offset + 1, shlex.split(text, comments=True)))
    text = page.read_text()
    for match in INLINE.finditer(text):  # `marin-pipelines eval --tasks ...` in the prose
        words = [word.strip("[]|.,") for word in match[1].split()]
        found.append((text.count("\n", 0, match.start()) + 1, words))
    return found


@pytest.mark.parametrize("page", [p for p in PAGES if shell_commands(p)], ids=relative)
def test_every_command_in_the_docs_exists_with_its_flags(page):
    known = subcommands()
    wrong = []
    for line, words in shell_commands(page):
        command = words[1]
        if command in ("-h", "--help"):
            continue
        if command not in known:
            wrong.append(f"{relative(page)}:{line}: no command {command!r}")
            continue
        flags = {option for action in known[command]._actions for option in action.option_strings}
        for word in words[2:]:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and flag not in flags:
                wrong.append(f"{relative(page)}:{line}: `{command}` has no flag {flag}")
    assert not wrong, "\n".join(wrong)
