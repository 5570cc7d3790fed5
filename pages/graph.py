"""Graph: sensors as nodes, strong correlations as edges, backed-up sensors highlighted."""

import streamlit as st

from ui import charts, graph, panels, shell

shell.frame()
st.title("Correlation graph")
with panels.page_guard():
    data, plan = panels.page_plan()
    n = len(plan.sensors)
    c1, c2 = st.columns([1, 2])
    how = c1.radio(
        "Edges", ["strongest per sensor", "above a threshold"], horizontal=True, key="w_edge_mode"
    )
    if how == "strongest per sensor" and n <= 2:  # one neighbour each: nothing to choose
        c2.caption("Two sensors: each one's only edge is shown.")
        edges_kw, label = {"top_k": 1}, "top 1 per sensor"
    elif how == "strongest per sensor":
        k = c2.slider(
            "Edges per sensor (top-k by |corr|)", 1, min(10, n - 1), min(2, n - 1), key="w_top_k"
        )
        edges_kw, label = {"top_k": k}, f"top {k} per sensor"
    else:
        t = c2.slider("Show |corr| at least", 0.0, 1.0, 0.9, 0.01, key="w_threshold")
        edges_kw, label = {"threshold": t}, f"|corr| >= {t:g}"
    corr = graph.correlation(plan.model.cov_)
    edges = graph.strong_edges(corr, **edges_kw)
    st.plotly_chart(graph.graph_figure(plan, corr, edges, label))
    st.plotly_chart(
        charts.heatmap(corr, plan.sensors, graph.cluster_order(corr), plan.backup_sensors)
    )
    st.caption(
        "Stars are backed up; a name is written where it covers no other (the rest, and "
        "beyond 40 sensors all but the backed-up ones, show on hover). Node colour: "
        "the sensor's conditional variance given the backed-up sensors, as a share of its "
        "target (1 = at the limit). Hover a node for its variance, target, model error "
        "bound and the sensors it is rebuilt from."
    )
