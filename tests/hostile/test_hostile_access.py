"""Who may act: without credentials no page acts, a wrong token is refused without saying
which part was wrong, and destructive actions are recorded with who and when."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from engine.live import AuditLog
from ui.access import REFUSED, AccessError, check_token, decide, is_local_address, parse_tokens

pytestmark = pytest.mark.app
ROOT = Path(__file__).resolve().parents[2]
PAGES = ("data", "tune", "graph", "plan", "live", "disorder", "export", "production")
TOKEN = "correct-horse-battery-staple"
WIDGETS = ("button", "text_input", "number_input", "selectbox", "slider", "select_slider",
           "checkbox", "toggle", "radio", "multiselect", "text_area")  # fmt: skip


@pytest.fixture(autouse=True)
def private_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("LACUNA_HOME", str(tmp_path / "home"))  # the app reads it at every call
    monkeypatch.setenv("LACUNA_SAMPLE", str(ROOT / "sample_data" / "beijing_aq_small.csv"))
    monkeypatch.setenv("LACUNA_MAX_FOLDS", "3")
    monkeypatch.delenv("LACUNA_TOKEN", raising=False)
    yield


@pytest.fixture
def address() -> Iterator[callable]:
    """``address("0.0.0.0")`` makes the server's ``server.address`` that for the test."""
    before = st_config.get_option("server.address")

    def set_to(value: str) -> None:
        st_config.set_option("server.address", value)

    yield set_to
    st_config.set_option("server.address", before)


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=120)


def _widgets(at: AppTest) -> int:
    return sum(len(at.get(kind)) for kind in WIDGETS)


@pytest.mark.parametrize(
    ("where", "local"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("127.0.0.2", True), ("0.0.0.0", False), ("", False), ("192.168.1.5", False),
     ("::", False), ("lacuna.example.org", False)],
)  # fmt: skip
def test_only_loopback_is_local(where: str, local: bool) -> None:
    assert is_local_address(where) is local
    assert decide(where, False, None).kind == ("local" if local else "refuse")
    assert decide(where, False, TOKEN).kind == "token"  # a token is asked for everywhere
    assert decide(where, True, None).kind == "oidc"


def test_tokens_are_long_and_named_once() -> None:
    assert parse_tokens(TOKEN) == {"operator": TOKEN}
    assert parse_tokens(f"alice:{TOKEN},bob:{TOKEN[::-1]}") == {"alice": TOKEN, "bob": TOKEN[::-1]}
    for bad in ("short", f"alice:{TOKEN},alice:{TOKEN}", f"{TOKEN},bob:{TOKEN}", f":{TOKEN}"):
        with pytest.raises(AccessError):
            parse_tokens(bad)
    tokens = parse_tokens(f"alice:{TOKEN},bob:{TOKEN[::-1]}")
    assert check_token(tokens, "alice", TOKEN) == "alice"
    assert check_token(tokens, "bob", TOKEN) is None  # alice's token is not bob's
    assert check_token(tokens, "carol", TOKEN) is None
    assert check_token(tokens, "alice", TOKEN + "x") is None


@pytest.mark.parametrize("name", PAGES)
def test_on_a_shared_address_without_credentials_no_page_acts(address, name: str) -> None:
    address("0.0.0.0")
    at = _page(name).run()
    assert not at.exception
    assert [e.value for e in at.error] == [decide("0.0.0.0", False, None).reason]
    assert _widgets(at) == 0 and not at.title  # nothing to press, nothing rendered


@pytest.mark.parametrize("name", PAGES)
def test_with_a_token_every_page_asks_for_it_first(
    address, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    address("0.0.0.0")
    monkeypatch.setenv("LACUNA_TOKEN", TOKEN)
    at = _page(name).run()
    assert not at.title and [b.label for b in at.button] == ["Sign in"]
    assert [t.label for t in at.text_input] == ["Token"]


def test_a_wrong_name_or_token_is_refused_the_same_way(
    address, monkeypatch: pytest.MonkeyPatch
) -> None:
    address("0.0.0.0")
    monkeypatch.setenv("LACUNA_TOKEN", f"alice:{TOKEN},bob:{TOKEN[::-1]}")
    said = []
    for name, token in (("alice", TOKEN[::-1]), ("mallory", TOKEN), ("bob", "")):
        at = _page("data").run()
        at.text_input(key="access_name").input(name)
        at.text_input(key="access_token").input(token)
        at.button[0].click().run()
        said.append([e.value for e in at.error])
        assert not at.title  # still only the form
    assert said == [[REFUSED]] * 3  # the same words, whichever part was wrong
    at = _page("data").run()
    at.text_input(key="access_name").input("bob")
    at.text_input(key="access_token").input(TOKEN[::-1])
    at.button[0].click().run()
    assert at.title[0].value == "Data" and not at.error
    assert at.session_state["access_identity"] == "bob (token)"


def test_streamlits_own_login_is_offered_when_configured(address) -> None:
    address("0.0.0.0")
    idp = "https://idp.example.org/.well-known/openid-configuration"
    auth = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "x" * 32,
            "client_id": "lacuna", "client_secret": "s", "server_metadata_url": idp}  # fmt: skip
    at = _page("live")
    at.secrets["auth"] = auth
    at.user = {"is_logged_in": False}
    at.run()
    assert [b.label for b in at.button] == ["Log in"] and not at.title
    at.user = {"is_logged_in": True, "email": "ops@example.org"}
    at.run()
    assert at.title[0].value == "Live pipeline"
    assert at.session_state["access_identity"] == "ops@example.org"


def test_on_this_machine_the_app_needs_no_credentials(address) -> None:
    address("127.0.0.1")  # .streamlit/config.toml: the README's command on a fresh machine
    at = _page("data").run()
    assert at.title[0].value == "Data" and not at.error


def test_stop_archive_and_delete_are_recorded_and_shown(address, tmp_path: Path) -> None:
    address("127.0.0.1")
    clock = iter(datetime(2026, 1, 1, h, tzinfo=UTC) for h in range(3))
    log = AuditLog(tmp_path / "home", now=lambda: next(clock))
    log.record("stop", "alice (token)", "run 3")
    log.record("archive", "ops@example.org", "earlier run in /x/pipeline")
    log.record("delete", "bob (token)", "earlier run in /x/pipeline")
    (log.path).open("a").write('{"at": "2026-01-01T03:0')  # a line cut by a crash
    got = [(e.who, e.action, e.at) for e in log.entries()]
    assert got == [
        ("bob (token)", "delete", "2026-01-01T02:00:00+00:00"),
        ("ops@example.org", "archive", "2026-01-01T01:00:00+00:00"),
        ("alice (token)", "stop", "2026-01-01T00:00:00+00:00"),
    ]
    at = _page("live").run()
    table = next(t.value for t in at.table if "who" in t.value.columns)
    assert table["action"].tolist() == ["delete", "archive", "stop"]
    assert table["who"].tolist()[0] == "bob (token)"


def test_the_docker_entry_refuses_to_start_without_credentials() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LACUNA_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "ui.access", "0.0.0.0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: Lacuna is listening on 0.0.0.0 without credentials")
    ok = subprocess.run([sys.executable, "-m", "ui.access", "0.0.0.0"], cwd=ROOT,
                        env={**env, "LACUNA_TOKEN": TOKEN}, timeout=120)  # fmt: skip
    assert ok.returncode == 0
