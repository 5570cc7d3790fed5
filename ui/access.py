"""Who may use the app: every page asks here first (``ui.shell.frame``), and acts only then.

An operator console that uploads data, starts, stops, archives and deletes runs and
hands out configs sits behind a login. In order:

* **Streamlit's own login** (OpenID Connect, ``st.login``) when ``.streamlit/secrets.toml``
  has an ``[auth]`` section: a page shows only *Log in* until ``st.user.is_logged_in``;
  the identity is the provider's e-mail (or name).
* **A token from the environment**, ``LACUNA_TOKEN``: one secret (``LACUNA_TOKEN=s3cret...``)
  or one per operator (``LACUNA_TOKEN=alice:s3cret...,bob:0ther...``), each at least
  ``MIN_TOKEN`` characters. A page shows only the sign-in form until the session signs
  in; a wrong name or token is refused with one message whichever part was wrong, and
  every entry is compared in constant time, so neither the text nor the time tells.
* **Nothing, on this machine only**: listening on a loopback address (the default,
  ``.streamlit/config.toml``), the app needs no credentials (the README's first command
  on a fresh machine); the identity is the operating-system user running the server.
* **Refused** on any other address (``--server.address 0.0.0.0``, a LAN address, or
  ``""`` = every interface) with neither of the above: every page says why in one line
  and does nothing (Streamlit runs no app code before a browser connects, so the server
  itself starts; the Docker image's entry checks before it starts, ``python -m ui.access``).
"""

from __future__ import annotations

import getpass
import hmac
import ipaddress
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

TOKEN_ENV = "LACUNA_TOKEN"
MIN_TOKEN = 16
SIGNED_IN = "access_user"  # session-state key: the name a token session signed in as
IDENTITY = "access_identity"  # session-state key: who this page's actions are by
REFUSED = "Sign-in refused: the name or the token is wrong."
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


class AccessError(ValueError):
    """The access settings themselves are unusable (one line, shown on every page)."""


@dataclass(frozen=True)
class Policy:
    """How this server admits a session: ``oidc``, ``token``, ``local`` or ``refuse``."""

    kind: str
    tokens: Mapping[str, str]  # name -> token (``token`` only)
    reason: str = ""  # ``refuse``: why, in one line

    @property
    def named(self) -> bool:
        return self.kind == "token" and set(self.tokens) != {"operator"}


def is_local_address(address: str) -> bool:
    """Whether a ``server.address`` listens on this machine only (``""`` is every one)."""
    host = address.strip().strip("[]")
    if not host:
        return False
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def parse_tokens(text: str | None) -> dict[str, str]:
    """``LACUNA_TOKEN``'s value as {name: token}: ``TOKEN`` (``operator``'s) or
    ``NAME:TOKEN,NAME:TOKEN`` (a token holds neither ``,`` nor ``:``)."""
    items = [i.strip() for i in (text or "").split(",") if i.strip()]
    out: dict[str, str] = {}
    for item in items:
        if ":" in item:
            name, token = (part.strip() for part in item.split(":", 1))
        elif len(items) == 1:
            name, token = "operator", item
        else:
            name, token = "", ""
        if not name or name in out:
            raise AccessError(f"{TOKEN_ENV} entries must be NAME:TOKEN with distinct names")
        if len(token) < MIN_TOKEN:
            raise AccessError(
                f"{TOKEN_ENV}: the token of {name!r} is shorter than {MIN_TOKEN} characters"
            )
        out[name] = token
    return out


def check_token(tokens: Mapping[str, str], name: str, token: str) -> str | None:
    """The signed-in name, or None. Every entry is compared (``hmac.compare_digest``) and
    none is skipped, so a wrong name and a wrong token take the same time."""
    found = None
    for known, secret in tokens.items():
        name_ok = hmac.compare_digest(known.encode(), (name or "operator").encode())
        token_ok = hmac.compare_digest(secret.encode(), token.encode())
        if name_ok & token_ok:
            found = known
    return found


def decide(address: str, oidc: bool, token_env: str | None) -> Policy:
    """The policy for a server listening on ``address`` (pure: the tests' entry)."""
    if oidc:
        return Policy("oidc", {})
    tokens = parse_tokens(token_env)
    if tokens:
        return Policy("token", tokens)
    if is_local_address(address):
        return Policy("local", {})
    shown = address or "every interface"
    return Policy(
        "refuse",
        {},
        f"Lacuna is listening on {shown} without credentials: set {TOKEN_ENV} (at least "
        f"{MIN_TOKEN} characters) or configure [auth] in .streamlit/secrets.toml (st.login), "
        "or listen on 127.0.0.1.",
    )


def current_policy() -> Policy:
    try:
        address = str(st.get_option("server.address") or "")
        return decide(address, _oidc_configured(), os.environ.get(TOKEN_ENV))
    except AccessError as err:
        return Policy("refuse", {}, str(err))


def require() -> str:
    """Admit the session or stop the page (``st.stop``); the session's identity, kept for
    ``current_user`` (the audit log's *who*)."""
    policy = current_policy()
    if policy.kind == "refuse":
        st.error(policy.reason)
        st.stop()
    if policy.kind == "local":
        who = f"{_os_user()} (this machine)"
    elif policy.kind == "oidc":
        who = _oidc_user()
    else:
        who = _token_user(policy)
    st.session_state[IDENTITY] = who
    return who


def current_user() -> str:
    """The identity ``require`` admitted on this page."""
    who = st.session_state.get(IDENTITY)
    if not who:  # a page that did not ask first: never act anonymously
        return require()
    return str(who)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a name
        return f"uid {os.getuid()}"


def _oidc_configured() -> bool:
    return bool(st.secrets.load_if_toml_exists() and "auth" in st.secrets)


def _oidc_user() -> str:
    if not st.user.is_logged_in:
        st.info("Lacuna needs you to log in.")
        st.button("Log in", key="access_login", on_click=st.login, type="primary")
        st.stop()
    with st.sidebar:
        st.button("Log out", key="access_logout", on_click=st.logout)
    return str(st.user.get("email") or st.user.get("name") or "signed-in user")


def _token_user(policy: Policy) -> str:
    name = st.session_state.get(SIGNED_IN)
    if name in policy.tokens:
        with st.sidebar:
            if st.button("Sign out", key="access_signout"):
                st.session_state.pop(SIGNED_IN, None)
                st.rerun()
        return f"{name} (token)"
    with st.form("access_form"):
        st.markdown("**Sign in to Lacuna**")
        given = st.text_input("Name", key="access_name") if policy.named else "operator"
        token = st.text_input("Token", type="password", key="access_token")
        sent = st.form_submit_button("Sign in", type="primary")
    if sent:
        who = check_token(policy.tokens, given, token)
        if who is None:
            st.error(REFUSED)
        else:
            st.session_state[SIGNED_IN] = who
            st.rerun()
    st.stop()
    return ""  # unreachable: st.stop() raises


def main() -> int:
    """``python -m ui.access ADDRESS``: exit 2 with the reason when a server on ADDRESS
    would refuse every session (the Docker image checks this before it starts)."""
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    secrets = Path(".streamlit") / "secrets.toml"
    oidc = secrets.is_file() and "[auth" in secrets.read_text(encoding="utf-8")
    try:
        policy = decide(address, oidc, os.environ.get(TOKEN_ENV))
    except AccessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if policy.kind == "refuse":
        print(f"error: {policy.reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
