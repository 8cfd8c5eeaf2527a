"""Main-content extraction: ours against trafilatura, on the same pages, in one run.

The pages are the article-extraction benchmark beside the project (``../shared/data/extraction-dev``:
102 article pages with hand-checked bodies). Both extractors get the same decoded HTML strings; F1 is the
benchmark's (``../shared/tools/extraction_f1.py``: word 4-gram shingles, precision and recall averaged over
pages). Speed is pages per second of one process, over ``--repeats`` interleaved rounds, the best round of
each: CPU time of the process (what the work costs, unmoved by other load on the machine) and wall time.
Ours is ``extract_page`` (parse, main content, light markdown, title); trafilatura is ``extract`` with
its defaults (text output, title not included). Language identification is not in either timing.

    .venv/bin/python bench/extraction.py --repeats 5
    .venv/bin/python bench/extraction.py --also-resiliparse    # resiliparse's main-content mode too

trafilatura is a reference here only (the dev extra installs it); the pipeline does not use it.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"


def load_scorer(tool: Path):
    spec = importlib.util.spec_from_file_location("extraction_f1", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(extract: Callable[[str], str], pages: dict[str, str]) -> tuple[dict[str, str], float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = {key: extract(html) or "" for key, html in pages.items()}
    return out, time.process_time() - cpu, time.perf_counter() - wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED / "data" / "extraction-dev")
    parser.add_argument("--scorer", type=Path, default=SHARED / "tools" / "extraction_f1.py")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timing rounds (best is kept)")
    parser.add_argument("--also-resiliparse", action="store_true", help="time resiliparse's own mode too")
    args = parser.parse_args()
    try:
        import trafilatura
    except ImportError:
        print("trafilatura is not installed: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    from resiliparse.extract.html2text import extract_plain_text

    from marin_pipelines.text.extracted_text import extract_page

    truth = json.loads((args.data / "ground-truth.json").read_text(encoding="utf-8"))
    pages = {
        key: gzip.decompress((args.data / "html" / f"{key}.html.gz").read_bytes()).decode("utf-8")
        for key in truth
    }
    scorer = load_scorer(args.scorer)
    extractors: dict[str, Callable[[str], str]] = {
        "ours": lambda html: extract_page(html)[1],
        f"trafilatura {importlib.metadata.version('trafilatura')}": trafilatura.extract,
    }
    if args.also_resiliparse:
        extractors["resiliparse main-content"] = lambda html: extract_plain_text(
            html, main_content=True, alt_texts=False, comments=False
        )
    results: dict[str, dict] = {name: {"cpu": float("inf"), "wall": float("inf")} for name in extractors}
    for _ in range(args.repeats):
        for name, extract in extractors.items():
            out, cpu, wall = timed(extract, pages)
            result = results[name]
            result["cpu"], result["wall"] = min(result["cpu"], cpu), min(result["wall"], wall)
            result["score"] = scorer.score(truth, {key: {"articleBody": text} for key, text in out.items()})
    n = len(pages)
    print(f"{n} pages of {args.data}, best of {args.repeats} rounds")
    print(f"{'extractor':<28} {'F1':>6} {'prec.':>6} {'recall':>6} {'pages/s CPU':>12} {'pages/s wall':>13}")
    for name, r in results.items():
        s = r["score"]
        print(
            f"{name:<28} {s['f1']:>6.3f} {s['precision']:>6.3f} {s['recall']:>6.3f} "
            f"{n / r['cpu']:>12.1f} {n / r['wall']:>13.1f}"
        )
    ours, reference = results["ours"], results[list(extractors)[1]]
    print(
        f"speed ratio ours / trafilatura: {reference['cpu'] / ours['cpu']:.1f}x (CPU), "
        f"{reference['wall'] / ours['wall']:.1f}x (wall)"
    )
    print(f"F1 ours - trafilatura: {ours['score']['f1'] - reference['score']['f1']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
