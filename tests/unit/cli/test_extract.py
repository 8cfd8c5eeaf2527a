"""`marin-pipelines extract`: one JSON object per page; bad pages are reported, never a traceback."""

import gzip
import json
import subprocess
import sys

from marin_pipelines.cli import main

PAGE = """<html><head><title>Bread at home</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/shop">Shop</a></li></ul></nav>
<article><h1>Bread at home</h1>
<p>Baking bread at home takes time, but the steps are simple and the result is worth the wait.</p>
<ul><li>Strong flour</li><li>Warm water</li></ul>
<p>Mix flour, water, salt and yeast, then let the dough rest overnight so that the flavour can develop.</p>
</article><footer>Privacy policy</footer></body></html>"""


def _pages(tmp_path):
    plain = tmp_path / "bread.html"
    plain.write_text(PAGE, encoding="utf-8")
    zipped = tmp_path / "bread.html.gz"
    zipped.write_bytes(gzip.compress(PAGE.encode("cp1252")))  # a charset other than UTF-8, found by detection
    return plain, zipped


def test_json_lines(tmp_path, capsys):
    plain, zipped = _pages(tmp_path)
    assert main(["extract", "--json", str(plain), str(zipped)]) == 0
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["path"] for r in records] == [str(plain), str(zipped)]
    for record in records:
        assert set(record) == {"path", "text", "title", "lang"}
        assert record["title"] == "Bread at home" and record["lang"] == "en"
        assert record["text"] == (
            "Baking bread at home takes time, but the steps are simple and the result is worth the wait.\n\n"
            "- Strong flour\n- Warm water\n\n"
            "Mix flour, water, salt and yeast, then let the dough rest overnight so that the flavour can "
            "develop."
        )
    assert err == ""


def test_bad_pages_are_reported_and_skipped(tmp_path, capsys):
    plain, _ = _pages(tmp_path)
    truncated = tmp_path / "truncated.html.gz"
    truncated.write_bytes(gzip.compress(PAGE.encode())[:40])
    empty = tmp_path / "empty.html"
    empty.write_bytes(b"")
    missing = tmp_path / "missing.html"
    no_text = tmp_path / "no-text.html"
    no_text.write_text("<html><body><nav><a href='/'>Home</a></nav></body></html>")
    paths = [str(p) for p in (truncated, plain, empty, missing, tmp_path, no_text)]
    assert main(["extract", "--json", *paths]) == 1
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["path"] for r in records] == [str(plain), str(no_text)]
    assert records[1]["text"] == "" and records[1]["lang"] is None
    lines = err.splitlines()
    assert lines[0].startswith(f"marin-pipelines extract: {truncated}: not a readable gzip file")
    assert lines[1:] == [
        f"marin-pipelines extract: {empty}: empty page",
        f"marin-pipelines extract: {missing}: no such file",
        f"marin-pipelines extract: {tmp_path}: is a directory",
        "marin-pipelines extract: 4 of 6 pages failed",
    ]
    assert "Traceback" not in err


def test_plain_output_and_options(tmp_path, capsys):
    plain, _ = _pages(tmp_path)
    assert main(["extract", str(plain)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"==> {plain} <==\n# Bread at home\n\nBaking bread")
    assert main(["extract", "--json", "--whole-page", "--plain", str(plain)]) == 0
    text = json.loads(capsys.readouterr().out)["text"]
    assert "Privacy policy" in text and "Strong flour\nWarm water" in text and "- " not in text


def test_real_page_as_a_command(shared_data):
    page = shared_data / "web-pages" / "theguardian.com.academics.html.gz"
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from marin_pipelines.cli import main; sys.exit(main())"]
        + ["extract", "--json", str(page)],
        capture_output=True,
        text=True,
        check=True,
    )
    record = json.loads(result.stdout)
    assert record["lang"] == "en" and record["title"].startswith("Thousands of UK academics")
    assert "Thousands of academic staff at British universities" in record["text"]
