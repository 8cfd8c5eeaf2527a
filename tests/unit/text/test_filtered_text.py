import gzip

import pytest
from pydantic import ValidationError

from marin_pipelines.text.extracted_text import extract_text
from marin_pipelines.text.filtered_text import (
    C4Rule,
    FilterConfig,
    FineWebRule,
    GopherQualityRule,
    GopherRepetitionRule,
    LanguageRule,
    apply_rules,
    c4_lines,
    filter_text,
    fineweb,
    gopher_quality,
    gopher_repetition,
    gopher_tokens,
    words,
)

PARAGRAPHS = [
    "The river that runs through the old town was once the main road for traders who came from the coast.",
    "Boats carried salt, wool and timber upstream, and on the way back they brought grain to the harbour.",
    "When the railway arrived in the nineteenth century, the boats slowly disappeared from the water.",
    "Today the quays are lined with cafés, and children feed the ducks where the cargo used to be unloaded.",
    "A small museum near the bridge keeps the history of the river alive with maps, photographs and models.",
    "Every summer the town holds a festival with music on the water and a race between wooden rowing boats.",
]
PROSE = "\n\n".join(PARAGRAPHS)
NO_C4 = C4Rule(enabled=False)


def _doc(text: str, lang: str = "en", score: float = 0.8) -> dict:
    return {"id": "x", "url": "https://example.com/", "text": text, "lang": lang, "lang_score": score}


def _reason(text: str, config: FilterConfig | None = None, **doc) -> str | None:
    return apply_rules(_doc(text, **doc), config or FilterConfig())[1]


def test_good_prose_passes_every_rule():
    assert _reason(PROSE) is None
    decisions = list(filter_text([_doc(PROSE)]))
    assert decisions == [(_doc(PROSE), None)]


def test_words_are_whitespace_tokens_without_surrounding_punctuation():
    assert words('Hello, "world"... it\'s 3.14 -- ok!') == ["Hello", "world", "it's", "3.14", "ok"]


def test_language():
    assert _reason(PROSE, lang="de") == "language"
    assert _reason(PROSE, score=0.3) == "language"
    assert _reason(PROSE, FilterConfig(language=LanguageRule(languages=("de", "en"))), lang="de") is None
    assert _reason(PROSE, FilterConfig(language=LanguageRule(enabled=False)), lang="de") is None


@pytest.mark.parametrize(
    ("text", "rule", "expected"),
    [
        ("The cat and the dog.", GopherQualityRule(), "min_words"),
        (PROSE, GopherQualityRule(max_words=20), "max_words"),
        (" ".join(["a an to of it is"] * 20) + " the and", GopherQualityRule(), "min_mean_word_length"),
        (
            " ".join(["internationalisation characteristically"] * 40) + " the and",
            GopherQualityRule(),
            "max_mean_word_length",
        ),
        (PROSE + " #tag" * 20, GopherQualityRule(), "hash_ratio"),
        (PROSE + " wait..." * 20, GopherQualityRule(), "ellipsis_ratio"),
        (
            "\n".join(f"• item number {i} of the list and more" for i in range(20)),
            GopherQualityRule(),
            "bullet_lines",
        ),
        (
            "\n".join(
                f"Line {i} of the story is long and slow and it trails off before it ends and then…"
                for i in range(10)
            ),
            GopherQualityRule(),
            "ellipsis_lines",
        ),
        (
            " ".join(str(i) for i in range(1000, 1200)) + " " + PARAGRAPHS[0],
            GopherQualityRule(),
            "alpha_words",
        ),
        (" ".join(["cats dogs birds fish run jump swim fly"] * 10), GopherQualityRule(), "stop_words"),
    ],
)
def test_gopher_quality_rules(text, rule, expected):
    assert gopher_quality(text, gopher_tokens(text), rule) == expected
    assert gopher_quality(PROSE, gopher_tokens(PROSE), rule) in (None, "max_words")


def test_gopher_tokens_split_punctuation_as_datatrove_does():
    assert gopher_tokens('He said: "it\'s 12,000 km (pages 4–11)..." Fine!') == [
        "He", "said", ":", '"', "it's", "12,000", "km", "(", "pages", "4–11", ")", "...", '"', "Fine", "!",
    ]  # fmt: skip


def test_gopher_quality_follows_datatrove_definitions():
    rule = GopherQualityRule()
    # stop words: distinct and case-sensitive, as datatrove counts them ("The" is not "the")
    twice = " ".join(["The river runs the long way down"] * 10)
    assert gopher_quality(twice, gopher_tokens(twice), rule) == "stop_words"
    assert gopher_quality(twice + " to", gopher_tokens(twice + " to"), rule) is None
    # markdown heading markers are not hash symbols; other hashes are
    headed = "\n\n".join(f"### Part {i}\n\n{PARAGRAPHS[i % 6]}" for i in range(6))
    assert gopher_quality(headed, gopher_tokens(headed), rule) is None
    tagged = headed.replace("### ", "#tag #tag ###")
    assert gopher_quality(tagged, gopher_tokens(tagged), rule) == "hash_ratio"
    # the alphabetic share is over words: punctuation-heavy prose (a deliberate deviation) passes
    punctuated = " ".join(f"({w}), [{w}];" for w in PROSE.split())
    assert gopher_quality(punctuated, gopher_tokens(punctuated), rule) is None
    # blank lines count as lines for the bullet share, as in datatrove
    bullets = "\n".join(f"- item {i} of the long list of the things to take" for i in range(20))
    assert gopher_quality(bullets, gopher_tokens(bullets), rule) == "bullet_lines"
    spaced = bullets.replace("\n", "\n\n")
    assert gopher_quality(spaced, gopher_tokens(spaced), rule) is None


def test_gopher_quality_thresholds_can_be_disabled():
    short = "The cat and the dog."
    assert gopher_quality(short, words(short), GopherQualityRule(min_words=None)) is None
    relaxed = FilterConfig(
        gopher_quality=GopherQualityRule(enabled=False), c4=NO_C4, fineweb=FineWebRule(enabled=False)
    )
    assert _reason(short) == "gopher_quality:min_words"
    assert _reason(short, relaxed) is None


def test_gopher_repetition_rules():
    rule = GopherRepetitionRule()
    twice = PROSE + "\n\n" + PROSE
    assert gopher_repetition(twice, words(twice), rule) == "dup_para_frac"
    one_long = PARAGRAPHS[0] * 8
    para_chars = "\n\n".join([one_long, one_long, *PARAGRAPHS])  # 1 of 8 paragraphs, but most characters
    assert gopher_repetition(para_chars, words(para_chars), rule) == "dup_para_char_frac"
    lines = "\n".join(PARAGRAPHS + PARAGRAPHS[:3])  # one paragraph, 3 of 9 lines repeated
    assert gopher_repetition(lines, words(lines), rule) == "dup_line_frac"
    line_chars = "\n".join([PARAGRAPHS[0] * 6] * 2 + [f"Short line number {i}." for i in range(10)])
    assert gopher_repetition(line_chars, words(line_chars), rule) == "dup_line_char_frac"
    bigrams = " ".join(f"cheap watches {w}" for w in PARAGRAPHS[0].split())
    assert gopher_repetition(bigrams, words(bigrams), rule) == "top_2_gram"
    ngrams = " ".join([*PARAGRAPHS[:4], PARAGRAPHS[0]])  # one line; a sentence repeated inside it
    assert gopher_repetition(ngrams, words(ngrams), rule) == "dup_5_gram"
    assert gopher_repetition(PROSE, words(PROSE), rule) is None


def test_gopher_repetition_ignores_blank_lines_and_single_ngrams():
    spaced = "\n\n\n".join(PARAGRAPHS)  # many blank lines are not duplicated lines
    assert gopher_repetition(spaced, words(spaced), GopherRepetitionRule()) is None
    tiny = "red fox jumps"  # its only 2-gram covers 2/3 of the text but occurs once
    assert gopher_repetition(tiny, words(tiny), GopherRepetitionRule()) is None


def test_gopher_repetition_names_the_n_gram_size():
    rule = GopherRepetitionRule(
        dup_line_frac=None,
        dup_para_frac=None,
        dup_line_char_frac=None,
        dup_para_char_frac=None,
        top_ngram_char_frac={},
        dup_ngram_char_frac={7: 0.01},
    )
    text = PARAGRAPHS[0] + " " + PARAGRAPHS[0]
    assert gopher_repetition(text, words(text), rule) == "dup_7_gram"


def test_c4_removes_lines_and_rewrites_kept_documents():
    noisy = "\n\n".join(
        [
            "Home | Shop | Contact",
            PARAGRAPHS[0],
            "Please enable JavaScript to view the comments.",
            PARAGRAPHS[1] + " [1]",
            "This site uses cookies. See our privacy policy.",
            "Too short.",
            *PARAGRAPHS[2:],
        ]
    )
    text, reason = c4_lines(noisy, C4Rule())
    assert reason is None
    assert text == "\n\n".join([PARAGRAPHS[0], PARAGRAPHS[1], *PARAGRAPHS[2:]])  # citation removed too
    [(doc, decision)] = filter_text([_doc(noisy)])
    assert decision is None and doc["text"] == text


def test_c4_document_rules():
    assert c4_lines(PROSE + "\n\nLorem ipsum dolor sit amet, consectetur.", C4Rule()) == (
        PROSE + "\n\nLorem ipsum dolor sit amet, consectetur.",
        "lorem_ipsum",
    )
    assert c4_lines(PROSE + "\n\nUse a dict such as {'a': 1} here.", C4Rule())[1] == "curly_bracket"
    assert c4_lines("\n".join(PARAGRAPHS[:4]), C4Rule())[1] == "min_sentences"
    # a line dropped for other reasons does not count as a bracket
    assert c4_lines("{ code without punctuation", C4Rule())[1] == "min_sentences"
    assert _reason(PROSE + "\n\nUse a dict such as {'a': 1} here.") == "c4:curly_bracket"
    relaxed = C4Rule(filter_no_terminal_punct=False, filter_curly_bracket=False)
    assert c4_lines(PROSE + "\nA heading without a stop\n{'a': 1} is a dict.", relaxed)[1] is None


def test_fineweb_rules():
    rule = FineWebRule()
    no_punct = "\n".join(p.rstrip(".") for p in PARAGRAPHS)
    assert fineweb(no_punct, rule) == "line_punct_ratio"
    assert _reason(no_punct, FilterConfig(c4=NO_C4)) == "fineweb:line_punct_ratio"
    short = "\n".join(f"Line {i} is here." for i in range(30)) + "\n" + PROSE
    assert fineweb(short, rule) == "short_line_ratio"
    duplicated = PROSE + "\n" + PARAGRAPHS[0]
    assert fineweb(duplicated, rule) == "char_dup_ratio"
    listy = "\n".join(f"Item {i}." for i in range(60))  # 59 line breaks for 180 tokens (words and stops)
    assert fineweb(listy, FineWebRule(short_line_thr=None)) == "new_line_ratio"
    assert fineweb(PROSE, rule) is None
    assert fineweb(duplicated, FineWebRule(char_duplicates_ratio=None)) is None
    # stops are Unicode sentence terminals (datatrove's set): "。" ends a line, a closing quote does not
    cjk = "\n".join(
        ["这是一个很长的句子，它描述了河流的历史和城市的发展。"]
        + [f"第{i}行说明了更多的细节和背景信息。" for i in range(9)]
    )
    only_punct = FineWebRule(char_duplicates_ratio=None, short_line_thr=None, new_line_ratio=None)
    assert fineweb(cjk, only_punct) is None
    quoted = "\n".join(f'{p[:-1]}, he said "so"' for p in PARAGRAPHS)
    assert fineweb(quoted, rule) == "line_punct_ratio"


def test_c4_counts_sentences_like_spacys_sentencizer():
    rule = C4Rule(min_sentences=5)
    two = "Dr. Smith met Mr. Jones at 3.30 p.m. in the park. They talked about the river for hours."
    assert c4_lines("\n".join([two, two]), rule)[1] == "min_sentences"  # 4: abbreviations do not end one
    assert c4_lines("\n".join([two, two, two]), rule)[1] is None  # 6
    trailing = "It went on and on... and then it stopped. The end came at last, as it does."
    assert c4_lines("\n".join([trailing, trailing]), rule)[1] == "min_sentences"  # "..." ends none: 4
    glued = "We walked along the river.Then we crossed the old bridge.And then we went home."
    assert c4_lines("\n".join([glued, glued]), rule)[1] is None  # "river.Then" is a boundary: 6


def test_families_run_in_order_and_name_the_rule():
    spam = "\n".join(["Buy cheap watches today and save big with free shipping to the whole world."] * 10)
    assert _reason(spam) == "gopher_repetition:dup_line_frac"
    assert _reason(spam, FilterConfig(gopher_repetition=GopherRepetitionRule(enabled=False))) == (
        "fineweb:char_dup_ratio"
    )
    assert _reason("Tiny page.", lang="fr") == "language"
    everything_off = FilterConfig(
        language=LanguageRule(enabled=False),
        gopher_repetition=GopherRepetitionRule(enabled=False),
        gopher_quality=GopherQualityRule(enabled=False),
        c4=NO_C4,
        fineweb=FineWebRule(enabled=False),
    )
    assert _reason(spam, everything_off, lang="xx") is None


def test_real_pages(shared_data):
    docs = []
    for path in sorted((shared_data / "web-pages").glob("*.html.gz")):
        doc = {"id": path.name, "url": path.name, "html": gzip.decompress(path.read_bytes()), "charset": None}
        docs.append(doc)
    extracted = [doc for doc, reason in extract_text(docs) if reason is None]
    english = [doc for doc in extracted if doc["lang"] == "en"]
    decisions = dict((doc["id"], reason) for doc, reason in filter_text(extracted))
    assert len(english) >= 30
    assert sum(decisions[doc["id"]] is None for doc in english) >= 0.8 * len(english)
    assert all(decisions[doc["id"]] == "language" for doc in extracted if doc["lang"] != "en")
    assert decisions["theguardian.com.academics.html.gz"] is None


def test_config_validation():
    with pytest.raises(ValidationError, match="min_score"):
        LanguageRule(min_score=1.5)
    with pytest.raises(ValidationError, match="dup_line_frac"):
        GopherRepetitionRule(dup_line_frac=-0.1)
    with pytest.raises(ValidationError, match="short_line_thr"):
        FineWebRule(short_line_thr=2)
    with pytest.raises(ValidationError, match="languages"):
        LanguageRule(languages=())
    assert FilterConfig().gopher_quality.min_words == 50
    assert FilterConfig().gopher_repetition.dup_ngram_char_frac[10] == 0.10
    # the JSON dump feeds the version hash: it must not depend on hash randomisation (no sets)
    dumped = FilterConfig().model_dump(mode="json")
    assert dumped["gopher_quality"]["stop_words"] == ["the", "be", "to", "of", "and", "that", "have", "with"]
