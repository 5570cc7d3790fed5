"""Streamlit glue between the pages and the engine (the engine never imports this)."""
