"""Datashop's core: the config, answer parsing, sampling, the SimilarityAnnotator, the labels' split."""

import pytest
from pydantic import ValidationError

from marin_pipelines.quality.annotation import (
    DatashopConfig,
    LabelScale,
    SimilarityAnnotator,
    classifier_examples,
    label_distribution,
    label_sample,
    parse_label,
    reservoir_sample,
    retry_after_seconds,
)

SCALE = LabelScale(min=0, max=5, keep=3)
EXAMPLES = {
    5: ["classes define methods and attributes of their instances", "special methods customise instances"],
    0: ["fresh bread and cakes at our bakery every morning", "coffee shop opening hours and menu prices"],
}


def test_parse_label_reads_scores_and_rejects_the_rest():
    assert parse_label("Score: 4", SCALE) == 4
    assert parse_label("The extract is useful.\nEducational score: 2/5", SCALE) == 2
    assert parse_label(" 3. ", SCALE) == 3 and parse_label("Score: **5**", SCALE) == 5
    for garbage in ("I would rather not say.", "Score: 7", "3 or 4", "", "score: -1", "4 points, maybe 5"):
        assert parse_label(garbage, SCALE) is None, garbage


def test_config_needs_a_document_slot_and_a_sane_scale():
    with pytest.raises(ValidationError, match=r"must contain \{document\}"):
        DatashopConfig(rubric="Rate this page.", annotator="m")
    with pytest.raises(ValidationError, match="keep"):
        LabelScale(min=0, max=5, keep=0)
    with pytest.raises(ValidationError, match="min"):
        LabelScale(min=3, max=3, keep=3)
    with pytest.raises(ValidationError, match=r"outside the scale 0\.\.5"):
        DatashopConfig(rubric="{document}", annotator="m", examples={9: ["x"]})
    with pytest.raises(ValidationError, match="similarity.*at least one label >= keep"):
        DatashopConfig(rubric="{document}", examples={0: ["only negatives"]})
    DatashopConfig(rubric="{document}", annotator="some-model")  # a chat model needs no examples


def test_prompt_fills_the_slot_cuts_long_documents_and_keeps_other_braces():
    config = DatashopConfig(
        rubric='Answer as {"score": N}.\n{document}', annotator="m", max_document_chars=100
    )
    assert config.prompt("x" * 500) == 'Answer as {"score": N}.\n' + "x" * 100


def test_retry_after_accepts_seconds_and_http_dates():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: retry now


def test_reservoir_sample_is_seeded_uniform_and_keeps_order():
    docs = [{"id": str(i)} for i in range(1000)]
    sample = reservoir_sample(iter(docs), 50, seed=1)
    assert sample == reservoir_sample(iter(docs), 50, seed=1) != reservoir_sample(iter(docs), 50, seed=2)
    ids = [int(d["id"]) for d in sample]
    assert len(ids) == 50 and ids == sorted(ids) and max(ids) > 500 and min(ids) < 500
    assert reservoir_sample(docs[:3], 50, seed=1) == docs[:3]


def test_similarity_annotator_labels_by_the_nearest_examples():
    annotator = SimilarityAnnotator(EXAMPLES)
    result = annotator.annotate(["instances of classes have attributes", "the bakery sells bread and cakes"])
    assert result.labels == [5, 0] and result.stats["labelled"] == 2
    assert "no language model" in annotator.describe() and "5: 2" in annotator.describe()


def test_labels_split_into_classifier_examples():
    config = DatashopConfig(rubric="{document}", examples=EXAMPLES, sample_size=4)
    docs = [{"id": str(i), "url": None, "text": text} for i, text in enumerate(EXAMPLES[5] + EXAMPLES[0])]
    rows, result = label_sample(docs, config, SimilarityAnnotator(EXAMPLES))
    assert [r["label"] for r in rows] == [5, 5, 0, 0]
    assert label_distribution(result.labels, SCALE) == {"0": 2, "1": 0, "2": 0, "3": 0, "4": 0, "5": 2}
    positives, negatives = classifier_examples([*rows, {"text": "dropped", "label": None}], SCALE)
    assert positives == EXAMPLES[5] and negatives == EXAMPLES[0]
    with pytest.raises(ValueError, match=r"at least 2 documents labelled >= scale.keep \(3\).*has 2 and 1"):
        classifier_examples(rows[:3], SCALE)
