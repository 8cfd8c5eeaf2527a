"""The standard library's own documentation as material: pydoc pages and library-reference blocks of a
curated list of modules, rendered in a fresh interpreter so they depend only on Python.

The demo crawl (``crawl/demo_crawl.py``) renders them as web pages and the demo's chat set
(``tokenize/demo_chat.py``) turns them into questions and answers; both read them from here, below either,
so that neither imports the other.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pydoc
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterable

# Modules whose import has no side effects and whose pydoc page does not depend on the machine or on
# hash randomisation (checked under several PYTHONHASHSEED / locale / TZ settings; e.g. difflib,
# doctest, configparser, smtplib and http.client show hash-ordered sets and are left out). No OS,
# locale, OpenSSL or SQLite modules: their pages describe the machine.
CURATED_MODULES = (
    "abc", "argparse", "array", "base64", "bisect", "builtins", "bz2", "calendar", "cmath", "cmd", "code",
    "codecs", "codeop", "collections", "collections.abc", "colorsys", "concurrent.futures", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "decimal", "dis", "email.charset", "email.generator",
    "email.header", "email.headerregistry", "email.message", "email.parser", "email.policy", "email.utils",
    "enum", "filecmp", "fileinput", "fnmatch", "fractions", "functools", "getopt", "gettext", "glob",
    "graphlib", "gzip", "heapq", "hmac", "html", "html.parser", "http.cookiejar", "http.cookies",
    "http.server", "imaplib", "inspect", "ipaddress", "itertools", "json", "json.decoder", "json.encoder",
    "linecache", "logging", "logging.handlers", "lzma", "mailbox", "math", "numbers", "operator", "optparse",
    "pathlib", "pickle", "pickletools", "pkgutil", "plistlib", "pprint", "profile", "pstats", "queue",
    "quopri", "random", "re", "reprlib", "sched", "secrets", "selectors", "shlex", "shutil", "socketserver",
    "statistics", "string", "struct", "textwrap", "threading", "timeit", "tokenize", "tomllib", "traceback",
    "types", "typing", "unittest.case", "unittest.mock", "urllib.error", "urllib.parse", "urllib.request",
    "urllib.robotparser", "uuid", "warnings", "wave", "weakref", "wsgiref.util", "xml.dom.minidom",
    "xml.etree.ElementTree", "xml.sax.handler", "xml.sax.saxutils", "xmlrpc.client", "zipapp", "zipfile",
    "zipimport", "zoneinfo",
)  # fmt: skip

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_UNDERLINE = re.compile(r"^([=\-*^~\"])\1{2,}$")
_LIST_ITEM = re.compile(r"^(\d+\.|\*|-) ")
_MIN_CLASS_PAGE_WORDS = 150


Block = tuple[str, str]  # (kind, text): kind is h2, h3, p, pre, or ul / ol for an item of such a list


def text_blocks(text: str) -> list[Block]:
    """reST-like plain text as blocks: headings, paragraphs (unwrapped), list items, code."""
    blocks: list[Block] = []
    for chunk in re.split(r"\n\s*\n", text):
        rows = chunk.split("\n")
        if len(rows) >= 2 and _UNDERLINE.match(rows[1].strip()):
            blocks.append(("h2" if rows[1][0] in "=*" else "h3", rows[0].strip()))
            rows = rows[2:]
        if not any(r.strip() for r in rows):
            continue
        joined = " ".join(r.strip() for r in rows)
        if rows[0].startswith(" ") and not (
            joined.endswith(".") and joined[0].isupper() and ">>>" not in joined
        ):
            blocks.append(("pre", _dedent(rows)))
        elif _LIST_ITEM.match(rows[0]):
            items = re.split(r"\s(?=(?:\d+\.|\*|-) )", " " + joined)
            kind = "ol" if rows[0][0].isdigit() else "ul"
            blocks += [(kind, _LIST_ITEM.sub("", item.strip())) for item in items if item.strip()]
        else:
            blocks.append(("p", re.sub(r"\s+", " ", joined)))
    return blocks


def _dedent(rows: list[str]) -> str:
    indent = min(len(r) - len(r.lstrip()) for r in rows if r.strip())
    return "\n".join(r[indent:] for r in rows)


def stdlib_material_isolated(modules: tuple[str, ...]) -> dict[str, list]:
    """``stdlib_material`` computed in a fresh, isolated interpreter.

    pydoc shows module and class data (the root logger's level, warning filters, caches), which the
    calling process may have changed; a fresh interpreter makes the pages depend only on Python.
    """
    code = "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "  # -I drops PYTHONPATH: pass ours
    code += "from marin_pipelines.stdlib_material import stdlib_material as m; "
    code += "json.dump(m(sys.argv[2:]), sys.stdout)"
    command = [sys.executable, "-I", "-c", code, json.dumps(sys.path), *modules]
    result = subprocess.run(command, capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"rendering stdlib pages failed: {result.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(result.stdout)


def stdlib_material(modules: Iterable[str]) -> dict[str, list]:
    """pydoc HTML pages and library-page blocks of ``modules``, as rendered by this interpreter.

    ``pydoc``: ``[name, html]`` with install paths and memory addresses removed; ``library``:
    ``[title, slug, blocks]`` (see ``_library_docs``).
    """
    material: dict[str, list] = {"pydoc": [], "library": []}
    for name in modules:
        module = importlib.import_module(name)
        page = pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, name))
        page = page.replace(sysconfig.get_paths()["stdlib"], "/usr/lib/python3")
        material["pydoc"].append([name, _ADDRESS.sub("", page)])
        material["library"] += _library_docs(name, module)
    return material


def _library_docs(name: str, module: object) -> list[tuple[str, str, list[Block]]]:
    """Library-reference pages of a module: its own docstrings as prose, as (title, slug, blocks).

    Like a hand-written reference, there is a page for the module (its docstring, functions and small
    classes) and one per documented class (the class and its methods); a docstring shared by several
    members (aliases, overrides that repeat their base) is shown once.
    """
    seen: set[str] = set()

    def document(blocks: list[Block], heading: Block, obj: object) -> None:
        doc = _own_doc(obj)
        if doc and doc not in seen:
            seen.add(doc)
            blocks.extend([heading, *text_blocks(doc)])

    module_blocks = text_blocks(_own_doc(module))
    class_pages = []
    for member_name, member in sorted(vars(module).items()):
        if member_name.startswith("_") or getattr(member, "__module__", None) != name:
            continue
        if inspect.isroutine(member):
            document(module_blocks, ("h2", f"{name}.{member_name}{_signature(member)}"), member)
        elif inspect.isclass(member):
            blocks: list[Block] = []
            document(blocks, ("h2", f"{member_name}{_signature(member)}"), member)
            for method_name, method in sorted(vars(member).items()):
                if not method_name.startswith("_") and inspect.isroutine(method):
                    document(blocks, ("h3", f"{member_name}.{method_name}{_signature(method)}"), method)
            if sum(len(text.split()) for _, text in blocks) >= _MIN_CLASS_PAGE_WORDS:
                class_pages.append((f"{name}.{member_name}", f"{name}.{member_name}", blocks))
            else:
                module_blocks += blocks
    return [(f"{name} module", name, module_blocks), *class_pages]


def _own_doc(obj: object) -> str:
    """The object's own docstring (``inspect.getdoc`` would repeat a base class's for each subclass)."""
    doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _signature(obj: object) -> str:
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):  # builtins without text signatures
        return "(...)" if inspect.isroutine(obj) else ""
