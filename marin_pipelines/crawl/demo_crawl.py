"""The embedded default crawl: real HTML that any Python 3.11 can produce, packed as gzipped WARCs.

The pipeline needs a crawl that exists on every machine without a download. The prose comes from
Python itself: the language reference shipped in ``pydoc_data.topics`` and the docstrings of a
curated list of standard-library modules (``stdlib_material.py``: importing arbitrary modules has side
effects, so the list is fixed), both rendered into a documentation site with header, navigation, cookie
notice and footer, plus the raw ``pydoc`` HTML page of each module (API dumps, as crawls find them).
Added to it are the pages a real crawl is full of, so that every filter has work: boilerplate-only pages,
exact and near duplicates, keyword spam, gibberish, a Windows-1252 and a Latin-1 page, an empty body, an
HTTP error, a redirect and non-HTML records.

The output is deterministic: the same config and Python version give the same bytes. There is no
clock (dates and ids derive from the seed), memory addresses and install paths are removed, and the
stdlib pages are rendered in a fresh interpreter so the caller's state cannot leak into them.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import random
import struct
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from pydoc_data.topics import topics as REFERENCE_TOPICS

from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.stdlib_material import CURATED_MODULES, Block, stdlib_material_isolated, text_blocks

SITE = "https://docs.example.org"
MIRROR = "https://pydocs-mirror.example.net"
PYDOC_SITE = "https://stdlib.example.com"
_PROSE = ("p", "ul", "ol")
_SPLIT_TOPIC_BLOCKS = 40  # longer topics get a page per section, as in the online docs


class DemoCrawlConfig(BaseModel):
    """What the demo crawl contains. The defaults give every downstream rule at least one page."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(
        0,
        ge=0,
        description="seed of the page order, the sampled and perturbed pages, and the WARCs' dates and ids",
    )
    n_files: int = Field(4, ge=1, le=64, description="gzipped WARC files the pages are dealt over")
    pydoc_modules: tuple[str, ...] = Field(
        CURATED_MODULES,
        description="standard-library modules rendered as docs and raw pydoc pages, from the curated list",
    )
    exact_duplicates: int = Field(
        8, ge=0, description="prose pages repeated byte for byte under another URL (at most the prose pages)"
    )
    near_duplicates: int = Field(
        8, ge=0, description="prose pages perturbed and served from a mirror site (at most the prose pages)"
    )
    spam_pages: int = Field(5, ge=0, description="keyword-stuffing pages (Gopher repetition territory)")
    gibberish_pages: int = Field(
        5, ge=0, description="pages of random letters in the shape of prose (language id rejects them)"
    )
    boilerplate_pages: int = Field(
        6, ge=0, description="pages of navigation, login forms and cookie settings with no article"
    )

    @field_validator("pydoc_modules")
    @classmethod
    def _curated(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(CURATED_MODULES))
        if unknown:
            raise ValueError(f"pydoc_modules: {unknown} not in the curated list {CURATED_MODULES}")
        return value


@dataclass
class Page:
    """One HTTP exchange to archive: the body as served plus what the WARC needs about it."""

    kind: str
    url: str
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: str = "200 OK"
    extra_headers: tuple[tuple[str, str], ...] = ()


def build_demo_crawl(out_dir: Path, config: DemoCrawlConfig | None = None) -> dict:
    """Write the demo crawl as ``n_files`` gzipped WARC files; returns files, records and pages per kind."""
    config = config or DemoCrawlConfig()
    rng = random.Random(config.seed)
    pages = _pages(config, rng)
    rng.shuffle(pages)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=config.seed % 366)
    files, records, size = [], 0, 0
    for index in range(config.n_files):
        name = f"MARIN-DEMO-{config.seed}-{index:05d}.warc.gz"
        chunk = pages[index :: config.n_files]
        writer = _WarcWriter(name, config.seed, start + timedelta(hours=index))
        data = writer.warcinfo() + b"".join(writer.response(page) for page in chunk)
        (out_dir / name).write_bytes(data)
        files.append(name)
        records += 1 + len(chunk)
        size += len(data)
    kinds = Counter(page.kind for page in pages)
    return {"files": files, "records": records, "bytes": size, "pages": dict(sorted(kinds.items()))}


class _WarcWriter:
    """A minimal WARC/1.0 writer: every record is its own gzip member, as crawlers write them."""

    def __init__(self, filename: str, seed: int, start: datetime):
        self.filename, self.seed, self.time, self.count = filename, seed, start, 0

    def _record(self, headers: list[tuple[str, str]], block: bytes) -> bytes:
        self.count += 1
        head = [("WARC-Date", self.time.strftime("%Y-%m-%dT%H:%M:%SZ")), *headers]
        head.append(("WARC-Block-Digest", _sha1(block)))
        head.append(("Content-Length", str(len(block))))
        text = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head) + "\r\n"
        return gzip.compress(text.encode() + block + b"\r\n\r\n", mtime=0)

    def _id(self) -> str:
        """A record id that is unique and stable: derived from the seed, file and record number."""
        return (
            f"<{uuid.uuid5(uuid.NAMESPACE_URL, f'marin-demo:{self.seed}:{self.filename}#{self.count}').urn}>"
        )

    def warcinfo(self) -> bytes:
        fields = {
            "software": "marin-pipelines demo_crawl",
            "format": "WARC File Format 1.0",
            "isPartOf": f"MARIN-DEMO-{self.seed}",
            "description": "Embedded demo crawl: Python reference and pydoc pages plus generated cases",
        }
        block = "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode()
        headers = [
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", self._id()),
            ("WARC-Filename", self.filename),
            ("Content-Type", "application/warc-fields"),
        ]
        return self._record(headers, block)

    def response(self, page: Page) -> bytes:
        self.time += timedelta(seconds=7)  # one capture every 7 seconds
        http_date = self.time.strftime("%a, %d %b %Y %H:%M:%S GMT")
        head = [("Date", http_date), ("Server", "demo/1.0"), ("Content-Type", page.content_type)]
        head += [*page.extra_headers, ("Content-Length", str(len(page.body)))]
        http = f"HTTP/1.1 {page.status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head) + "\r\n"
        headers = [
            ("WARC-Type", "response"),
            ("WARC-Record-ID", self._id()),
            ("WARC-Target-URI", page.url),
            ("WARC-Payload-Digest", _sha1(page.body)),
            ("Content-Type", "application/http; msgtype=response"),
        ]
        return self._record(headers, http.encode("latin-1") + page.body)


def _sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


# --- pages -------------------------------------------------------------------------------------------


def _pages(config: DemoCrawlConfig, rng: random.Random) -> list[Page]:
    """Every page of the crawl, in a fixed order (shuffled by the caller)."""
    sections = _reference_sections()
    pages = [
        Page("reference", f"{SITE}/reference/{slug}.html", _site_page(t, b, rng).encode())
        for slug, t, b in sections
    ]
    material = stdlib_material_isolated(config.pydoc_modules)
    for name, html_text in material["pydoc"]:
        body = gzip.compress(html_text.encode("utf-8"), mtime=0)
        pages.append(
            Page("pydoc", f"{PYDOC_SITE}/{name}.html", body, extra_headers=(("Content-Encoding", "gzip"),))
        )
    for title, slug, blocks in material["library"]:
        page = _site_page(title, [(kind, text) for kind, text in blocks], rng, site="Python Library")
        pages.append(Page("library", f"{SITE}/library/{slug}.html", page.encode()))
    prose = [s for s in sections if _prose_words(s[2]) >= 300 and "{" not in _block_text(s[2])]
    for slug, *_ in rng.sample(prose, min(config.exact_duplicates, len(prose))):
        original = next(p for p in pages if p.url == f"{SITE}/reference/{slug}.html")
        pages.append(
            Page("exact_duplicate", f"{SITE}/reference/{slug}.html?utm_source=newsletter", original.body)
        )
    for slug, title, blocks in rng.sample(prose, min(config.near_duplicates, len(prose))):
        near = _perturb(blocks, rng)
        body = _site_page(
            title, near, rng, site="Python Docs Mirror", footer_date=f"2023-{rng.randint(1, 12):02d}-15"
        )
        pages.append(Page("near_duplicate", f"{MIRROR}/{slug}/", body.encode()))
    pages += [_spam_page(i, rng) for i in range(config.spam_pages)]
    pages += [_gibberish_page(i, rng) for i in range(config.gibberish_pages)]
    pages += [_boilerplate_page(i, rng) for i in range(config.boilerplate_pages)]
    pages += _special_pages(rng)
    return pages


def _reference_sections() -> list[tuple[str, str, list[Block]]]:
    """The reference topics as (slug, title, blocks); long topics are split at their ``===`` sections."""
    sections = []
    for key in sorted(REFERENCE_TOPICS):
        title, blocks = _parse_topic(REFERENCE_TOPICS[key])
        parts: list[tuple[str, list[Block]]] = [(title, [])]
        for kind, text in blocks:
            if kind == "h2" and len(blocks) > _SPLIT_TOPIC_BLOCKS:
                parts.append((text, []))
            else:
                parts[-1][1].append((kind, text))
        for index, (part_title, part_blocks) in enumerate(parts):
            if part_blocks:
                slug = key if index == 0 else f"{key}-{index}"
                sections.append((slug, part_title, part_blocks))
    return sections


def _parse_topic(text: str) -> tuple[str, list[Block]]:
    """A reference topic as its title (the first line, underlined) and blocks."""
    lines = text.strip("\n").split("\n")
    return lines[0].strip(), text_blocks("\n".join(lines[2:]))


def _block_text(blocks: list[Block]) -> str:
    return "\n".join(text for kind, text in blocks if kind in _PROSE)


def _prose_words(blocks: list[Block]) -> int:
    return len(_block_text(blocks).split())


def _render(blocks: list[Block]) -> str:
    out, open_list = [], None
    for kind, text in blocks:
        if open_list and kind != open_list:
            out.append(f"</{open_list}>")
            open_list = None
        if kind in ("ul", "ol"):
            if not open_list:
                out.append(f"<{kind}>")
                open_list = kind
            kind = "li"
        out.append(f"<{kind}>{html.escape(text)}</{kind}>")
    return "\n".join(out + ([f"</{open_list}>"] if open_list else []))


def _site_page(
    title: str, blocks: list[Block], rng: random.Random, site: str = "Python Reference", footer_date: str = ""
) -> str:
    """A documentation-site page: the article inside navigation, sidebar, cookie notice and footer."""
    related = rng.sample(sorted(REFERENCE_TOPICS), 3)
    footer_date = footer_date or f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return _TEMPLATE.format(
        site=html.escape(site),
        title=html.escape(title),
        article=_render(blocks),
        related="".join(f'<li><a href="/reference/{t}.html">{t}</a></li>' for t in related),
        date=footer_date,
    )


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} | {site}</title>
<link rel="stylesheet" href="/static/site.css">
</head>
<body>
<header class="site-header">
<a class="logo" href="/">{site}</a>
<nav class="main-nav"><ul>
<li><a href="/">Home</a></li><li><a href="/reference/">Language reference</a></li>
<li><a href="/library/">Library</a></li><li><a href="/search">Search</a></li>
<li><a href="/login">Log in</a></li><li><a href="/signup">Sign up</a></li>
</ul></nav>
</header>
<div class="breadcrumbs"><a href="/">Home</a> &rsaquo; <a href="/reference/">Reference</a>
&rsaquo; {title}</div>
<main>
<article class="content">
<h1>{title}</h1>
{article}
</article>
<aside class="sidebar"><h3>Related topics</h3><ul>{related}</ul></aside>
</main>
<div id="cookie-banner" class="cookie-notice">
<p>We use cookies to improve your experience. By continuing to browse you agree to our use of cookies.</p>
<button type="button">Accept</button> <a href="/privacy">Privacy policy</a>
</div>
<footer class="site-footer">
<p>&copy; 2001-2024 Python Software Foundation. Licensed under the PSF License Version 2.</p>
<p><a href="/privacy">Privacy policy</a> &middot; <a href="/terms">Terms of use</a> &middot;
<a href="/contact">Contact</a></p>
<p>Last updated on {date}.</p>
</footer>
<script>window.analytics = window.analytics || []; analytics.push(["pageview"]);</script>
</body>
</html>
"""


def _perturb(blocks: list[Block], rng: random.Random) -> list[Block]:
    """A near copy: about one word in a hundred of the prose replaced by another word of the page.

    Each replaced word changes the five word 5-grams that contain it, so the copy keeps a 5-gram
    Jaccard similarity of about 0.9 with the original: the range MinHash dedup must catch.
    """
    vocabulary = sorted({w for _, text in blocks for w in text.split() if w.isalpha() and len(w) > 3})
    words = [text.split() if kind in _PROSE else [] for kind, text in blocks]
    slots = [(i, j) for i, block_words in enumerate(words) for j in range(len(block_words))]
    for i, j in rng.sample(slots, max(2, len(slots) // 100)):
        words[i][j] = rng.choice([w for w in vocabulary if w != words[i][j]])
    return [(kind, " ".join(w) if w else text) for (kind, text), w in zip(blocks, words, strict=True)]


# --- generated cases ------------------------------------------------------------------------------

_SPAM_KEYWORDS = ["cheap watches", "replica watches", "luxury watches sale", "discount watches online"]


def _spam_page(index: int, rng: random.Random) -> Page:
    """Keyword stuffing: the same few sales lines over and over (Gopher repetition territory)."""
    lines = []
    for _ in range(30):
        kw, other = rng.sample(_SPAM_KEYWORDS, 2)
        lines.append(rng.choice([
            f"Buy {kw} today and save big on {other} with free shipping to the whole world.",
            f"The best {kw} are here, the best {kw} for you, the best {kw} at the lowest price.",
            f"Click here to order {kw} now, because {kw} never have been this cheap before!",
            f"Looking for {kw}? We have {kw} and {other} in stock with fast delivery.",
        ]))  # fmt: skip
    article = "\n".join(f"<p>{line}</p>" for line in lines)
    body = _SIMPLE.format(title=f"Cheap watches outlet {index}", article=article)
    return Page("spam", f"https://best-watch-deals.example.com/offer-{index}.html", body.encode())


def _gibberish_page(index: int, rng: random.Random) -> Page:
    """Random letters in the shape of prose: not any language, so language id must reject it."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    paragraphs = []
    for _ in range(6):
        sentences = []
        for _ in range(rng.randint(4, 8)):
            words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(rng.randint(6, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    article = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    body = _SIMPLE.format(title=f"Page {index}", article=article)
    return Page("gibberish", f"https://xkqzv-{index}.example.info/index.html", body.encode())


_BOILERPLATE = [
    ("Log in", '<form action="/login"><label>Email</label><input name="email"><label>Password</label>'
     '<input type="password" name="password"><button>Log in</button></form>'
     '<p><a href="/reset">Forgot your password?</a> <a href="/signup">Create an account</a></p>'),
    ("Cookie settings", '<div class="cookie-settings"><p>Manage cookie preferences.</p>'
     '<label><input type="checkbox" checked> Necessary</label>'
     '<label><input type="checkbox"> Analytics</label>'
     '<button>Save</button></div>'),
    ("Tags", "<ul>" + "".join(f'<li><a href="/tag/{t}">{t}</a></li>' for t in
     ["python", "syntax", "types", "modules", "classes", "functions", "errors", "io"]) + "</ul>"),
    ("Page moved", '<p>This page has moved. <a href="/reference/">Continue</a></p>'),
]  # fmt: skip


def _boilerplate_page(index: int, rng: random.Random) -> Page:
    """Navigation, login forms and cookie settings with no article: nothing worth training on."""
    title, article = _BOILERPLATE[index % len(_BOILERPLATE)]
    page = _TEMPLATE.format(
        site="Python Reference", title=title, article=article, related="", date="2024-06-01"
    )
    return Page("boilerplate", f"{SITE}/{title.lower().replace(' ', '-')}-{index}.html", page.encode())


_SIMPLE = """<!DOCTYPE html>
<html><head><title>{title}</title></head>
<body><div class="content"><h1>{title}</h1>
{article}
</div></body></html>
"""

_CP1252_TEXT = [
    "The café on the corner has served coffee since 1921, and its owners still keep the original "
    "“price board” above the counter.",
    "A cup cost five cents then; today it costs €3.20, which the owners call “a bargain for the view”.",
    "Visitors often ask about the naïve paintings on the walls — they were made by the founder’s "
    "daughter, who later studied in Paris.",
    "The menu is written in French and English, and the staff will happily explain a crème brûlée "
    "or a pain au chocolat to anyone who asks.",
    "Many regulars have been coming for decades; some of them met their partners at the long table "
    "by the window.",
    "On Sundays there is live music, usually a piano and a violin, and the room fills up before ten o’clock.",
]
_LATIN1_TEXT = [
    "In the small town of Münster the old bakery has reopened after a long renovation, and the "
    "queue in the morning reaches the end of the street.",
    "The new owner, a former engineer from Zürich, kept the stone oven and the recipe book that "
    "came with the building.",
    "She says the secret of the bread is time: the dough rests for a whole night before it goes "
    "into the oven.",
    "Her customers agree that the rye loaf tastes exactly as they remember it from their childhood, "
    "which is the highest praise a baker can hear.",
    "On Saturdays she also sells small cakes with almonds and honey, and they are usually gone before noon.",
    "The town council has promised to put a bench in front of the shop so that older customers can rest.",
]


def _special_pages(rng: random.Random) -> list[Page]:
    """One page per ingestion edge case: legacy charsets, empty body, errors, non-HTML media."""
    cp1252 = _SIMPLE.format(title="The corner café", article="\n".join(f"<p>{p}</p>" for p in _CP1252_TEXT))
    latin1 = _SIMPLE.format(
        title="The bakery in Münster", article="\n".join(f"<p>{p}</p>" for p in _LATIN1_TEXT)
    )
    latin1 = latin1.replace("<head>", '<head><meta charset="iso-8859-1">')
    not_found = _SIMPLE.format(title="404 Not Found", article="<p>The requested page was not found.</p>")
    return [
        Page("cp1252", "https://cafe.example.org/history.html", cp1252.encode("cp1252"),
             "text/html; charset=windows-1252"),
        Page("latin1_meta", "https://bakery.example.de/news.html", latin1.encode("latin-1"), "text/html"),
        Page("empty_body", f"{SITE}/empty.html", b""),
        Page("script_only", "https://app.example.com/dashboard", _SCRIPT_ONLY),
        Page("http_error", f"{SITE}/missing.html", not_found.encode(), status="404 Not Found"),
        Page("redirect", f"{SITE}/old-index.html", b"", status="301 Moved Permanently",
             extra_headers=(("Location", f"{SITE}/reference/"),)),
        Page("image", f"{SITE}/static/logo.png", _png(16, 16, rng), "image/png"),
        Page("pdf", f"{SITE}/static/reference.pdf", _PDF, "application/pdf"),
    ]  # fmt: skip


_SCRIPT_ONLY = (  # a page whose content a script renders: no text without a browser
    b'<!DOCTYPE html><html><head><title>Dashboard</title><script src="/app.js"></script></head>'
    b'<body><div id="app"></div><script>render(document.getElementById("app"));</script></body></html>'
)


def _png(width: int, height: int, rng: random.Random) -> bytes:
    """A valid RGB PNG of random pixels."""
    rows = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R>>endobj\n"
    b"4 0 obj<</Length 44>>stream\nBT /F1 24 Tf 72 700 Td (Demo crawl) Tj ET\nendstream endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)
