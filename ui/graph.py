"""The correlation graph: nodes = sensors, edges = strong correlations.

Layout: classical multidimensional scaling of the correlation distance
``sqrt(2 (1 - |r|))`` places strongly correlated sensors close together; a
few force-directed steps from there (edges pull, all nodes push) then keep
near-identical sensors from hiding each other. Both are deterministic, so the
picture does not jump between reruns.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from scipy.cluster.hierarchy import fcluster, leaves_list, linkage
from scipy.spatial.distance import squareform

from engine.planning import BackupPlan
from ui.charts import BACKUP_COLOUR, _layout
from ui.plans import error_bounds


def correlation(cov: np.ndarray) -> np.ndarray:
    """(n, n) correlation from a covariance; constant sensors get 0 off the diagonal."""
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = cov / np.outer(sd, sd)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def layout_positions(corr: np.ndarray) -> np.ndarray:
    """(n, 2) coordinates by classical MDS of ``sqrt(2 (1 - |r|))``."""
    n = corr.shape[0]
    if n < 3:
        return np.column_stack([np.arange(n, dtype=float), np.zeros(n)])
    d2 = 2.0 * (1.0 - np.abs(corr))
    centre = np.eye(n) - np.ones((n, n)) / n
    b = -0.5 * centre @ d2 @ centre
    vals, vecs = np.linalg.eigh(b)
    top = np.argsort(vals)[::-1][:2]
    pos = vecs[:, top] * np.sqrt(np.maximum(vals[top], 1e-12))
    # Coincident points (identical sensors) would hide each other: spread them a little.
    jitter = 0.02 * np.column_stack([np.cos(np.arange(n)), np.sin(np.arange(n))])
    return pos + jitter * max(1e-3, float(np.ptp(pos)) if pos.size else 1.0)


GRAVITY = 1.0
LABEL_ALL_N = 40  # names shown: every sensor up to this many, else backed-up ones up to it


def spring_layout(
    corr: np.ndarray, edges: list[tuple[int, int]], iterations: int = 120
) -> np.ndarray:
    """(n, 2) positions: Fruchterman-Reingold started from the MDS layout."""
    pos = layout_positions(corr)
    n = pos.shape[0]
    if n < 3:
        return pos
    pos = (pos - pos.mean(axis=0)) / max(float(np.abs(pos).max()), 1e-12)
    k = 2.0 / np.sqrt(n)  # ideal distance in a [-1, 1] box
    ii = np.array([e[0] for e in edges], dtype=int)
    jj = np.array([e[1] for e in edges], dtype=int)
    weight = np.abs(corr[ii, jj]) if edges else np.zeros(0)
    for step in range(iterations):
        diff = pos[:, None, :] - pos[None, :, :]
        dist = np.maximum(np.linalg.norm(diff, axis=2), 1e-3)
        move = (diff / dist[..., None] * (k * k / dist)[..., None]).sum(axis=1)
        move -= GRAVITY * pos  # keeps unconnected groups from drifting apart
        if edges:
            d = pos[ii] - pos[jj]
            length = np.maximum(np.linalg.norm(d, axis=1), 1e-3)
            pull = d / length[:, None] * (length * length / k * weight)[:, None]
            np.add.at(move, ii, -pull)
            np.add.at(move, jj, pull)
        temperature = 0.1 * (1.0 - step / iterations) + 1e-3
        size = np.maximum(np.linalg.norm(move, axis=1), 1e-12)
        pos = pos + move / size[:, None] * np.minimum(size, temperature)[:, None]
    return pos


def strong_edges(
    corr: np.ndarray, threshold: float | None = None, top_k: int | None = None
) -> list[tuple[int, int]]:
    """Edges (i < j) with ``|r| >= threshold``, or each node's ``top_k`` strongest."""
    a = np.abs(corr.copy())
    np.fill_diagonal(a, -1.0)
    n = a.shape[0]
    edges: set[tuple[int, int]] = set()
    if top_k is not None:
        k = max(0, min(top_k, n - 1))
        for i in range(n):
            for j in np.argsort(-a[i])[:k]:
                edges.add((min(i, int(j)), max(i, int(j))))
    if threshold is not None:
        ii, jj = np.nonzero(np.triu(a >= threshold, 1))
        edges.update(zip(ii.tolist(), jj.tolist(), strict=True))
    return sorted(edges)


def cluster_order(corr: np.ndarray) -> list[int]:
    """Sensor order that puts correlated sensors next to each other (heatmap rows)."""
    n = corr.shape[0]
    if n < 3:
        return list(range(n))
    dist = np.clip(1.0 - np.abs(corr), 0.0, None)
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2.0
    return [int(i) for i in leaves_list(linkage(squareform(dist, checks=False), "average"))]


def clusters(corr: np.ndarray, max_clusters: int | None = None) -> np.ndarray:
    """(n,) cluster label per sensor: average-linkage clusters of ``1 - |r|``.

    At most ``max_clusters`` (default ``ceil(sqrt(n))``), cut where the tree joins
    groups less correlated than |r| = 0.5, so unrelated quantities stay apart.
    """
    n = corr.shape[0]
    if n < 3:
        return np.zeros(n, dtype=int)
    dist = np.clip(1.0 - np.abs(corr), 0.0, None)
    np.fill_diagonal(dist, 0.0)
    tree = linkage(squareform((dist + dist.T) / 2.0, checks=False), "average")
    k = max_clusters or int(np.ceil(np.sqrt(n)))
    by_distance = fcluster(tree, t=0.5, criterion="distance")
    if by_distance.max() <= k:
        return by_distance - 1
    return fcluster(tree, t=k, criterion="maxclust") - 1


def cluster_layout(corr: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n, 2) positions: clusters on a grid, largest first; each cluster's sensors on a
    circle (in cluster order), so communities read as separate groups, not one hairball."""
    n = corr.shape[0]
    order = cluster_order(corr)
    rank = {int(i): r for r, i in enumerate(order)}
    ids = sorted(set(labels.tolist()), key=lambda c: (-int((labels == c).sum()), c))
    cols = int(np.ceil(np.sqrt(len(ids))))
    sizes = [int((labels == c).sum()) for c in ids]
    cell = 2.2 * _radius(max(sizes)) + 1.0
    pos = np.zeros((n, 2))
    for g, c in enumerate(ids):
        members = sorted(np.flatnonzero(labels == c).tolist(), key=lambda i: rank[i])
        centre = np.array([g % cols, -(g // cols)], dtype=float) * cell
        pos[members] = centre + _disc(len(members))
    return pos


def cluster_names(
    sensors: tuple[str, ...], labels: np.ndarray, pos: np.ndarray
) -> list[tuple[str, tuple[float, float]]]:
    """A caption above each cluster: its commonest name suffixes (quantities) and size."""
    out = []
    for c in sorted(set(labels.tolist())):
        idx = np.flatnonzero(labels == c)
        suffixes: dict[str, int] = {}
        for i in idx:
            q = sensors[i].rsplit("_", 1)[-1]
            suffixes[q] = suffixes.get(q, 0) + 1
        top = sorted(suffixes, key=lambda q: (-suffixes[q], q))
        name = "/".join(top[:3]) + ("/..." if len(top) > 3 else "")
        x, top_y = float(pos[idx, 0].mean()), float(pos[idx, 1].max())
        out.append((f"{name} ({len(idx)})", (x, top_y + 0.3)))
    return out


RING_MAX = 24  # a cluster this small sits on a ring (room for names); larger: a disc


def _radius(m: int) -> float:
    if m == 1:
        return 0.0
    return max(0.5 * np.sqrt(m), 0.16 * m) if m <= RING_MAX else 0.5 * np.sqrt(m)


def _disc(m: int) -> np.ndarray:
    """(m, 2) points: on a ring up to ``RING_MAX``, else spread over a disc (sunflower)."""
    if m <= RING_MAX:
        angles = 2 * np.pi * np.arange(m) / m
        return _radius(m) * np.column_stack([np.cos(angles), np.sin(angles)])
    k = np.arange(m) + 0.5
    r = _radius(m) * np.sqrt(k / m)
    theta = k * np.pi * (3.0 - np.sqrt(5.0))  # the golden angle
    return np.column_stack([r * np.cos(theta), r * np.sin(theta)])


def _hover(plan: BackupPlan) -> list[str]:
    bounds = error_bounds(plan)
    lines = []
    for i, s in enumerate(plan.sensors):
        if s in plan.backup_sensors:
            lines.append(f"<b>{s}</b><br>backed up (recovered exactly)")
            continue
        var, target = plan.conditional_variance[i], plan.targets[i]
        src = ", ".join(f"{b} ({c:+.2f})" for b, c in plan.sources(s, 3))
        lines.append(
            f"<b>{s}</b><br>reconstructed<br>conditional variance {var:.4g}"
            f"<br>target {target:.4g} (ratio {var / max(target, 1e-300):.2f})"
            f"<br>model error bound {bounds[i]:.3g}<br>from {src}"
        )
    return lines


def _edge_traces(
    pos: np.ndarray, corr: np.ndarray, edges: list[tuple[int, int]], label: str
) -> list:
    """Edges in two widths (|corr| below and at least 0.9); the legend names the mode."""
    traces = []
    for strong in (False, True):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for i, j in edges:
            if (abs(corr[i, j]) >= 0.9) == strong:
                xs += [pos[i, 0], pos[j, 0], None]
                ys += [pos[i, 1], pos[j, 1], None]
        if not xs:
            continue
        line = {"width": 2.0 if strong else 0.7, "color": "rgba(90,90,90,0.45)"}
        name = f"{label}, |corr| >= 0.9" if strong else f"{label}, |corr| < 0.9"
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", line=line, name=name))
    return traces


def _node_trace(plan: BackupPlan, pos: np.ndarray, idx: np.ndarray, backup: bool) -> go.Scatter:
    """Stars for backed-up sensors; circles coloured by var / target for the others."""
    ratio = plan.conditional_variance / np.maximum(plan.targets, 1e-300)
    small = len(plan.sensors) > 60
    marker = (
        {"size": 13 if small else 18, "color": BACKUP_COLOUR, "symbol": "star"}
        if backup
        else {
            "size": 8 if small else 12,
            "color": ratio[idx],
            "colorscale": "Blues",
            "cmin": 0,
            "cmax": 1,
            "line": {"width": 1, "color": "#333"},
            "colorbar": {"title": "var / target", "x": 1.02},
        }
    )
    hover = _hover(plan)
    # Every name fits up to 40 sensors; beyond that only the backed-up ones are named
    # (the rest on hover), offset so a label never covers its star.
    n_backup = len(plan.backup_sensors)
    labelled = len(plan.sensors) <= LABEL_ALL_N or (backup and n_backup <= LABEL_ALL_N)
    return go.Scatter(
        x=pos[idx, 0],
        y=pos[idx, 1],
        mode="markers+text" if labelled else "markers",
        text=[plan.sensors[i] for i in idx],
        textposition="bottom center" if backup else "top center",
        textfont={"size": 9, "color": BACKUP_COLOUR if backup else "#333"},
        hovertext=[hover[i] for i in idx],
        hoverinfo="text",
        marker=marker,
        name="backed up" if backup else "reconstructed",
    )


def graph_figure(
    plan: BackupPlan, corr: np.ndarray, edges: list[tuple[int, int]], edge_label: str
) -> go.Figure:
    """Sensors grouped by correlation cluster, edges by |r|, backed-up sensors as stars."""
    labels = clusters(corr)
    pos = cluster_layout(corr, labels)
    fig = go.Figure(_edge_traces(pos, corr, edges, edge_label))
    backup = np.array([s in plan.backup_sensors for s in plan.sensors])
    for is_backup in (False, True):
        fig.add_trace(_node_trace(plan, pos, np.flatnonzero(backup == is_backup), is_backup))
    for text, (x, y) in cluster_names(plan.sensors, labels, pos):
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, yanchor="bottom",
                           font={"size": 11, "color": "#555"})  # fmt: skip
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, scaleanchor="x")
    title = (
        f"Correlation graph: {len(edges)} edges, {int(backup.sum())} backed-up sensors (stars), "
        f"{labels.max() + 1} clusters"
    )
    return _layout(fig, title, 620 if len(plan.sensors) <= LABEL_ALL_N else 760)
