"""extracted_text: the main-content text of each HTML page, with its title and language.

Decoding follows what a browser would do, in order: the charset of the HTTP header, then the HTML
``<meta>`` charset, then byte-level detection (uchardet), all remapped to WHATWG encoding names
(``iso-8859-1`` is read as ``windows-1252``, as browsers do). Extraction is resiliparse's main-content
mode: navigation, headers, footers, sidebars and cookie banners are dropped, and the text keeps its
block structure (a blank line between blocks, ``•`` before list items) because the quality rules and
paragraph deduplication downstream work on lines and paragraphs.

Language identification is offline: resiliparse's ``detect_fast`` compares the text's character
n-gram profile with 101 language profiles and returns the closest with its out-of-place rank (0 is a
perfect match; above 1200 results are "usually false", per its documentation). ``lang_score`` is
``1 - rank / 1200`` clipped to [0, 1]: 1 means the text matches the profile exactly, 0 means no
profile is close. It is a distance-based confidence, not a probability: English prose of a few
paragraphs scores about 0.8, a short snippet about 0.6.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding, map_encoding_to_html5
from resiliparse.parse.html import HTMLParserException, HTMLTree
from resiliparse.parse.lang import detect_fast

from marin_pipelines.documents import Decision, Document

LANG_RANK_CUTOFF = 1200
_BLANK_RUNS = re.compile(r"\n{3,}")
_PASSED_ON = ("id", "url", "fetch_time", "source")


class ExtractConfig(BaseModel):
    """How HTML becomes text.

    The fields are resiliparse's ``extract_plain_text`` options. ``main_content`` drops page furniture
    (the reason to extract at all; note that it also drops ``<ul>`` lists, which it takes for menus);
    ``list_bullets`` keeps the items of the lists that remain visible; alt texts, link targets, form
    fields, noscript fallbacks and comment sections are not article prose and stay out.
    ``skip_elements`` takes CSS selectors of site-specific boilerplate.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    main_content: bool = True
    list_bullets: bool = True
    alt_texts: bool = False
    links: bool = False
    form_fields: bool = False
    noscript: bool = False
    comments: bool = False
    skip_elements: tuple[str, ...] = ()


def extract_text(docs: Iterable[Document], config: ExtractConfig | None = None) -> Iterator[Decision]:
    """One decision per web document: kept with ``title``, ``text``, ``lang``, ``lang_score``."""
    config = config or ExtractConfig()
    options = {**config.model_dump(), "skip_elements": list(config.skip_elements) or None}
    for doc in docs:
        base = {key: doc.get(key) for key in _PASSED_ON}
        html = decode_html(doc["html"], doc.get("charset"))
        try:
            tree = HTMLTree.parse(html)
        except HTMLParserException as error:
            yield {**base, "title": "", "detail": str(error)}, "parse_error"
            continue
        title = " ".join((tree.title or "").split())
        text = _normalise(extract_plain_text(tree, preserve_formatting=True, **options))
        if not text:
            yield {**base, "title": title}, "no_text"
            continue
        lang, lang_score = detect_language(text)
        yield {**base, "title": title, "text": text, "lang": lang, "lang_score": lang_score}, None


def decode_html(data: bytes, charset: str | None) -> str:
    """HTML bytes as text: header charset, else ``<meta>`` charset, else detection; never fails."""
    encoding = None
    if charset:
        try:
            encoding = map_encoding_to_html5(codecs.lookup(charset).name)
        except LookupError:  # an unknown label in the header: fall through to meta / detection
            encoding = None
    encoding = encoding or detect_encoding(data, from_html_meta=True)
    return bytes_to_str(data, encoding, errors="replace")


def detect_language(text: str) -> tuple[str, float]:
    """Language code and ``lang_score`` (see the module docstring) of a text."""
    lang, rank = detect_fast(text, cutoff=LANG_RANK_CUTOFF)
    if lang == "unknown":
        return lang, 0.0
    return lang, round(max(0.0, 1.0 - rank / LANG_RANK_CUTOFF), 4)


def _normalise(text: str) -> str:
    """NFC, no-break spaces as spaces, no trailing blanks, at most one blank line between blocks."""
    text = unicodedata.normalize("NFC", text).replace("\xa0", " ")
    lines = [line.rstrip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()
