"""filtered_text: heuristic quality rules from Gopher, C4 and FineWeb, re-implemented without NLTK.

The rules and their default thresholds are those of datatrove's ``LanguageFilter``,
``GopherRepetitionFilter``, ``GopherQualityFilter``, ``C4QualityFilter`` and ``FineWebQualityFilter``,
applied in FineWeb's order (language, repetition, quality, C4, FineWeb); the first rule that fires
names the removal, as ``family:rule`` (``gopher_quality:min_words``, ``c4:curly_bracket``, ...).
Each family can be disabled with ``enabled=False`` and each threshold with ``None``.

Agreement with datatrove (0.10) is tested on real pages (``tests/text/test_filter_agreement.py``: our
extracted text of the 109 multilingual test pages and of the 102 benchmark articles, and the benchmark's
hand-checked article bodies, 311 texts). Measured agreement of the keep / remove decision, per family, every
rule at its default: Gopher quality 0.932 (1.000 with the alphabetic-share rule off on both sides), Gopher
repetition 1.000, C4 1.000, FineWeb 0.987 (1.000 with ``list_ratio`` off on both sides). Where the
definitions differ, on purpose:

- Tokens come from a regular expression instead of spaCy / NLTK: runs of word characters (with inner
  apostrophes and periods, as in "it's" or "3.14"), and runs of one punctuation character as their own
  tokens, as spaCy splits them. Gopher quality counts them as datatrove does: words (tokens with a word
  character) for the word count and mean length, all tokens for the hash and ellipsis ratios,
  distinct case-sensitive stop words. spaCy splits a few more things ("do n't", "well - known").
- Gopher's alphabetic share is over words, as the Gopher paper defines it, not over all tokens: datatrove's
  tokenizer makes every comma and period a "word" without letters, so 16 of the benchmark's 102
  hand-checked article bodies (news prose) fall under its 80 % threshold, 2 when punctuation is not
  counted; and nearly every page of technical documentation would go. This is all of the Gopher quality
  disagreements above.
- Gopher's hash ratio does not count markdown heading markers (``## Title``): our extraction writes
  headings that way, trafilatura's text, on which the thresholds were set, has no markers.
- Gopher repetition and FineWeb's ``list_ratio`` (``new_line_ratio``) work on the non-empty lines. Our
  extraction puts a blank line between blocks (trafilatura, which FineWeb used, does not); counting blank
  lines as newlines would double the ratio (all of the FineWeb disagreements above: two Japanese
  articles of short paragraphs). Gopher quality's bullet and ellipsis line shares count blank lines, as
  datatrove does. Word n-gram fractions (Gopher repetition) are measured in
  word characters, and an n-gram that occurs once is not "repeated" (datatrove lets a single 2-gram of a
  4-word text count as 50 %).
- C4 counts sentences with a regular expression that follows spaCy's sentencizer (a boundary after a
  sentence-terminal character, not after ``...`` or a common abbreviation) instead of running a
  tokenizer, strips a line again after removing citations, and keeps the blank line between the blocks
  it keeps, so paragraphs survive into later stages.
- The language score is resiliparse's (see extracted_text), not fastText's probability, so its
  threshold is our own; FineWeb's ``list_ratio`` is named ``new_line_ratio`` after its parameter.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import Decision, Document

Share = Annotated[float | None, Field(ge=0, le=1)]  # a threshold on a fraction of a document; None: rule off

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
# Unicode's Sentence_Terminal characters (the set spaCy's sentencizer and datatrove's FineWeb rule use),
# as code point ranges
_TERMINAL_RANGES = (
    (0x21, 0x21), (0x2E, 0x2E), (0x3F, 0x3F), (0x589, 0x589), (0x61D, 0x61F), (0x6D4, 0x6D4),
    (0x700, 0x702), (0x7F9, 0x7F9), (0x837, 0x837), (0x839, 0x839), (0x83D, 0x83E), (0x964, 0x965),
    (0x104A, 0x104B), (0x1362, 0x1362), (0x1367, 0x1368), (0x166E, 0x166E), (0x1735, 0x1736),
    (0x17D4, 0x17D5), (0x1803, 0x1803), (0x1809, 0x1809), (0x1944, 0x1945), (0x1AA8, 0x1AAB),
    (0x1B5A, 0x1B5B), (0x1B5E, 0x1B5F), (0x1B7D, 0x1B7E), (0x1C3B, 0x1C3C), (0x1C7E, 0x1C7F),
    (0x203C, 0x203D), (0x2047, 0x2049), (0x2E2E, 0x2E2E), (0x2E3C, 0x2E3C), (0x2E53, 0x2E54),
    (0x3002, 0x3002), (0xA4FF, 0xA4FF), (0xA60E, 0xA60F), (0xA6F3, 0xA6F3), (0xA6F7, 0xA6F7),
    (0xA876, 0xA877), (0xA8CE, 0xA8CF), (0xA92F, 0xA92F), (0xA9C8, 0xA9C9), (0xAA5D, 0xAA5F),
    (0xAAF0, 0xAAF1), (0xABEB, 0xABEB), (0xFE52, 0xFE52), (0xFE56, 0xFE57), (0xFF01, 0xFF01),
    (0xFF0E, 0xFF0E), (0xFF1F, 0xFF1F), (0xFF61, 0xFF61),
)  # fmt: skip
_TERMINALS = "".join(chr(c) for start, end in _TERMINAL_RANGES for c in range(start, end + 1))
_TERMINAL_SET = frozenset(_TERMINALS)
# a sentence ends at a terminal that is its own token (not "..", not the period of "Dr." or "e.g.")
# and is followed, after closing quotes or brackets, by more text
_ABBREVIATION = (
    r"(?<!\b[A-Za-z])(?<!\bMr)(?<!\bMs)(?<!\bDr)(?<!\bSt)(?<!\bJr)(?<!\bSr)(?<!\bvs)(?<!\bMrs)(?<!\bNo)"
)
_TERMINAL_CLASS = "[" + re.escape(_TERMINALS) + "]"
_SENTENCE_BREAK = re.compile(
    rf"(?<!\.){_ABBREVIATION}{_TERMINAL_CLASS}(?!\.)[\"'”’)\]]*\s+(?=[^\s{re.escape(_TERMINALS)}])"
    r"|(?<=[a-zß-ÿ!?])[.!?](?=[A-ZÀ-Þ])"  # "end.Next": spaCy splits a period between lower and upper case
)
_C4_END_PUNCTUATION = (".", "?", "!", '"', "'")
# a word (with inner apostrophes, periods, soft hyphens; "12,000" and "4–11" whole) or a punctuation run
_TOKEN = re.compile(r"\w+(?:(?:['’.\xad]|(?<=\d)[,–/-](?=\d))\w+)*|([^\w\s])\1*")
_HEADING_MARKER = re.compile(r"^ {0,3}(#{1,6})(?= )", re.M)
_POLICY_PHRASES = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_BULLETS = ("•", "-")  # datatrove's; our markdown list items start with "- "
_ELLIPSES = ("...", "…")


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="run this rule family; False: it removes nothing")


class LanguageRule(_Rule):
    """Keep documents in ``languages`` whose ``lang_score`` (see extracted_text) is at least ``min_score``.

    0.5 is an out-of-place rank of 600: English prose scores 0.65-0.85, short snippets 0.5-0.6.
    """

    languages: tuple[str, ...] = Field(
        ("en",),
        min_length=1,
        description="languages kept: a document's lang (see extracted_text) must be one of them",
    )
    min_score: float = Field(
        0.5, ge=0.0, le=1.0, description="least lang_score kept (resiliparse's score, 0-1)"
    )


class GopherQualityRule(_Rule):
    """Gopher (Rae et al. 2021, appendix A) document statistics; datatrove's defaults."""

    min_words: int | None = Field(50, ge=0, description="fewest words; None: no minimum")
    max_words: int | None = Field(100_000, ge=1, description="most words; None: no maximum")
    min_mean_word_length: float | None = Field(
        3, ge=0, description="least mean word length, in characters; None: off"
    )
    max_mean_word_length: float | None = Field(
        10, ge=0, description="greatest mean word length, in characters; None: off"
    )
    max_symbol_word_ratio: float | None = Field(
        0.1, ge=0, description="most hashes (heading markers aside), and most ellipses, per token; None: off"
    )
    max_bullet_lines: Share = Field(
        0.9, description="greatest share of lines that start with a bullet (• or -); None: off"
    )
    max_ellipsis_lines: Share = Field(
        0.3, description="greatest share of lines that end in an ellipsis; None: off"
    )
    min_alpha_words: Share = Field(0.8, description="least share of words with a letter; None: off")
    min_stop_words: int | None = Field(
        2, ge=0, description="fewest distinct stop_words among the tokens; None: off"
    )
    # a tuple, not a set: a set's order changes between processes, and with it the config's version hash
    stop_words: tuple[str, ...] = Field(
        ("the", "be", "to", "of", "and", "that", "have", "with"),
        description="the stop words min_stop_words counts (case-sensitive)",
    )


class GopherRepetitionRule(_Rule):
    """Gopher repetition: duplicated lines / paragraphs and word n-grams (Gopher table A1)."""

    dup_line_frac: Share = Field(
        0.3, description="greatest share of non-empty lines that repeat an earlier line; None: off"
    )
    dup_para_frac: Share = Field(
        0.3, description="greatest share of paragraphs that repeat an earlier paragraph; None: off"
    )
    dup_line_char_frac: Share = Field(
        0.2, description="greatest share of the text's characters in repeated lines; None: off"
    )
    dup_para_char_frac: Share = Field(
        0.2, description="greatest share of the text's characters in repeated paragraphs; None: off"
    )
    top_ngram_char_frac: dict[int, float] = Field(
        {2: 0.2, 3: 0.18, 4: 0.16},
        description="n: greatest share of word characters covered by the most frequent repeated word n-gram",
    )
    dup_ngram_char_frac: dict[int, float] = Field(
        {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n: greatest share of word characters covered by word n-grams that repeat an earlier one",
    )


class C4Rule(_Rule):
    """C4 (Raffel et al. 2020): drop lines, then whole documents; datatrove ``C4QualityFilter`` defaults.

    Kept lines end in terminal punctuation, have ``min_words_per_line`` words, no word longer than
    ``max_word_length``, and mention neither javascript nor a cookie / terms policy. A document is
    removed for "lorem ipsum" or a curly bracket in a kept line, or fewer than ``min_sentences``.
    FineWeb turned ``filter_no_terminal_punct`` off (hard-wrapped text such as docstrings loses
    nearly all its lines to it).
    """

    filter_no_terminal_punct: bool = Field(
        True, description="drop lines that do not end in terminal punctuation (. ? ! \" ') or that end in ..."
    )
    min_words_per_line: int | None = Field(3, ge=1, description="drop lines of fewer words; None: off")
    max_word_length: int | None = Field(
        1000, ge=1, description="drop lines with a longer word, in characters; None: off"
    )
    remove_citations: bool = Field(
        True, description="strip citation marks ([1], [edit], [citation needed]) from lines"
    )
    filter_javascript: bool = Field(True, description="drop lines that mention javascript")
    filter_policy: bool = Field(
        True, description="drop lines that mention a cookie, privacy or terms-of-use policy"
    )
    filter_lorem_ipsum: bool = Field(True, description='remove documents with "lorem ipsum" in a kept line')
    filter_curly_bracket: bool = Field(
        True, description="remove documents with a curly bracket in a kept line"
    )
    min_sentences: int | None = Field(
        5, ge=1, description="remove documents whose kept lines have fewer sentences; None: off"
    )


class FineWebRule(_Rule):
    """FineWeb's own three rules (Penedo et al. 2024) plus its list-page rule; datatrove defaults."""

    line_punct_thr: Share = Field(
        0.12, description="least share of non-empty lines that end in a sentence terminal; None: off"
    )
    line_punct_exclude_zero: bool = Field(
        False, description="spare documents where no line ends in a sentence terminal from line_punct_thr"
    )
    short_line_thr: Share = Field(
        0.67,
        description="greatest share of non-empty lines of at most short_line_length characters; None: off",
    )
    short_line_length: int = Field(30, ge=1, description="longest line, in characters, that counts as short")
    char_duplicates_ratio: Share = Field(
        0.01, description="greatest share of characters (newlines aside) in repeated lines; None: off"
    )
    new_line_ratio: float | None = Field(
        0.3,
        ge=0,
        description="most line breaks (between non-empty lines) per token, FineWeb's list_ratio; None: off",
    )


class FilterConfig(BaseModel):
    """All rule families, in the order they run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    language: LanguageRule = Field(LanguageRule(), description="language rule, run first")
    gopher_repetition: GopherRepetitionRule = Field(
        GopherRepetitionRule(), description="Gopher repetition rules, run second"
    )
    gopher_quality: GopherQualityRule = Field(
        GopherQualityRule(), description="Gopher quality rules, run third"
    )
    c4: C4Rule = Field(
        C4Rule(), description="C4 line and document rules, run fourth; they may rewrite the text"
    )
    fineweb: FineWebRule = Field(FineWebRule(), description="FineWeb rules, run last")


def filter_text(docs: Iterable[Document], config: FilterConfig | None = None) -> Iterator[Decision]:
    """One decision per document; C4's line removal rewrites the ``text`` of kept documents."""
    config = config or FilterConfig()
    for doc in docs:
        text, reason = apply_rules(doc, config)
        yield ({**doc, "text": text} if reason is None else doc), reason


def apply_rules(doc: Document, config: FilterConfig) -> tuple[str, str | None]:
    """The (possibly C4-rewritten) text of a document and the first rule that removes it, if any."""
    text = doc["text"]
    if config.language.enabled and not (
        doc.get("lang") in config.language.languages
        and (doc.get("lang_score") or 0.0) >= config.language.min_score
    ):
        return text, "language"
    tokens = words(text)
    if config.gopher_repetition.enabled and (
        reason := gopher_repetition(text, tokens, config.gopher_repetition)
    ):
        return text, f"gopher_repetition:{reason}"
    if config.gopher_quality.enabled and (
        reason := gopher_quality(text, gopher_tokens(text), config.gopher_quality)
    ):
        return text, f"gopher_quality:{reason}"
    if config.c4.enabled:
        text, reason = c4_lines(text, config.c4)
        if reason:
            return doc["text"], f"c4:{reason}"
    if config.fineweb.enabled and (reason := fineweb(text, config.fineweb)):
        return text, f"fineweb:{reason}"
    return text, None


def words(text: str) -> list[str]:
    """Whitespace tokens without surrounding ASCII punctuation; pure-punctuation tokens are dropped."""
    return [word for word in (token.strip(string.punctuation) for token in text.split()) if word]


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def gopher_tokens(text: str) -> list[str]:
    """Words and punctuation as separate tokens, as datatrove's word tokenizers return them."""
    return [match.group() for match in _TOKEN.finditer(text)]


def gopher_quality(text: str, tokens: list[str], rule: GopherQualityRule) -> str | None:
    """Name of the first Gopher quality statistic out of range, or None (``tokens``: ``gopher_tokens``)."""
    words = [token for token in tokens if token[0].isalnum() or token[0] == "_"]
    n_words = len(words)
    if rule.min_words is not None and n_words < rule.min_words:
        return "min_words"
    if rule.max_words is not None and n_words > rule.max_words:
        return "max_words"
    if n_words == 0:
        return None
    mean_length = sum(map(len, words)) / n_words
    if rule.min_mean_word_length is not None and mean_length < rule.min_mean_word_length:
        return "min_mean_word_length"
    if rule.max_mean_word_length is not None and mean_length > rule.max_mean_word_length:
        return "max_mean_word_length"
    n_tokens = len(tokens)
    if rule.max_symbol_word_ratio is not None:
        hashes = text.count("#") - sum(len(marker) for marker in _HEADING_MARKER.findall(text))
        if hashes / n_tokens > rule.max_symbol_word_ratio:
            return "hash_ratio"
        if sum(text.count(e) for e in _ELLIPSES) / n_tokens > rule.max_symbol_word_ratio:
            return "ellipsis_ratio"
    lines = text.splitlines()  # blank lines included, as datatrove counts them
    if (
        rule.max_bullet_lines is not None
        and _share(lines, lambda s: s.lstrip().startswith(_BULLETS)) > rule.max_bullet_lines
    ):
        return "bullet_lines"
    if (
        rule.max_ellipsis_lines is not None
        and _share(lines, lambda s: s.rstrip().endswith(_ELLIPSES)) > rule.max_ellipsis_lines
    ):
        return "ellipsis_lines"
    if (
        rule.min_alpha_words is not None
        and _share(words, lambda w: any(map(str.isalpha, w))) < rule.min_alpha_words
    ):
        return "alpha_words"
    if (
        rule.min_stop_words is not None
        and len(set(rule.stop_words).intersection(tokens)) < rule.min_stop_words
    ):
        return "stop_words"
    return None


def _share(items: list[str], predicate: Callable[[str], bool]) -> float:
    return sum(map(predicate, items)) / len(items) if items else 0.0


def gopher_repetition(text: str, tokens: list[str], rule: GopherRepetitionRule) -> str | None:
    """Name of the first Gopher repetition statistic over its threshold, or None."""
    total_chars = max(len(text), 1)
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]
    for unit, items, frac, char_frac in (
        ("para", paragraphs, rule.dup_para_frac, rule.dup_para_char_frac),
        ("line", _lines(text), rule.dup_line_frac, rule.dup_line_char_frac),
    ):
        count, chars = duplicates(items)
        if frac is not None and items and count / len(items) > frac:
            return f"dup_{unit}_frac"
        if char_frac is not None and chars / total_chars > char_frac:
            return f"dup_{unit}_char_frac"
    if not tokens:
        return None
    ids = np.unique(np.array(tokens), return_inverse=True)[1].astype(np.uint64)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    word_chars = lengths.sum()
    for n, threshold in sorted(rule.top_ngram_char_frac.items()):
        if _top_ngram_chars(ids, lengths, n) / word_chars > threshold:
            return f"top_{n}_gram"
    for n, threshold in sorted(rule.dup_ngram_char_frac.items()):
        if _duplicate_ngram_chars(ids, lengths, n) / word_chars > threshold:
            return f"dup_{n}_gram"
    return None


def duplicates(items: list[str]) -> tuple[int, int]:
    """Number and total length of the items that repeat an earlier item."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        seen.add(item)
    return count, chars


def _ngram_keys(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit polynomial hash per word n-gram (collisions are negligible at document scale)."""
    keys = np.zeros(len(ids) - n + 1, dtype=np.uint64)
    for offset in range(n):
        keys = keys * np.uint64(1_000_003) + ids[offset : offset + len(keys)]
    return keys


def _top_ngram_chars(ids: np.ndarray, lengths: np.ndarray, n: int) -> int:
    """Characters covered by all occurrences of the most frequent repeated n-gram."""
    if len(ids) < n:
        return 0
    _, first, counts = np.unique(_ngram_keys(ids, n), return_index=True, return_counts=True)
    if counts.max() < 2:
        return 0
    chars = np.convolve(lengths, np.ones(n, dtype=np.int64), mode="valid")[first]
    top = counts == counts.max()
    return int((counts[top] * chars[top]).max())


def _duplicate_ngram_chars(ids: np.ndarray, lengths: np.ndarray, n: int) -> int:
    """Characters of the words covered by n-grams that repeat an earlier n-gram (each word once)."""
    if len(ids) < n:
        return 0
    keys = _ngram_keys(ids, n)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    starts = np.flatnonzero(first[inverse] != np.arange(len(keys)))
    if not len(starts):
        return 0
    coverage = np.zeros(len(ids) + 1, dtype=np.int64)
    np.add.at(coverage, starts, 1)
    np.add.at(coverage, starts + n, -1)
    return int(lengths[np.cumsum(coverage[:-1]) > 0].sum())


def c4_lines(text: str, rule: C4Rule) -> tuple[str, str | None]:
    """C4's kept lines (blank lines between kept blocks preserved) or the document-level reason."""
    kept: list[str] = []
    sentences = 0
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            if kept and kept[-1]:
                kept.append("")
            continue
        tokens = line.split()
        if rule.max_word_length is not None and any(len(w) > rule.max_word_length for w in tokens):
            continue
        if rule.remove_citations:
            line = _CITATION.sub("", line).strip()
        if rule.filter_no_terminal_punct and (not line.endswith(_C4_END_PUNCTUATION) or line.endswith("...")):
            continue
        if rule.min_words_per_line is not None and len(tokens) < rule.min_words_per_line:
            continue
        lower = line.lower()
        if rule.filter_lorem_ipsum and "lorem ipsum" in lower:
            return text, "lorem_ipsum"
        if rule.filter_javascript and "javascript" in lower:
            continue
        if rule.filter_curly_bracket and "{" in line:
            return text, "curly_bracket"
        if rule.filter_policy and any(phrase in lower for phrase in _POLICY_PHRASES):
            continue
        sentences += 1 + len(_SENTENCE_BREAK.findall(line))
        kept.append(line)
    if rule.min_sentences is not None and sentences < rule.min_sentences:
        return text, "min_sentences"
    return "\n".join(kept).strip(), None


def fineweb(text: str, rule: FineWebRule) -> str | None:
    """Name of the first FineWeb statistic out of range, or None."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "line_punct_ratio"
    if rule.line_punct_thr is not None:
        ratio = _share(lines, lambda s: s[-1] in _TERMINAL_SET)
        if ratio < rule.line_punct_thr and not (ratio == 0 and rule.line_punct_exclude_zero):
            return "line_punct_ratio"
    if (
        rule.short_line_thr is not None
        and _share(lines, lambda s: len(s) <= rule.short_line_length) > rule.short_line_thr
    ):
        return "short_line_ratio"
    if rule.char_duplicates_ratio is not None:
        chars = max(len(text) - text.count("\n"), 1)
        if duplicates(lines)[1] / chars > rule.char_duplicates_ratio:
            return "char_dup_ratio"
    if (
        rule.new_line_ratio is not None
        and (len(lines) - 1) / max(len(gopher_tokens(text)), 1) > rule.new_line_ratio
    ):
        return "new_line_ratio"
    return None
