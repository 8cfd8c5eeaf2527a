"""Decontamination on real text: the standard library's docstrings as a corpus, the shipped lm-eval tasks
as the evaluation suite, a few task items planted (verbatim and lightly edited) into it, and the source of
a function that a generative task asks about."""

import ast
import inspect
import json

import pytest

from marin_pipelines.documents import MISSING_FIELD
from marin_pipelines.evals.evaluation_items import evaluation_items, file_items
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS
from marin_pipelines.text.decontaminated_text import (
    CONTAMINATED,
    DecontaminationConfig,
    EvalItem,
    NgramIndex,
    contamination_report,
    decontaminate,
    ngram_hashes,
    template_words,
    words,
)

MODULES = (
    "json", "heapq", "bisect", "textwrap", "shlex", "collections", "functools", "string", "os", "shutil",
    "subprocess", "argparse", "logging", "random", "csv", "tempfile", "difflib", "fnmatch", "base64",
)  # fmt: skip


def stdlib_docstrings() -> list[dict[str, str]]:
    """Every documented function and class of a few standard modules: real prose about Python."""
    docs = []
    for name in MODULES:
        module = __import__(name)
        for attribute, value in sorted(vars(module).items()):
            text = inspect.getdoc(value) if callable(value) else None
            if text and len(text.split()) > 20 and not attribute.startswith("_"):
                docs.append({"id": f"{name}.{attribute}", "text": text})
    return docs


@pytest.fixture(scope="module")
def suite() -> list[EvalItem]:
    return evaluation_items(list(SHIPPED_TASKS))


def planted(suite: list[EvalItem]) -> list[dict[str, str]]:
    """Task items inside other text: verbatim, re-cased and re-punctuated, and a long one cut mid-way."""
    mc = next(i for i in suite if i.suite == "marin_python_mc")
    text = next(i for i in suite if i.suite == "marin_python_text")
    qa = next(i for i in suite if i.suite == "marin_python_qa" and len(words(i.text)) >= 8)
    edited = text.text.upper().replace(",", " ;").replace(". ", "!\n")
    part = " ".join(text.text.split()[:16])  # 16 words: three 13-grams of it
    return [
        {"id": "planted-mc", "text": f"Some quiz found online. {mc.text} That was easy."},
        {"id": "planted-text-edited", "text": f"Notes.\n{edited}\nEnd of notes."},
        {"id": "planted-text-part", "text": f"As the manual says, {part} and so on."},
        {"id": "planted-qa", "text": f"FAQ: {qa.text}"},
        # where a generative task's answer comes from: the function's source, its docstring's first sentence
        {"id": "planted-source", "text": inspect.getsource(ast.walk)},
    ]


def test_every_planted_item_is_removed_and_nothing_else(suite):
    corpus = stdlib_docstrings()
    assert len(corpus) > 100
    index = NgramIndex(suite, DecontaminationConfig())
    decisions = list(decontaminate(corpus + planted(suite), index))
    removed = [doc for doc, reason in decisions if reason == CONTAMINATED]
    assert sorted(d["id"] for d in removed) == [
        "planted-mc",
        "planted-qa",
        "planted-source",
        "planted-text-edited",
        "planted-text-part",
    ]
    assert len(decisions) == len(corpus) + 5  # every document decided once: 0 false positives in the corpus
    by_id = {d["id"]: d for d in removed}
    assert by_id["planted-mc"]["matched_sets"] == ["marin_python_mc"]
    assert by_id["planted-source"]["matched_sets"] == ["marin_python_doc", "marin_python_signature"]
    assert by_id["planted-text-part"]["shared_ngram"] in " ".join(words(by_id["planted-text-part"]["text"]))
    report = contamination_report([{**d, "reason": CONTAMINATED} for d in removed], index)
    assert report["documents"] == 5
    assert report["per_set"]["marin_python_text"]["documents"] == 2
    assert report["items_in_training_data"]["marin_python_text"] == ["0"]  # the reverse report: which items
    assert report["per_set"]["marin_python_mc"]["items"] == 16 and len(report["examples"]) == 5
    assert report["items_in_training_data"]["marin_python_doc"] == ["17"]  # ast.walk


def test_short_items_are_matched_whole_or_counted_too_short():
    items = [EvalItem("s", "1", "one two three four five six seven eight"), EvalItem("s", "2", "too short")]
    index = NgramIndex(items, DecontaminationConfig(n=13, min_words=8))
    assert index.too_short["s"] == 1 and len(index.items) == 1
    assert index.matches("zero One, two; three four five six seven EIGHT nine") == {
        0: "one two three four five six seven eight"
    }
    assert index.matches("one two three four five six seven nine") == {}
    with pytest.raises(ValueError, match=r"no evaluation item to decontaminate against \(1 shorter than"):
        NgramIndex([EvalItem("s", "2", "too short")], DecontaminationConfig())  # a step that removes nothing


def test_ngram_hashes_depend_on_the_words_and_their_order():
    a = ngram_hashes(["a", "b", "c", "d"], 3)
    assert len(a) == 2 and a[0] != a[1]
    assert ngram_hashes(["b", "a", "c"], 3)[0] != a[0] and ngram_hashes(["a", "b", "c"], 3)[0] == a[0]
    assert len(ngram_hashes(["a", "b"], 3)) == 0


def test_mark_keeps_every_document_with_what_it_matched(suite):
    index = NgramIndex(suite, DecontaminationConfig(action="mark"))
    decisions = list(decontaminate(planted(suite) + stdlib_docstrings()[:5], index))
    assert all(reason is None for _, reason in decisions)
    marked = [doc for doc, _ in decisions if doc["matched_sets"]]
    assert len(marked) == 5 and contamination_report((d for d, _ in decisions), index)["documents"] == 5


def test_item_files_read_lines_texts_and_chats(tmp_path):
    (tmp_path / "lines.txt").write_text("first item here\n\nsecond item\n")
    (tmp_path / "texts.jsonl").write_text(json.dumps({"id": "a", "text": "alpha beta"}) + "\n")
    chat = {"messages": [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]}
    (tmp_path / "chats.jsonl").write_text(json.dumps(chat) + "\n")
    items = list(file_items([str(tmp_path / n) for n in ("lines.txt", "texts.jsonl", "chats.jsonl")]))
    assert [(i.suite, i.item, i.text) for i in items] == [
        ("lines.txt", "1", "first item here"),
        ("lines.txt", "3", "second item"),
        ("texts.jsonl", "a", "alpha beta"),
        ("chats.jsonl", "1", "hi there\nhello"),
    ]
    (tmp_path / "broken.jsonl").write_text('{"text": "fine"}\n{"text": \n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not JSON"):
        list(file_items([str(tmp_path / "broken.jsonl")]))
    (tmp_path / "bad.jsonl").write_text('{"question": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: expected a 'text' field or chat 'messages'"):
        list(file_items([str(tmp_path / "bad.jsonl")]))


def test_a_share_of_the_items_ngrams_can_be_asked_for():
    item = " ".join(f"w{i}" for i in range(30))  # 18 distinct 13-grams
    index = NgramIndex([EvalItem("s", "1", item)], DecontaminationConfig(min_overlap=0.5))
    one = " ".join(f"w{i}" for i in range(13))  # 1 of the 18
    assert index.matches(one) == {}
    assert index.matches(" ".join(f"w{i}" for i in range(21))) == {0: one}  # 9 of 18
    assert NgramIndex([EvalItem("s", "1", item)], DecontaminationConfig()).matches(one) == {0: one}  # any one


def test_unicode_variants_match_their_plain_forms():
    """Combining accents, precomposed letters, full-width digits and letters, ligatures and case: both sides
    read alike, whichever side has which form."""
    plain = "The café in Zürich sells 24 kinds of crème brûlée and fine coffee every day of the week"
    variant = (
        "THE CAFE\u0301 IN ZU\u0308RICH sells \uff12\uff14 kinds of cre\u0300me bru\u0302le\u0301e and "
        "\ufb01ne coﬀee every day of the week"
    )
    assert words(variant) == words(plain)  # one word each: an accent does not split a word
    assert words(plain)[:3] == ["the", "cafe", "in"]
    for item, doc in ((plain, variant), (variant, plain)):
        index = NgramIndex([EvalItem("s", "1", item)], DecontaminationConfig())
        assert index.matches(f"Seen elsewhere: {doc}.") == {0: " ".join(words(plain)[:13])}


def test_a_question_without_its_answer_is_found_by_its_prompt_alone(suite):
    """A filter that cut the answer line left the question: with match_prompt_alone (the default) the
    prompt, less its set's template words ("Question:", "Answer:"), is matched whole; without, only n-grams
    that reach into the answer count, so neither the question alone nor a long prompt's own n-grams do."""
    item = next(i for i in suite if i.suite == "marin_python_mc" and i.text.endswith("Answer: append"))
    assert item.prompt == "Question: Which method adds one item to the end of a list?\nAnswer:"
    cut = {
        "id": "cut",
        "text": "Notes on lists.\n\nQuestion: Which method adds one item to the end of a list?",
    }
    on = NgramIndex(suite, DecontaminationConfig())
    [(doc, reason)] = decontaminate([cut], on)
    assert reason == CONTAMINATED and doc["matched_items"] == [f"marin_python_mc/{item.item}"]
    assert doc["shared_ngram"] == "which method adds one item to the end of a list"
    off = NgramIndex(suite, DecontaminationConfig(match_prompt_alone=False))
    assert list(decontaminate([cut], off)) == [(cut, None)]
    assert off.matches(f"FAQ. {item.text}") and on.matches(f"FAQ. {item.text}")  # the whole item: both
    long_prompt = " ".join(f"p{i}" for i in range(20))
    long_item = EvalItem("s", "1", f"{long_prompt} the answer", prompt=long_prompt)
    assert NgramIndex([long_item], DecontaminationConfig()).matches(long_prompt)
    off = NgramIndex([long_item], DecontaminationConfig(match_prompt_alone=False))
    assert off.matches(long_prompt) == {} and off.matches(f"{long_prompt} the")  # one answer word is enough
    assert template_words([["question", "a", "b", "answer"], ["question", "c", "answer"]]) == (1, 1)
    assert template_words([["only", "one"]]) == (0, 0)


@pytest.mark.parametrize("action", ["remove", "mark"])
def test_a_row_without_text_is_counted_not_a_traceback_under_either_action(suite, action):
    """A null text is no document (the tokenizer refuses it): counted as missing_field, under mark too."""
    index = NgramIndex(suite, DecontaminationConfig(action=action))
    docs = [{"id": "null", "text": None}, {"id": "ok", "text": "plain words"}]
    assert [reason for _, reason in decontaminate(docs, index)] == [MISSING_FIELD, None]
