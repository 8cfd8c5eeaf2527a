import gzip

import pytest
from pydantic import ValidationError

from marin_pipelines.text.extracted_text import (
    ExtractConfig,
    decode_html,
    detect_language,
    extract_page,
    extract_text,
    to_markdown,
)

FIELDS = {"id", "url", "fetch_time", "source", "title", "text", "lang", "lang_score"}
ARTICLE = """<html><head><title>  A   page about bread </title></head><body>
<nav><a href="/">Home</a> <a href="/login">Log in</a> <a href="/shop">Shop</a></nav>
<article><h1>Bread at home</h1>
<p>Baking bread at home takes time, but the steps are simple and the result is worth the wait.</p>
<p>Mix flour, water, salt and yeast, then let the dough rest overnight so that the flavour can develop.</p>
<ol><li>Use strong flour.</li><li>Keep the dough warm.</li></ol>
<p>In the morning, shape the loaf, let it rise again and bake it in a very hot oven for forty minutes.</p>
</article>
<footer>Copyright 2024. Privacy policy. Terms of use.</footer></body></html>"""


def _doc(html: bytes | str, charset: str | None = None, **extra) -> dict:
    data = html.encode() if isinstance(html, str) else html
    return {
        "id": "d1",
        "url": "https://example.com/",
        "fetch_time": "2024-01-01T00:00:00Z",
        "source": "s.warc.gz",
        "content_type": "text/html",
        "charset": charset,
        "html": data,
        **extra,
    }


def _page(shared_data, name: str) -> bytes:
    return gzip.decompress((shared_data / "web-pages" / f"{name}.html.gz").read_bytes())


LISTS = """<html><head><title>Lists | Bakery</title></head><body>
<nav><ul><li><a href="/a">Home</a></li><li><a href="/b">About us</a></li></ul></nav>
<main><h1>Lists</h1>
<p>Some prose that is long enough to be a paragraph of the article, with commas, and more words.</p>
<h2>What you need</h2>
<ul><li>Strong flour, a good deal of it</li><li>Water<ul><li>warm</li><li>not hot</li></ul></li></ul>
<p>Another paragraph of the article that is long enough to count as prose for the heuristics.</p>
<pre>x = 1
    y = 2</pre>
<div class="share-buttons"><a href="/t">Twitter</a> <a href="/f">Facebook</a></div>
<div class="related-posts"><h3>Related</h3><p><a href="/r">Another story you may like</a></p></div>
</main></body></html>"""


def test_main_content_as_light_markdown():
    doc, reason = next(extract_text([_doc(ARTICLE)]))
    assert reason is None and set(doc) == FIELDS
    assert doc["title"] == "A page about bread"
    assert doc["text"].startswith("# Bread at home\n\nBaking bread at home takes time")
    assert "\n\nMix flour, water" in doc["text"]  # a blank line between blocks
    assert "\n\n1. Use strong flour.\n2. Keep the dough warm.\n\n" in doc["text"]
    assert "Log in" not in doc["text"] and "Privacy policy" not in doc["text"]
    assert (doc["id"], doc["url"], doc["fetch_time"], doc["source"]) == (
        "d1",
        "https://example.com/",
        "2024-01-01T00:00:00Z",
        "s.warc.gz",
    )
    assert doc["lang"] == "en" and 0.5 < doc["lang_score"] <= 1.0


def test_unordered_lists_survive_and_furniture_goes():
    title, text = extract_page(LISTS)
    assert title == "Lists | Bakery"
    assert text == (
        "Some prose that is long enough to be a paragraph of the article, with commas, and more words.\n\n"
        "## What you need\n\n"
        "- Strong flour, a good deal of it\n- Water\n  - warm\n  - not hot\n\n"
        "Another paragraph of the article that is long enough to count as prose for the heuristics.\n\n"
        "x = 1\n    y = 2"
    )  # the heading repeating the title is dropped; menus, share bars and related links are not prose


def test_plain_blocks_without_markdown():
    _, text = extract_page(LISTS, ExtractConfig(markdown=False))
    assert "\n\nWhat you need\n\nStrong flour, a good deal of it\nWater\n  warm\n  not hot\n\n" in text


def test_to_markdown_renders_resiliparse_minimal_html():
    minimal = "<h2>A &amp; B</h2>\n\n<p>One<br>\ntwo</p>\n<ol>\n  <li>x</li>\n  <li>y</li>\n</ol>\nloose text"
    assert to_markdown(minimal) == "## A & B\n\nOne\ntwo\n\n1. x\n2. y\n\nloose text"
    assert to_markdown("<h1>Bread at home</h1>\n<p>Text.</p>", title="Bread at home | Site") == "Text."
    assert to_markdown("<h1>Home</h1>\n<p>Text.</p>", title="Bread at home | Site") == "# Home\n\nText."


def test_whole_page_when_main_content_is_off():
    doc, _ = next(extract_text([_doc(ARTICLE)], ExtractConfig(main_content=False)))
    assert "Log in" in doc["text"] and "Privacy policy" in doc["text"]


def test_skip_elements():
    _, text = extract_page(ARTICLE, ExtractConfig(skip_elements=("ol",)))
    assert "strong flour" not in text and "Mix flour" in text


def test_real_pages_in_several_languages(shared_data):
    cases = {
        "theguardian.com.academics": ("en", "Thousands of academic staff at British universities"),
        "spiegel.de.albtraum": ("de", "Der Reporter Claas Relotius hat den SPIEGEL"),
        "laviedesidees.fr.evaluation": ("fr", "L’évaluation, et la place qu’y occupe la bibliométrie"),
        "stackoverflow.com.rust": ("en", "Rust has been Stack Overflow’s most loved language"),
    }
    docs = [_doc(_page(shared_data, name), id=name) for name in cases]
    for doc, reason in extract_text(docs):
        lang, phrase = cases[doc["id"]]
        assert reason is None
        assert doc["lang"] == lang and doc["lang_score"] > 0.7
        assert phrase in doc["text"]
        assert doc["title"]
        assert "\n\n\n" not in doc["text"] and "\xa0" not in doc["text"]
    guardian = next(extract_text([_doc(_page(shared_data, "theguardian.com.academics"))]))[0]
    assert guardian["title"].startswith("Thousands of UK academics")
    assert "Sign up" not in guardian["text"]


def test_a_page_without_main_text_is_removed(shared_data):
    doc, reason = next(extract_text([_doc(_page(shared_data, "changelog.blog.zwischenbilanz"))]))
    assert reason == "no_text" and "text" not in doc
    doc, reason = next(extract_text([_doc("<html><body><nav><a href='/'>Home</a></nav></body></html>")]))
    assert reason == "no_text"


def test_charset_from_header_meta_and_detection():
    text = "<html><body><p>Caf\u00e9 cr\u00e8me for \u20ac3 \u2014 \u201cna\u00efve\u201d.</p></body></html>"
    assert decode_html(text.encode("cp1252"), "windows-1252") == text
    assert decode_html(text.encode("cp1252"), "ISO-8859-1") == text  # read as windows-1252, as browsers do
    assert decode_html(text.encode("utf-8"), None) == text
    assert decode_html(text.encode("utf-8"), "no-such-charset") == text  # bad label: detection
    meta = text.replace("<html>", '<html><head><meta charset="iso-8859-1"></head>').replace("\u20ac", "EUR")
    meta = meta.replace("\u2014", "-").replace("\u201c", '"').replace("\u201d", '"')
    assert decode_html(meta.encode("latin-1"), None) == meta
    assert decode_html(b"\xff\xfe broken \x80 bytes", "utf-8")  # never raises


def test_language_score_is_bounded_and_ranks_prose_above_noise():
    prose = (
        "The committee met on Tuesday to discuss the budget for the coming year, and most members "
        "agreed that the library should receive more money for books and staff."
    )
    noise = "xq zvk pwo ltr qqa mnb vcx zzr kkp wqe"
    assert detect_language(prose)[0] == "en"
    assert 0.0 <= detect_language(noise)[1] < detect_language(prose)[1] <= 1.0


def test_demo_crawl_charset_pages(demo_docs):
    by_url = {doc["url"]: (doc, reason) for doc, reason in extract_text(demo_docs)}
    cafe, reason = by_url["https://cafe.example.org/history.html"]
    assert (
        reason is None
        and "café" in cafe["text"]
        and "€3.20" in cafe["text"]
        and "“price board”" in cafe["text"]
    )
    bakery, reason = by_url["https://bakery.example.de/news.html"]
    assert reason is None and "Münster" in bakery["text"] and "Zürich" in bakery["text"]
    assert bakery["title"] == "The bakery in Münster"


def test_demo_crawl_extraction(demo_docs):
    decisions = list(extract_text(demo_docs))
    assert len(decisions) == len(demo_docs)
    kept = [doc for doc, reason in decisions if reason is None]
    assert len(kept) >= 0.95 * len(decisions)
    assert sum(doc["lang"] == "en" for doc in kept) >= 0.8 * len(kept)
    reference = next(doc for doc in kept if doc["url"].endswith("/reference/assert.html"))
    assert reference["title"].startswith('The "assert" statement')
    assert reference["text"].startswith("Assert statements are a convenient way")  # the title is not repeated
    assert "\n\nif __debug__:\n    if not expression: raise AssertionError\n\n" in reference["text"]
    assert "Log in" not in reference["text"] and "cookies" not in reference["text"]


def test_config_is_validated():
    with pytest.raises(ValidationError, match="main_content"):
        ExtractConfig(main_content="sometimes")
    with pytest.raises(ValidationError, match="unknown"):
        ExtractConfig(unknown=True)
