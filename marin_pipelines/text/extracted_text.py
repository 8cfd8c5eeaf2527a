"""extracted_text: the main-content text of each HTML page, as light markdown, with its title and language.

Decoding follows what a browser would do, in order: the charset of the HTTP header, then the HTML
``<meta>`` charset, then byte-level detection (uchardet), all remapped to WHATWG encoding names
(``iso-8859-1`` is read as ``windows-1252``, as browsers do).

Main content. The page is parsed once with resiliparse (lexbor, C); our own heuristics then work on
that DOM, touching as few nodes from Python as they can (each node crossing into Python costs
microseconds), and resiliparse's C renderer writes the result:

1. Navigation, ``<aside>`` and ``<footer>`` elements go.
2. Paragraph mass: every ``<p>``, ``<pre>`` and ``<blockquote>`` of at least 20 characters whose text is
   not mostly link text adds its non-link characters to each of its ancestors.
3. The content root is the ancestor that best balances recall (its share of all paragraph mass) against
   precision (paragraph mass over all its text): the highest F-beta, beta = 3, among ancestors holding at
   least 30 % of the mass. Article bodies split over several sibling blocks pull the root up to their
   common parent; a sidebar of teasers lowers its parent's precision and keeps the root below it.
4. Inside the root, elements whose class or id names boilerplate (share bars, related stories,
   comments, newsletter boxes, captions, galleries, bylines, tags...) go, unless they hold a large part
   of the paragraph mass or, for the ambiguous structural names (widget, sidebar, header...), unless they
   read as prose (long, few links).
5. resiliparse renders the root in its main-content mode, which drops what still looks like page
   furniture, and keeps block structure. That mode drops most ``<ul>`` (it takes them for menus): the
   root's lists whose text is not mostly links are rewritten as ``<ol>`` with a marker first, so they
   survive and are written back as bullet lists.
6. Fallback: a page whose paragraph mass is small (a few lines of prose), whose root is mostly not
   paragraphs while the whole page's main content is over four times the paragraph mass (text in bare
   ``<div>``s and ``<br>`` lines), or whose root renders to much less text than its paragraph mass, is
   rendered whole in main-content mode with the same boilerplate pruning and list rescue.

The text is light markdown: ``#`` headings (a leading heading that repeats the title is dropped: the title
is its own field), ``- `` and ``1. `` list items (nested lists indented), paragraphs separated by a blank
line, preformatted blocks kept verbatim. Alt texts, link targets, form fields, noscript fallbacks and
comment sections are not article prose and stay out. On the article-extraction benchmark beside the
project (``bench/extraction.py``, 102 pages) this scores F1 0.963, against 0.950 for trafilatura 2.3.1 and
0.921 for resiliparse's main-content mode alone with these options, at about 7 times trafilatura's speed
(the heuristics were developed on that set: a development score, not a held-out one).

Language identification is offline: resiliparse's ``detect_fast`` compares the text's character
n-gram profile with 101 language profiles and returns the closest with its out-of-place rank (0 is a
perfect match; above 1200 results are "usually false", per its documentation). ``lang_score`` is
``1 - rank / 1200`` clipped to [0, 1]: 1 means the text matches the profile exactly, 0 means no
profile is close. It is a distance-based confidence, not a probability: English prose of a few
paragraphs scores about 0.8, a short snippet about 0.6.
"""

from __future__ import annotations

import codecs
import html as htmllib
import re
import unicodedata
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding, map_encoding_to_html5
from resiliparse.parse.html import HTMLTree, NodeType
from resiliparse.parse.lang import detect_fast

from marin_pipelines.documents import Decision, Document

LANG_RANK_CUTOFF = 1200
_PASSED_ON = ("id", "url", "fetch_time", "source")
_ELEMENT = NodeType.ELEMENT

# --- main-content heuristics -------------------------------------------------------------------------
_JUNK = "nav, aside, footer"  # scripts, styles and the like hold no paragraphs, and the renderer skips them
_PARAGRAPHS = "p, pre, blockquote"
_MIN_PARAGRAPH = 20  # characters; shorter <p> are datelines, labels, empty spacers
_MIN_MASS = 250  # paragraph characters below which the page is rendered whole
_MIN_ROOT_SHARE = 0.3
_BETA2 = 9.0  # beta = 3: recall of the article matters more than a little furniture inside the root
_CHECK_PRECISION = 0.35  # a root whose text is less paragraphs than this is checked against the page
_PRUNE_MAX_SHARE = 0.35  # a boilerplate-named element holding more of the mass than this stays
# class / id words that name page furniture wherever they appear
_STRONG = (
    "share", "sharing", "social", "sociable", "addthis", "related", "recommend", "promo", "newsletter",
    "subscribe", "subscription", "signup", "advert", "sponsor", "cookie", "consent", "gdpr", "popup",
    "modal", "overlay", "paywall", "comment", "disqus", "respond", "breadcrumb", "pagination", "pager",
    "caption", "gallery", "slideshow", "carousel", "lightbox", "byline", "author", "dateline",
    "timestamp", "tags", "taglist", "outbrain", "taboola", "trending", "most-popular", "mostpopular",
    "readmore", "read-more", "more-stories", "rating", "print",
)  # fmt: skip
# words that name furniture usually, but also containers of the article on some sites: these go only
# when they read as furniture (short, or mostly links)
_WEAK = (
    "widget", "sidebar", "rail", "meta", "header", "footer", "nav", "menu", "banner", "toolbar", "tools",
    "hidden", "sr-only", "visually-hidden", "skip", "publish", "posted", "credit", "follow", "donate",
    "login", "bio", "categories", "label",
)  # fmt: skip
_STRONG_RE = re.compile(r"(?:^|[\s_-])(?:" + "|".join(map(re.escape, _STRONG)) + ")", re.I)
_WEAK_RE = re.compile(r"(?:^|[\s_-])(?:" + "|".join(map(re.escape, _WEAK)) + ")", re.I)
# one CSS selector per word and attribute, each a walk of the subtree in C: class names for all words,
# ids only for the words that name whole page regions
_BOILERPLATE = ", ".join(
    [f"[class*={w} i]" for w in _STRONG + _WEAK]
    + [f"[id*={w} i]" for w in ("comment", "respond", "sidebar", "related", "share")]
)
_KEEP_TAGS = frozenset({"html", "body", "main", "article"})
_UL_MARK = "\x1f"  # survives resiliparse's renderer (it strips invisible characters); removed at the end

# --- rendering ---------------------------------------------------------------------------------------
_TAG = re.compile(r"<(/?)(h[1-6]|p|ul|ol|li|pre|br)>")
_SPACES = re.compile(r"[^\S\n]+")  # any run of spaces, no-break and wide spaces included
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORD = re.compile(r"\w+")


class ExtractConfig(BaseModel):
    """How HTML becomes text.

    ``main_content`` keeps the article and drops page furniture (the reason to extract at all; see the
    module docstring); off, the whole page is rendered. ``markdown`` writes headings as ``#`` and list
    items as ``- `` / ``1. ``; off, the same blocks as plain lines. ``alt_texts``, ``links``,
    ``form_fields``, ``noscript`` and ``comments`` are resiliparse's options for what else to render;
    ``skip_elements`` takes CSS selectors of site-specific boilerplate, removed before anything else.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    main_content: bool = Field(
        True, description="keep the article and drop page furniture; False: render the whole page"
    )
    markdown: bool = Field(
        True,
        description="write headings as # and list items as - / 1.; False: the same blocks as plain lines",
    )
    alt_texts: bool = Field(False, description="render images' alt texts (resiliparse)")
    links: bool = Field(False, description="render link targets (resiliparse)")
    form_fields: bool = Field(False, description="render form fields (resiliparse)")
    noscript: bool = Field(False, description="render noscript fallbacks (resiliparse)")
    comments: bool = Field(False, description="render comment sections (resiliparse)")
    skip_elements: tuple[str, ...] = Field(
        (), description="CSS selectors of site-specific boilerplate, removed before anything else"
    )


def extract_text(docs: Iterable[Document], config: ExtractConfig | None = None) -> Iterator[Decision]:
    """One decision per web document: kept with ``title``, ``text``, ``lang``, ``lang_score``."""
    config = config or ExtractConfig()
    for doc in docs:
        base = {key: doc.get(key) for key in _PASSED_ON}
        html = decode_html(doc["html"], doc.get("charset"))
        try:
            title, text = extract_page(html, config)
        except Exception as error:  # HTMLParserException, or a page nothing foresaw: one page, not the run
            detail = f"{type(error).__name__}: {error}"
            yield {**base, "title": "", "detail": detail}, "parse_error"
            continue
        if not text:
            yield {**base, "title": title}, "no_text"
            continue
        lang, lang_score = detect_language(text)
        yield {**base, "title": title, "text": text, "lang": lang, "lang_score": lang_score}, None


def extract_page(html: str, config: ExtractConfig | None = None) -> tuple[str, str]:
    """The title and the main-content text (light markdown) of one HTML page."""
    config = config or ExtractConfig()
    tree = _parse(html, config)
    title = " ".join((tree.title or "").split())
    if tree.body is None:
        return title, ""
    if not config.main_content:
        return title, _render(tree, config, title, main_content=False)
    mass, total = _paragraph_mass(tree.body)
    root = _content_root(mass, total) if total >= _MIN_MASS else None
    if (
        root is not None
        and mass[root] < _CHECK_PRECISION * len(root.text)
        and _whole_page_chars(tree) > 4 * total
    ):
        root = None  # most of the page's prose is not in paragraphs (text in bare <div>s, <br> lines)
    if root is not None:
        _prune(root, mass)
        _rescue_lists(tree, root)
        if root is not tree.body:
            tree.body.replace_children(root)
        text = _render(tree, config, title)
        if len(text) >= 0.6 * total:
            return title, text
        tree = _parse(html, config)  # the root lost the article: start again on the whole page
        mass, total = _paragraph_mass(tree.body)
    _prune(tree.body, mass)
    _rescue_lists(tree, tree.body)
    return title, _render(tree, config, title)


def _whole_page_chars(tree: HTMLTree) -> int:
    return len(extract_plain_text(tree, preserve_formatting=False, main_content=True, alt_texts=False))


def _parse(html: str, config: ExtractConfig) -> HTMLTree:
    tree = HTMLTree.parse(html)
    if tree.body is not None:
        selectors = ", ".join((_JUNK, *config.skip_elements)) if config.main_content else None
        selectors = selectors or ", ".join(config.skip_elements)
        if selectors:
            for node in tree.body.query_selector_all(selectors).values():  # .values(): iteration is O(n^2)
                node.decompose()
    return tree


def _link_chars(node) -> int:
    if node.query_selector("a") is None:
        return 0
    return sum(len(a.text) for a in node.query_selector_all("a").values())


def _paragraph_mass(body) -> tuple[dict, int]:
    """Non-link paragraph characters under each element, and in all."""
    mass: dict = {}
    parent_of: dict = {}
    total = 0
    for p in body.query_selector_all(_PARAGRAPHS).values():
        n = len(p.text.strip())
        if n < _MIN_PARAGRAPH:
            continue
        links = _link_chars(p)
        if links > n / 2:
            continue
        weight = n - links
        total += weight
        mass[p] = mass.get(p, 0) + weight
        node = p
        while True:  # up the ancestors; each is looked up from Python once per page
            parent = parent_of.get(node, 0)
            if parent == 0:
                parent = node.parent
                parent_of[node] = parent = parent if parent is not None and parent.type == _ELEMENT else None
            if parent is None:
                break
            mass[parent] = mass.get(parent, 0) + weight
            node = parent
    return mass, total


def _content_root(mass: dict, total: int):
    best, best_score = None, 0.0
    for node, held in mass.items():
        if node.tag == "html":
            continue  # the root is rendered as the body's only child: it must be inside the body
        recall = held / total
        if recall < _MIN_ROOT_SHARE:
            continue
        precision = held / max(len(node.text), 1)
        score = (1 + _BETA2) * precision * recall / (_BETA2 * precision + recall)
        if score > best_score:
            best, best_score = node, score
    return best


def _prune(root, mass: dict) -> None:
    """Remove boilerplate-named elements under ``root`` (see the module docstring, step 4)."""
    limit = _PRUNE_MAX_SHARE * mass.get(root, 0)
    for node in root.query_selector_all(_BOILERPLATE).values():
        if node.tag in _KEEP_TAGS or mass.get(node, 0) > limit:
            continue
        names = f"{node.class_name or ''} {node.id or ''}"
        if not _STRONG_RE.search(names):
            if not _WEAK_RE.search(names):
                continue  # the selector matched inside a word ("unshared"); the regex wants a word start
            text = len(node.text.strip())
            if text >= 200 and _link_chars(node) < 0.3 * text:
                continue  # reads as prose: an ambiguous name on the article's own container
        node.decompose()


def _rescue_lists(tree: HTMLTree, root) -> None:
    """Rewrite content ``<ul>`` as marked ``<ol>``: resiliparse's main-content mode drops every ``<ul>``."""
    for ul in root.query_selector_all("ul").values():
        n = len(ul.text.strip())
        if not n or _link_chars(ul) > n / 2:
            continue  # menus and link lists stay lists of links, and resiliparse drops them
        ol = tree.create_element("ol")
        ol.append(*ul.child_nodes.values())
        ul.replace_with(ol)
        first = ol.query_selector("li")
        if first is not None:
            first.prepend(tree.create_text_node(_UL_MARK))


def _render(tree: HTMLTree, config: ExtractConfig, title: str, main_content: bool = True) -> str:
    minimal = extract_plain_text(
        tree,
        preserve_formatting="minimal_html",
        main_content=main_content,
        list_bullets=True,
        alt_texts=config.alt_texts,
        links=config.links,
        form_fields=config.form_fields,
        noscript=config.noscript,
        comments=config.comments,
    )
    return to_markdown(minimal, title, config.markdown)


def to_markdown(minimal_html: str, title: str = "", markdown: bool = True) -> str:
    """resiliparse's ``minimal_html`` rendering as light markdown (or plain blocks)."""
    blocks: list[tuple[str, str]] = []  # (kind, text); kind is "li" for list items
    buffer: list[str] = []
    lists: list[list] = []  # [ordered, items so far] per open list
    item: list = []  # the open list item, until its first line is written: [depth, list entry]
    state = {"pre": False, "heading": 0}

    def flush() -> None:
        raw = "".join(buffer)
        buffer.clear()
        if item and _UL_MARK in raw:
            item[1][0] = False
            raw = raw.replace(_UL_MARK, "")
        if state["pre"]:
            text = raw.strip("\n")
        else:
            text = "\n".join(line for line in (_SPACES.sub(" ", x).strip() for x in raw.split("\n")) if line)
        if not text:
            return
        if item:
            depth, entry = item
            marker = f"{entry[1]}. " if entry[0] else "- "
            indent = "  " * (depth - 1)
            text = indent + (marker if markdown else "") + text.replace("\n", "\n" + indent + "  ")
            item.clear()
            blocks.append(("li", text))
        elif lists:
            blocks.append(("li", "  " * len(lists) + text))
        else:
            if state["heading"] and markdown:
                text = "#" * state["heading"] + " " + text.replace("\n", " ")
            blocks.append(("h" if state["heading"] else "p", text))

    pos = 0
    for match in _TAG.finditer(minimal_html):
        if match.start() > pos:
            buffer.append(htmllib.unescape(minimal_html[pos : match.start()]))
        pos = match.end()
        closing, tag = match.group(1) == "/", match.group(2)
        if tag == "br":
            buffer.append("\n")
            continue
        flush()
        if tag == "pre":
            state["pre"] = not closing
        elif tag in ("ul", "ol"):
            item.clear()
            if closing:
                if lists:
                    lists.pop()
            else:
                lists.append([tag == "ol", 0])
        elif tag == "li":
            item.clear()
            if not closing and lists:
                lists[-1][1] += 1
                item.extend((len(lists), lists[-1]))
        elif tag[0] == "h":
            state["heading"] = 0 if closing else int(tag[1])
    if pos < len(minimal_html):
        buffer.append(htmllib.unescape(minimal_html[pos:]))
    flush()
    blocks = _drop_title_heading(blocks, title)
    out: list[str] = []
    for i, (kind, text) in enumerate(blocks):
        if i:
            out.append("\n" if kind == "li" and blocks[i - 1][0] == "li" else "\n\n")
        out.append(text)
    return _normalise("".join(out))


def _drop_title_heading(blocks: list[tuple[str, str]], title: str) -> list[tuple[str, str]]:
    """Drop a heading near the top that repeats the page title (the title is its own field)."""
    title_words = _WORD.findall(title.lower())
    if not title_words:
        return blocks
    title_text = " ".join(title_words)
    for i, (kind, text) in enumerate(blocks[:3]):
        if kind != "h":
            continue
        words = " ".join(_WORD.findall(text.lower()))
        if words and len(words) >= 0.4 * len(title_text) and words in title_text:
            return blocks[:i] + blocks[i + 1 :]
    return blocks


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
    """NFC, no control characters or soft hyphens, no-break spaces as spaces, at most one blank line
    between blocks."""
    text = _CONTROL.sub("", unicodedata.normalize("NFC", text)).replace("\xa0", " ").replace("\xad", "")
    lines = [line.rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
