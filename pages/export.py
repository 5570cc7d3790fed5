"""Export: the backup config as JSON or YAML, a preview and the production snippets."""

import streamlit as st

from ui import exporting, panels, shell

shell.frame()
st.title("Export")
with panels.page_guard():
    data, plan = panels.page_plan()
    fmt = st.radio("Format", ["json", "yaml"], horizontal=True, key="w_export_format")
    config, text = exporting.config_text(plan, fmt)
    name = exporting.config_name(fmt)
    st.success(exporting.summary_text(config, name))
    st.caption(exporting.validity_text(config))
    c1, c2 = st.columns(2)
    c1.download_button(
        f"Download {name}",
        text,
        file_name=name,
        mime=exporting.MIME[fmt],
        type="primary",
        key="download_config",
    )
    c2.download_button(
        "Download the backed-up sensors' data (CSV)",
        exporting.backup_csv(data.history, plan),
        file_name=exporting.BACKUP_CSV,
        mime="text/csv",
    )
    st.caption(
        "Rebuild every sensor from the config and the backed-up data. That data is the "
        "history the plan was fitted on: the command checks the mechanics, not the "
        "accuracy (the rows are in-sample), and `recover` warns that they lie before the "
        "plan's validity period."
    )
    st.code(exporting.recover_command(name), language="bash")
    with st.expander(f"Preview of {name}", expanded=False):
        st.code(text, language=fmt)
    snippets = config["production"]
    st.subheader("Production snippets")
    st.caption(exporting.snippets_contract(plan))
    st.caption("Spark: persist only the backed-up sensors' readings.")
    st.code(snippets["spark_filter"], language="python")
    st.caption("Flink: checkpoint keys for the backed-up stream.")
    st.code(snippets["flink_config_yaml"], language="yaml")
