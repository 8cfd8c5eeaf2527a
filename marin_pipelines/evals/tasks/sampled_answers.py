"""The score of a task whose every question is answered several times (``repeats``), for lm-eval's
``process_results``: each sample's word overlap with the reference (SQuAD's token F1: lower case, no
punctuation or articles), the mean over the samples (``f1``) and the best of them (``f1_best``, pass@k's
shape for an answer that is more or less right)."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def words(text: str) -> list[str]:
    """SQuAD's normalisation: lower case, punctuation and articles removed, split on white space."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split()


def token_f1(prediction: str, reference: str) -> float:
    """The harmonic mean of the precision and recall of the prediction's words against the reference's."""
    predicted, wanted = words(prediction), words(reference)
    shared = sum((Counter(predicted) & Counter(wanted)).values())
    if not predicted or not wanted:
        return float(predicted == wanted)
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(wanted)
    return 2 * precision * recall / (precision + recall)


def process_results(doc: dict[str, Any], results: list[list[str]]) -> dict[str, float]:
    """``results[0]``: the samples of one question (a filter that keeps them all, not ``take_first``)."""
    samples = results[0] if isinstance(results[0], list) else [results[0]]
    scores = [token_f1(sample, doc["doc"]) for sample in samples]
    return {"f1": sum(scores) / len(scores), "f1_best": max(scores)}
