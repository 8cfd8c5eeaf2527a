"""`marin-pipelines extract`: the main content of HTML pages, as the extracted_text stage sees them.

Each PAGE is an ``.html`` or ``.html.gz`` file (gzip is recognised by its magic bytes, whatever the name);
its charset comes from its ``<meta>`` tag or from detection. With ``--json``, one JSON object per line
and page: ``path``, ``text`` (light markdown; empty when the page has no main content), ``title`` and
``lang`` (null when there is no text). Without it, each page's title and text under a ``==> PATH <==``
header. A page that cannot be read is one ``marin-pipelines extract: PATH: reason`` line on stderr and
is skipped; a count of them ends stderr, and the exit status is then 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import zlib
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "extract",
        help="main-content text, title and language of HTML pages",
        description=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("pages", nargs="+", metavar="PAGE", help=".html or .html.gz files")
    parser.add_argument("--json", action="store_true", help="one JSON object per line and page")
    parser.add_argument(
        "--whole-page", action="store_true", help="render the whole page, not only its main content"
    )
    parser.add_argument("--plain", action="store_true", help="plain blocks: no # headings or list markers")
    parser.set_defaults(run=run_extract)


def run_extract(args: argparse.Namespace) -> int:
    try:
        return _extract_pages(args)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _extract_pages(args: argparse.Namespace) -> int:
    from marin_pipelines.text.extracted_text import ExtractConfig, decode_html, detect_language, extract_page

    config = ExtractConfig(main_content=not args.whole_page, markdown=not args.plain)
    failed = 0
    for path in args.pages:
        try:
            data = read_page(Path(path))
            title, text = extract_page(decode_html(data, None), config)
        except Exception as error:  # one bad page is reported and skipped, never a traceback
            failed += 1
            print(f"marin-pipelines extract: {path}: {_describe(error)}", file=sys.stderr)
            continue
        lang = detect_language(text)[0] if text else None
        if args.json:
            record = {"path": path, "text": text, "title": title, "lang": lang}
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            print(f"==> {path} <==\n# {title}\n\n{text}\n", flush=True)
    if failed:
        print(f"marin-pipelines extract: {failed} of {len(args.pages)} pages failed", file=sys.stderr)
    return 1 if failed else 0


def read_page(path: Path) -> bytes:
    """The bytes of an HTML page, gunzipped when they are gzip."""
    data = path.read_bytes()
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    if not data.strip():
        raise ValueError("empty page")
    return data


def _describe(error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, IsADirectoryError):
        return "is a directory"
    if isinstance(error, PermissionError):
        return "permission denied"
    if isinstance(error, (gzip.BadGzipFile, EOFError, zlib.error)):
        return f"not a readable gzip file ({error or type(error).__name__})"
    if isinstance(error, ValueError) and str(error):
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
