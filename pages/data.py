"""Data: upload a history (or keep the sample), see what was found, pick sensors."""

import streamlit as st

from ui import charts, datasets, panels, shell, state, widgets

shell.frame()
st.title("Data")
st.caption(
    "Upload a CSV or Parquet sensor history (wide: a time column and one column per "
    "sensor; long: time, sensor, value rows), or work with the shipped sample."
)
with panels.page_guard():
    c1, c2 = st.columns([4, 1])
    uploaded = c1.file_uploader("Sensor history", type=datasets.UPLOAD_TYPES, key="w_upload")
    c2.button("Use the shipped sample", on_click=datasets.use_sample, width="stretch")
    with st.expander("Upload options"):
        options = widgets.load_options()
    datasets.accept_upload(uploaded, options)
    dataset = state.current_dataset()
    st.subheader(f"Dataset: {dataset.name}")
    datasets.report_summary(dataset)
    st.subheader("Sensors to plan for")
    chosen = widgets.sensor_picker(dataset.history.sensors)
    if len(chosen) < state.MIN_SENSORS:
        st.warning(panels.too_few_sensors(dataset, len(chosen)))
    else:
        st.caption(f"{len(chosen)} sensors chosen; next: **Tune** the tolerance.")
        st.plotly_chart(charts.preview_chart(dataset.history, chosen))
    with st.expander("Missing values per sensor"):
        st.dataframe(datasets.missing_table(dataset), hide_index=True)
