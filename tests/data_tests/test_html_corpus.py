"""`experiments/html_corpus.py`: HTML pages become plain-text documents the corpus loader reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from longrope_opt.data import load_samples


ROOT = Path(__file__).resolve().parents[2]
PAGE = """<html><head><title>Book</title><style>p {color: red}</style></head><body>
<nav><a href="#">Chapter 1</a></nav><script>var words = "never read";</script>
<h1>The   Book</h1>
    <p>First paragraph, <em>with</em> markup
    inside.</p>


<pre><code>fn main() {}</code></pre><div><p>Last.</p></div></body></html>"""


SCRIPT = ROOT / "experiments" / "html_corpus.py"


def test_html_text_keeps_the_text_and_drops_markup_scripts_and_navigation(tmp_path) -> None:
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "print.html").write_text(PAGE)
    run = [sys.executable, str(SCRIPT), str(tmp_path / "book" / "print.html"), "--out",
           str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "book.txt").read_text()
    assert "<" not in text and "never read" not in text and "color" not in text
    assert "Chapter 1" not in text and not text.startswith("Book")  # <nav>, <head>'s <title>
    # blocks end lines, indentation goes, blank runs shrink to one, inline markup joins its text
    assert text == "The   Book\n\nFirst paragraph, with markup\ninside.\n\nfn main() {}\nLast.\n"


def test_pages_become_documents_named_after_their_book(tiny_model_dir, tmp_path) -> None:
    pages = []
    for name in ("alpha", "beta"):
        (tmp_path / "html" / name).mkdir(parents=True)
        page = tmp_path / "html" / name / "print.html"
        page.write_text(PAGE.replace("Last.", " ".join(f"w{i % 90 + 3}" for i in range(400))))
        pages.append(str(page))
    out = tmp_path / "text"
    run = [sys.executable, str(SCRIPT), *pages, "--out", str(out)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["alpha.txt", "beta.txt"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    samples = load_samples(str(out), tok, 64, 2)
    assert sorted(Path(d).name for d in samples.doc_ids) == ["alpha.txt", "beta.txt"]
    bad = subprocess.run(run[:2] + [str(tmp_path / "nope.html"), "--out", str(out)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "no such file" in bad.stderr
    same = subprocess.run(run[:2] + [pages[0], pages[0], "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert same.returncode == 2 and "the same name" in same.stderr
