"""A real browser: `longrope-opt dashboard` serves a small SQLite study; headless Chromium opens it.

Chromium is Debian's (`.ci/run` installs it). The screenshot is kept as a test artifact in
``test-artifacts/`` (or ``$LONGROPE_OPT_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.viz_tests.test_figures import _study


ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=15000",
    "--run-all-compositor-stages-before-draw",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "no Chromium: install Debian's `chromium` (.ci/run does: apt-get install chromium)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited: {proc.stdout.read() if proc.stdout else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise AssertionError("dashboard did not start listening")


def test_dashboard_shows_the_study_in_headless_chromium(tmp_path) -> None:
    pytest.importorskip("optuna_dashboard")
    chromium = _chromium()
    _study(tmp_path, n_trials=8)  # sqlite file tmp_path/v.db, study "viz-study"
    port = _free_port()
    storage = f"sqlite:///{tmp_path / 'v.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "longrope_opt.cli", "dashboard", "--storage", storage,
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    artifacts = Path(os.environ.get("LONGROPE_OPT_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    try:
        _wait_for(port, proc)
        url = f"http://127.0.0.1:{port}/dashboard"
        profile = ["--user-data-dir=" + str(tmp_path / "profile")]
        dom = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, *profile, "--dump-dom", url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "viz-study" in dom.stdout, dom.stderr[-2000:]
        shot = artifacts / "dashboard.png"
        shot.unlink(missing_ok=True)
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, *profile, f"--screenshot={shot}",
             "--window-size=1280,900", url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shot.exists() and shot.stat().st_size > 10_000
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # The study page draws the figures `dashboard` attached (plotly titles are in the DOM).
        study_dom = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, *profile, "--dump-dom", f"{url}/studies/1"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "RoPE rescale factors" in study_dom.stdout, study_dom.stderr[-2000:]
        assert "Search progress" in study_dom.stdout
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, *profile, f"--screenshot={artifacts / 'study.png'}",
             "--window-size=1280,2400", f"{url}/studies/1"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
