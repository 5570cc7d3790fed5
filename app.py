"""Lacuna operator app: only routing (``streamlit run app.py``); each page draws the
frame (page config, navigation) itself through ``ui.shell.frame``, so a deep link
gives the same app."""

import os

# One BLAS thread: the engine's many small solves are ~10x slower with contending
# threads on a small machine. Must be set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# isort: off
import engine  # noqa: F401  (sets the remaining thread limits before numpy loads)
import streamlit as st

from ui import shell

# isort: on

st.navigation(shell.navigation_pages(), position="hidden").run()
