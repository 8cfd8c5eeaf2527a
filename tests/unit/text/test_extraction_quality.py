"""Extraction quality on real pages: the article-extraction benchmark beside the project, and the
multilingual test pages (no ground truth there: a check that no page loses its text)."""

import gzip
import importlib.util
import json

import pytest
from resiliparse.extract.html2text import extract_plain_text

from marin_pipelines.text.extracted_text import decode_html, extract_page


def _scorer(shared_data):
    tool = shared_data.parent / "tools" / "extraction_f1.py"
    if not tool.is_file():
        pytest.skip(f"scoring tool not found at {tool}")
    spec = importlib.util.spec_from_file_location("extraction_f1", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_f1_on_the_extraction_benchmark(shared_data):
    f1 = _scorer(shared_data)
    dev = shared_data / "extraction-dev"
    truth = json.loads((dev / "ground-truth.json").read_text(encoding="utf-8"))
    pred = {}
    for key in truth:
        html = gzip.decompress((dev / "html" / f"{key}.html.gz").read_bytes()).decode("utf-8")
        pred[key] = {"articleBody": extract_page(html)[1]}
    score = f1.score(truth, pred)
    # measured 0.963 (trafilatura 2.3.1: 0.950; resiliparse main-content alone: 0.92 with our options)
    assert score["f1"] >= 0.955, score
    assert score["precision"] >= 0.93 and score["recall"] >= 0.97, score


def test_no_real_page_loses_its_text(shared_data):
    """On every test page where resiliparse's main-content mode finds prose, we find most of it too."""
    lost = []
    for path in sorted((shared_data / "web-pages").glob("*.html.gz")):
        html = decode_html(gzip.decompress(path.read_bytes()), None)
        reference = extract_plain_text(html, main_content=True, alt_texts=False, comments=False)
        _, text = extract_page(html)
        if len(reference) >= 1000 and len(text) < 0.3 * len(reference):
            lost.append((path.name, len(reference), len(text)))
    assert len(lost) <= 2, lost
