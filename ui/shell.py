"""The app's frame: page config and the sidebar navigation, the same on every URL.

Streamlit runs a page file on its own (its pages-directory mode, with a raw
file list for navigation) when a session opens a deep link such as ``/live``
before any session has run ``app.py``. So every page calls ``frame()`` first:
the page config and the titled navigation then come from here, whichever way
the page was reached, and ``client.showSidebarNavigation = false`` hides
Streamlit's own list in both modes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui import access, resources


class PageSpec(NamedTuple):
    path: str  # relative to app.py
    title: str
    icon: str
    url_path: str  # "" for the default page


PAGES: tuple[PageSpec, ...] = (
    PageSpec("pages/data.py", "Data", ":material/database:", ""),
    PageSpec("pages/tune.py", "Tune", ":material/tune:", "tune"),
    PageSpec("pages/graph.py", "Graph", ":material/hub:", "graph"),
    PageSpec("pages/plan.py", "Plan & savings", ":material/savings:", "plan"),
    PageSpec("pages/live.py", "Live pipeline", ":material/stream:", "live"),
    PageSpec("pages/disorder.py", "Disorder", ":material/shuffle:", "disorder"),
    PageSpec("pages/export.py", "Export", ":material/download:", "export"),
    PageSpec("pages/production.py", "Production job", ":material/factory:", "production"),
)


def navigation_pages() -> list:
    """``st.Page`` objects for ``st.navigation`` in ``app.py``."""
    return [
        st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url_path or None,
                default=not p.url_path)
        for p in PAGES
    ]  # fmt: skip


def _links() -> list[tuple[str, PageSpec]]:
    """(path relative to the running entry script, page) for every page this run can
    link to (none but itself in an AppTest of one page file)."""
    ctx = get_script_run_ctx()
    if ctx is None:
        return []
    pages = ctx.pages_manager.get_pages().values()  # unregistered (bare run): no hash
    known = {str(Path(p["script_path"]).resolve()) for p in pages if p["page_script_hash"]}
    entry = Path(ctx.main_script_path).resolve().parent
    root = Path(__file__).resolve().parent.parent
    return [
        (os.path.relpath(root / p.path, entry), p)
        for p in PAGES
        if str((root / p.path).resolve()) in known
    ]


def frame() -> None:
    """Page config, the access check and the sidebar links; call first on every page.

    A session the access policy does not admit (``ui.access``) sees the sign-in, or
    the reason it is refused, and the page stops there: no page acts without it.
    """
    st.set_page_config(page_title="Lacuna", page_icon=":material/shield:", layout="wide")
    st.set_option("client.showErrorDetails", "type")  # never a traceback in the browser
    access.require()
    with st.sidebar:
        st.markdown("**Lacuna**")
        for path, p in _links():
            st.page_link(path, label=p.title, icon=p.icon)
        fallback = resources.home_fallback()
        if fallback:
            st.warning(fallback)
