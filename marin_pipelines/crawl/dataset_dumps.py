"""Dumps of existing corpora made from text that every machine has installed, for experiments that start
from "a dataset somebody already made" without downloading one.

- ``docstrings/part-00000.parquet``: the standard library's docstrings, a row per documented module, class
  or function, with field names of its own (``doc_id``, ``content``, ``module``), as a team's dump has them.
- ``package_docs/part-00000.jsonl.gz``: installed distributions' documentation (their README from the
  METADATA, and .md / .rst / .txt files) as gzipped JSON lines (``id``, ``body``, ``package``).

``planted`` texts (evaluation items, by name) are appended to the first package documents, one each, so that
a decontamination step downstream has something real to find; the rows they went into are returned, with
each item's name, so that what was planted can be reconciled with what was found.
"""

from __future__ import annotations

import gzip
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from marin_pipelines.crawl.package_text import PackageTextConfig, select_files

DOCSTRINGS, PACKAGE_DOCS = "docstrings", "package_docs"
MIN_WORDS = 20  # a shorter docstring says little ("Return self==value.")


def docstring_rows(modules: list[str]) -> list[dict[str, str]]:
    """The module's and each public attribute's docstring, for modules named by the caller (importing an
    arbitrary module can have effects: the caller lists them)."""
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for name in modules:
        module = importlib.import_module(name)
        members = [
            (name, module),
            *sorted((f"{name}.{a}", v) for a, v in vars(module).items() if a[:1] != "_"),
        ]
        for qualified, value in members:
            doc = inspect.getdoc(value) if callable(value) or value is module else None
            if doc and len(doc.split()) >= MIN_WORDS and doc not in seen:  # an alias repeats its target's
                seen.add(doc)
                rows.append({"doc_id": qualified, "content": doc, "module": name})
    return rows


def package_doc_rows(distributions: list[str]) -> list[dict[str, str]]:
    """Each distribution's documentation files (its README included), as package_text selects them."""
    config = PackageTextConfig(
        distributions=tuple(distributions), include_stdlib=False, extensions=(".md", ".rst", ".txt")
    )
    files = [f for f in select_files(config).files if f.kind == "docs"]
    return [{"id": f.id, "body": f.path.read_text(encoding="utf-8"), "package": f.source} for f in files]


def write_dumps(
    modules: list[str], distributions: list[str], planted: dict[str, str], out: Path
) -> dict[str, Any]:
    """Both dumps into ``out``; the rows and bytes of each and where each planted text went."""
    docstrings, docs = docstring_rows(modules), package_doc_rows(distributions)
    if len(planted) > len(docs):
        raise ValueError(
            f"{len(planted)} texts to plant but only {len(docs)} package documents to plant them in"
        )
    for row, text in zip(docs, planted.values(), strict=False):
        row["body"] += f"\n\n{text}\n"
    (out / DOCSTRINGS).mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(docstrings), out / DOCSTRINGS / "part-00000.parquet")
    (out / PACKAGE_DOCS).mkdir()
    with gzip.open(out / PACKAGE_DOCS / "part-00000.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in docs)
    return {
        DOCSTRINGS: {"rows": len(docstrings), "chars": sum(len(r["content"]) for r in docstrings)},
        PACKAGE_DOCS: {"rows": len(docs), "chars": sum(len(r["body"]) for r in docs)},
        "planted": [
            {"id": row["id"], "item": item, "text": text}
            for row, (item, text) in zip(docs, planted.items(), strict=False)
        ],
    }
