"""HTML pages → a folder of .txt documents (one per page), for `--corpus` of the benches.

Long prose that no search here has seen, offline: mdBook "print" pages hold a whole book on one
page (the Rust toolchain's docs, for one). Scripts, styles, the navigation and the <head> are
dropped; block ends become line breaks.

    python experiments/html_corpus.py "$(rustc --print sysroot)"/share/doc/rust/html/{book,reference,nomicon,cargo}/print.html \
        --out /tmp/prose
    # each page becomes /tmp/prose/<parent folder>.txt (book.txt, reference.txt, ...)
"""

from __future__ import annotations

import argparse
import re
from html.parser import HTMLParser
from pathlib import Path


SKIPPED = {"script", "style", "nav", "head"}  # not the document's text
BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "li", "pre", "div", "tr", "br", "dt", "dd"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skipping = 0  # depth inside SKIPPED elements

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in SKIPPED:
            self.skipping += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED and self.skipping:
            self.skipping -= 1
        if tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The readable text of an HTML page: no markup or scripts, lines stripped, blank runs collapsed."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (line.strip() for line in "".join(parser.parts).splitlines())  # markup indentation
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("pages", nargs="+", type=Path, help="HTML files")
    p.add_argument("--out", type=Path, required=True, help="folder for the .txt documents")
    args = p.parse_args()
    names = [page.parent.name if page.stem in ("print", "index") else page.stem for page in args.pages]
    if len(set(names)) != len(names):
        p.error(f"two pages would get the same name: {names}")
    missing = [str(page) for page in args.pages if not page.is_file()]
    if missing:
        p.error(f"pages: no such file {missing[0]!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    for page, name in zip(args.pages, names):
        text = html_text(page.read_text(encoding="utf-8", errors="replace"))
        (args.out / f"{name}.txt").write_text(text, encoding="utf-8")
        print(f"{page} → {args.out / name}.txt ({len(text):,} characters)")


if __name__ == "__main__":
    main()
