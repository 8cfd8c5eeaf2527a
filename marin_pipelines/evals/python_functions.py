"""The standard-library functions that the shipped generative tasks ask about (``marin_python_signature``,
``marin_python_doc``): each one's name, parameters and the first sentence of its docstring, read from this
Python, so nothing is written by hand and nothing is downloaded.

The functions are of modules that no demo text holds: neither the demo crawl's pydoc pages and chat set
(``CURATED_MODULES``) nor the docstring dump (``dataset_dumps.MODULES``). An experiment whose training text
holds them anyway (the standard library's own source, ``package_text`` with ``include_stdlib``) has them
found by decontamination, which reads the tasks' items like every shipped task's.

    python -m marin_pipelines.evals.python_functions     # rewrite the task files in evals/tasks/
"""

from __future__ import annotations

import importlib
import inspect
import json
import platform
import re
import sys
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).parent / "tasks"
TEST_FILE, FEWSHOT_FILE = "functions.jsonl", "functions_fewshot.jsonl"
# module (as imported) -> the name it is known by, and the functions asked about: clear first sentences
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "posixpath": (
        "os.path",
        ("abspath", "basename", "dirname", "exists", "expanduser", "expandvars", "getsize", "isabs", "isdir")
        + ("isfile", "join", "normpath", "relpath", "splitext"),
    ),
    "ast": ("ast", ("get_docstring", "increment_lineno", "literal_eval", "walk")),
    "binascii": ("binascii", ("b2a_base64", "crc32")),
    "getpass": ("getpass", ("getpass", "getuser")),
    "locale": ("locale", ("atoi", "normalize")),
    "mimetypes": ("mimetypes", ("add_type", "guess_extension")),
    "pydoc": ("pydoc", ("getdoc", "splitdoc")),
    "runpy": ("runpy", ("run_path",)),
    "shelve": ("shelve", ("open",)),
    "signal": ("signal", ("alarm", "getsignal", "signal", "strsignal")),
    "sqlite3": ("sqlite3", ("complete_statement", "register_adapter")),
    "sysconfig": ("sysconfig", ("get_config_var", "get_platform")),
    "tarfile": ("tarfile", ("is_tarfile",)),
    "webbrowser": ("webbrowser", ("open", "open_new", "open_new_tab")),
    "zlib": ("zlib", ("adler32", "crc32", "decompress")),
}
FEWSHOT = ("os.path.split", "zlib.compress", "mimetypes.guess_type")  # marin_python_signature's examples
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def function_record(module: str, known_as: str, name: str) -> dict[str, str]:
    """``{"name", "params", "doc"}``: the parameters as ``inspect.signature`` writes them, without the
    parentheses; the docstring's first sentence on one line."""
    function = getattr(importlib.import_module(module), name)
    params = str(inspect.signature(function))[1:-1]
    paragraph = " ".join((inspect.getdoc(function) or "").split("\n\n")[0].split())
    doc = _SENTENCE_END.split(paragraph, maxsplit=1)[0]
    if not doc or "(" in doc.split()[0]:  # none, or a C function's signature line for a first sentence
        raise ValueError(f"{module}.{name}: no first sentence in its docstring")
    return {"name": f"{known_as}.{name}", "params": params, "doc": doc}


def function_records() -> list[dict[str, str]]:
    """Every function of ``MODULES`` and of ``FEWSHOT``, in order."""
    known = {alias: module for module, (alias, _) in MODULES.items()}
    asked = [(module, alias, name) for module, (alias, names) in MODULES.items() for name in names]
    shots = [(known[f.rsplit(".", 1)[0]], *f.rsplit(".", 1)) for f in FEWSHOT]
    return [function_record(*entry) for entry in asked + shots]


def python_version() -> str:
    """The Python whose docstrings the files hold (major.minor): another may word them otherwise."""
    return ".".join(platform.python_version_tuple()[:2])


def task_files() -> dict[str, str]:
    """The contents of the tasks' files: the questions' records and the few-shot examples' records."""
    records = function_records()
    shots = set(FEWSHOT)

    def lines(selected: list[dict[str, Any]]) -> str:
        return "".join(json.dumps(r, sort_keys=True) + "\n" for r in selected)

    return {
        TEST_FILE: lines([r for r in records if r["name"] not in shots]),
        FEWSHOT_FILE: lines([r for r in records if r["name"] in shots]),
    }


if __name__ == "__main__":
    for file, text in task_files().items():
        (TASKS_DIR / file).write_text(text)
    print(f"wrote {', '.join(task_files())} in {TASKS_DIR} from Python {python_version()}", file=sys.stderr)
