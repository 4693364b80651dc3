"""The documentation site, built with warnings as errors, looked at in headless Chromium.

`.ci/run` builds the site once (`sphinx-build -E -W -n`) and passes its folder in
``$LONGROPE_OPT_DOCS_HTML``; without it this module builds the site itself. The home page, the
API page, the CLI page and the results page render with their headings, and no local link or asset of theirs
answers 404 from a plain HTTP server.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.viz_tests.test_dashboard_browser import CHROMIUM_FLAGS
from tests.viz_tests.test_dashboard_browser import _chromium


ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "index.html": ["longrope-opt", "Getting started", "Concepts"],
    "api.html": ["API reference", "LongRoPESampler", "longrope_opt.samplers",
                 "population_size"],  # fmt: skip
    "cli.html": ["CLI reference", "longrope-opt", "search", "validate", "--guard-keys"],
    # the what-to-ship table, a row per model and ratio, and the second model's section
    "results.html": ["Results", "SmolLM2-135M", "Gemma 3 270M", "perplexity vs best formula",
                     "0.932×", "Gemma 3 270M: 32k trained, to 64k and 128k"],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("LONGROPE_OPT_DOCS_HTML")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-n", "-q", "-b", "html",
         str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def server(site: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value and not re.match(r"^[a-z]+:|^#|^//", value):
                self.found.append(value.split("#")[0])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("page", list(PAGES))
def test_page_renders_with_its_headings_and_no_broken_local_link(page, server, tmp_path) -> None:
    chromium = _chromium()
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, *profile, "--dump-dom", f"{server}/{page}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    html = dom.stdout
    assert "<h1" in html, dom.stderr[-2000:]
    for text in PAGES[page]:
        assert text in html, f"{page}: {text!r} not rendered"
    parser = _Links()
    parser.feed(html)
    local = sorted({link for link in parser.found if link})
    assert len(local) >= 5  # stylesheets, scripts and the navigation
    broken = [link for link in local if _status(f"{server}/{link}") != 200]
    assert not broken, f"{page}: local links or assets that do not load: {broken}"
