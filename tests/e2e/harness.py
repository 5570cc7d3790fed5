"""Start the real app (``streamlit run app.py``) on a free port and drive it with Chromium."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# ms: the longest a browser step waits: Spark's first start, a recovery job or a plan of
# every sample sensor, beside the Spark suite on a 2-core machine
SLOW = 240_000
CHROMIUM_ENV = "LACUNA_CHROMIUM"  # a path, or a command name on PATH
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(env: dict[str, str] | None = None) -> str:
    """``$LACUNA_CHROMIUM``, else the first Chromium on ``PATH``, else Debian's path.

    The result may not exist (the fixture then skips, or fails in CI, naming it).
    """
    env = dict(os.environ) if env is None else env
    path = env.get("PATH")
    wanted = env.get(CHROMIUM_ENV)
    if wanted:
        return shutil.which(wanted, path=path) or wanted
    for name in CHROMIUM_NAMES:
        found = shutil.which(name, path=path)
        if found:
            return found
    return "/usr/bin/chromium"


CHROMIUM = find_chromium()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f} s")


@contextmanager
def running_app(home: Path, extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """``streamlit run app.py`` headless on 127.0.0.1:<free port>; yields the base URL."""
    port = free_port()
    env = {**os.environ, "LACUNA_HOME": str(home), "PYTHONPATH": str(ROOT), **(extra_env or {})}
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app.py"),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    log = (home / "streamlit.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    SERVER_LOGS[url] = home / "streamlit.log"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


SERVER_LOGS: dict[str, Path] = {}  # base URL -> the app server's output (``running_app``)


def server_log_tail(page_url: str, lines: int = 30) -> str:
    """The last ``lines`` of the output of the app serving ``page_url`` (for a failure's
    message: a traceback of a background job is printed there, not on the page)."""
    for url, path in SERVER_LOGS.items():
        if page_url.startswith(url) and path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            return "\n".join(text) or "(empty)"
    return "(no server log)"


def launch_browser(playwright):  # type: ignore[no-untyped-def]
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def open_page(page, title: str) -> None:  # type: ignore[no-untyped-def]
    """Click a page in the sidebar navigation (keeps the session, unlike a new URL)."""
    page.get_by_test_id("stSidebar").get_by_role("link", name=title).click()
    page.get_by_role("heading", level=1).first.wait_for()


def metric(page, label: str):  # type: ignore[no-untyped-def]
    """The metric whose label reads exactly ``label``: not one whose value, caption or
    help text merely contains it (a caption "plan version 0" once matched "Plan
    version"). While a fragment reruns, Streamlit can show the stale element beside the
    new one for a moment (one clean-clone run found two "Micro-batches"): readers of a
    value take the first."""
    exact = re.compile(rf"^\s*{re.escape(label)}\s*$")
    return page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").filter(has_text=exact)
    )


def metric_value(page, label: str) -> str:  # type: ignore[no-untyped-def]
    return str(metric(page, label).first.get_by_test_id("stMetricValue").inner_text())


def wait_idle(page, timeout: float = 60_000) -> None:  # type: ignore[no-untyped-def]
    """Wait until Streamlit has finished the current script run."""
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout
    )
