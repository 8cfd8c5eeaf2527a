"""Bad input, made here: WARC files of any records (HTML pages of English prose, images, PDFs, JSON,
warcinfo and request records, 50 MB bodies) for the tests of empty crawls, odd paths and bad configs."""

from __future__ import annotations

import gzip
import random
import uuid
from pathlib import Path

_TEXT = (
    "the people of the town walked along the river every morning and talked about weather work children",
    "books gardens markets music letters friends winter summer travel history bread coffee school house",
    "window street light stone paper water mountain village story teacher doctor farmer engineer painter",
    "kitchen library station harbour island forest season evening",
)
WORDS = [word for line in _TEXT for word in line.split()]
VERBS = ["reads", "writes", "builds", "paints", "cooks", "carries", "finds", "keeps", "opens", "visits"]


def prose(seed: int, sentences: int = 12) -> str:
    """English-looking sentences that pass the quality filters, different for every seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
        words.insert(2, rng.choice(VERBS))
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def html_page(seed: int) -> bytes:
    paragraphs = "".join(f"<p>{prose(seed * 10 + k)}</p>" for k in range(4))
    return (
        f"<html><head><title>Page {seed}</title></head><body><article><h1>Notes {seed}</h1>"
        f"{paragraphs}</article></body></html>"
    ).encode()


def http(body: bytes, content_type: str = "text/html; charset=utf-8") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def record(kind: str, url: str | None, block: bytes, content_type: str | None = None) -> bytes:
    """One WARC record as its own gzip member (level 1: a 50 MB body compresses in a moment)."""
    if content_type is None:
        content_type = {
            "warcinfo": "application/warc-fields",
            "request": "application/http; msgtype=request",
        }.get(kind, "application/http; msgtype=response")
    head = (
        f"WARC/1.0\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:{uuid.uuid4()}>\r\n"
        "WARC-Date: 2024-01-01T00:00:00Z\r\n"
        + (f"WARC-Target-URI: {url}\r\n" if url else "")
        + f"Content-Type: {content_type}\r\nContent-Length: {len(block)}\r\n\r\n"
    )
    return gzip.compress(head.encode() + block + b"\r\n\r\n", compresslevel=1, mtime=0)


def response(url: str, body: bytes, content_type: str = "text/html; charset=utf-8") -> bytes:
    return record("response", url, http(body, content_type))


def pages(n: int, start: int = 0) -> list[bytes]:
    return [response(f"https://example.com/{i}", html_page(i)) for i in range(start, start + n)]


def metadata_records(n: int = 3) -> list[bytes]:
    """warcinfo and request records only: no capture in them."""
    out = []
    for i in range(n):
        out.append(record("warcinfo", None, b"software: test\r\nformat: WARC File Format 1.0\r\n"))
        out.append(
            record("request", f"https://example.com/{i}", b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
        )
    return out


def non_html_records() -> list[bytes]:
    """Images, PDFs and JSON responses: captures, none of them HTML."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + b"1 0 obj << /Type /Catalog >> endobj\n" * 20
    out = [response(f"https://example.com/{i}.png", png, "image/png") for i in range(3)]
    out += [response(f"https://example.com/{i}.pdf", pdf, "application/pdf") for i in range(3)]
    out += [response(f"https://example.com/{i}.json", b'{"a": %d}' % i, "application/json") for i in range(3)]
    return out


def write_warc(path: Path, records: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(records))
    return path
