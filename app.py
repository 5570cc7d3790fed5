"""Lacuna operator app: only routing and page config (``streamlit run app.py``)."""

import os

# One BLAS thread: the engine's many small solves are ~10x slower with contending
# threads on a small machine. Must be set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# isort: off
import engine  # noqa: F401  (sets the remaining thread limits before numpy loads)
import streamlit as st

# isort: on

st.set_page_config(page_title="Lacuna", page_icon=":material/shield:", layout="wide")
st.set_option("client.showErrorDetails", "type")  # never a traceback in the browser

PAGES = [
    st.Page("pages/data.py", title="Data", icon=":material/database:", default=True),
    st.Page("pages/tune.py", title="Tune", icon=":material/tune:", url_path="tune"),
    st.Page("pages/graph.py", title="Graph", icon=":material/hub:", url_path="graph"),
    st.Page("pages/plan.py", title="Plan & savings", icon=":material/savings:", url_path="plan"),
    st.Page("pages/live.py", title="Live pipeline", icon=":material/stream:", url_path="live"),
    st.Page("pages/disorder.py", title="Disorder", icon=":material/shuffle:", url_path="disorder"),
    st.Page("pages/export.py", title="Export", icon=":material/download:", url_path="export"),
]
st.navigation(PAGES).run()
