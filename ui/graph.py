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
from ui.format import plural
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
    """Edges (i < j) with ``|r| >= threshold``, or each node's ``top_k`` strongest among
    those with some correlation (a constant sensor, |r| = 0 with every other, has none)."""
    a = np.nan_to_num(np.abs(corr), nan=0.0)
    np.fill_diagonal(a, -1.0)
    n = a.shape[0]
    edges: set[tuple[int, int]] = set()
    if top_k is not None:
        k = max(0, min(top_k, n - 1))
        for i in range(n):
            for j in np.argsort(-a[i])[:k]:
                if a[i, j] > 0.0:
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
    cell = 2.2 * _radius(max(sizes)) + 5.0  # room for the names written outwards
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
    return max(0.5 * np.sqrt(m), 0.24 * m) if m <= RING_MAX else 0.5 * np.sqrt(m)


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
        if s in plan.kept_sensors:  # its target is its whole variance: no bound to show
            lines.append(
                f"<b>{s}</b><br>keeps its readings under a crash (the window takes the "
                f"{plan.parameters.aggregate} of those the failure did not lose); a rebuilt "
                "range rebuilds it from the backup, with no eps bound"
            )
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


def label_positions(pos: np.ndarray, labels: np.ndarray) -> list[str]:
    """Where each node's name goes: away from its cluster's centre (right of a node on
    the right of its ring, left of one on the left, above or below the others), so
    neighbours on a ring write their names apart instead of over each other."""
    out = []
    for i in range(len(pos)):
        members = labels == labels[i]
        dx, dy = pos[i] - pos[members].mean(axis=0)
        norm = float(np.hypot(dx, dy))
        if norm < 1e-9:  # a cluster of one
            out.append("bottom center")
        elif dx / norm > 0.38:
            out.append("middle right")
        elif dx / norm < -0.38:
            out.append("middle left")
        else:
            out.append("top center" if dy > 0 else "bottom center")
    return out


CHAR_PX, LINE_PX, GAP_PX = 5.6, 12.0, 7.0  # a 9-px name: width per character, height
PLOT_PX = (640.0, 450.0)  # the smallest plot area the page draws in (a 1024 px window)
MARKER_PX = 5.0  # half the size of a node, as an obstacle for other nodes' names
Box = tuple[float, float, float, float]  # x0, x1, y0, y1 in pixels


def _label_box(x: float, y: float, text: str, where: str, size: float = 9.0) -> Box:
    w, h = CHAR_PX * size / 9.0 * len(text), LINE_PX * size / 9.0
    if where == "middle right":
        return (x + GAP_PX, x + GAP_PX + w, y - h / 2, y + h / 2)
    if where == "middle left":
        return (x - GAP_PX - w, x - GAP_PX, y - h / 2, y + h / 2)
    if where == "top center":
        return (x - w / 2, x + w / 2, y + GAP_PX, y + GAP_PX + h)
    return (x - w / 2, x + w / 2, y - GAP_PX - h, y - GAP_PX)


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def visible_labels(
    names: list[str],
    pos: np.ndarray,
    where: list[str],
    order: list[int],
    px_per_unit: float,
    taken: list[Box] = (),  # type: ignore[assignment]
) -> set[int]:
    """The nodes whose names are written: in ``order`` (backed-up first), each name that
    would cover one already written, another node or a box in ``taken`` is left to the
    hover."""
    placed, shown = list(taken), set()
    px = pos * px_per_unit
    r = MARKER_PX
    markers = [(float(x) - r, float(x) + r, float(y) - r, float(y) + r) for x, y in px]
    for i in order:
        box = _label_box(float(px[i, 0]), float(px[i, 1]), names[i], where[i])
        others = (m for j, m in enumerate(markers) if j != i)
        if not any(_overlaps(box, other) for other in placed) and not any(
            _overlaps(box, m) for m in others
        ):
            placed.append(box)
            shown.add(i)
    return shown


def _node_trace(
    plan: BackupPlan,
    pos: np.ndarray,
    idx: np.ndarray,
    backup: bool,
    where: list[str],
    shown: set[int],
    kept: bool = False,
) -> go.Scatter:
    """Stars for backed-up sensors; grey diamonds for those that keep their readings under
    a crash (max/min: no target from eps, so no ratio); circles coloured by var / target
    for the rebuilt ones."""
    ratio = plan.conditional_variance / np.maximum(plan.targets, 1e-300)
    small = len(plan.sensors) > 60
    marker = (
        {"size": 13 if small else 18, "color": BACKUP_COLOUR, "symbol": "star"}
        if backup
        else {"size": 8 if small else 12, "color": "#999", "symbol": "diamond"}
        if kept
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
    # Names are written where they cover no other name (``visible_labels``); the rest,
    # and every name beyond 40 sensors but the backed-up ones, are on hover.
    return go.Scatter(
        x=pos[idx, 0],
        y=pos[idx, 1],
        mode="markers+text" if any(i in shown for i in idx) else "markers",
        text=[plan.sensors[i] if i in shown else "" for i in idx],
        textposition=[where[i] for i in idx],
        textfont={"size": 9, "color": BACKUP_COLOUR if backup else "#333"},
        hovertext=[hover[i] for i in idx],
        hoverinfo="text",
        marker=marker,
        name="backed up" if backup else "keeps its readings (crash)" if kept else "reconstructed",
    )


def graph_figure(
    plan: BackupPlan, corr: np.ndarray, edges: list[tuple[int, int]], edge_label: str
) -> go.Figure:
    """Sensors grouped by correlation cluster, edges by |r|, backed-up sensors as stars."""
    labels = clusters(corr)
    pos = cluster_layout(corr, labels)
    fig = go.Figure(_edge_traces(pos, corr, edges, edge_label))
    backup = np.array([s in plan.backup_sensors for s in plan.sensors])
    where = label_positions(pos, labels)
    # room beyond the outermost nodes for names written outwards (plotly's autorange
    # fits the markers, not their text)
    (x0, y0), (x1, y1) = pos.min(axis=0), pos.max(axis=0)
    widest = CHAR_PX * max(len(s) for s in plan.sensors) + GAP_PX  # pixels
    pad, yr = 2.2, (y0 - 0.8, y1 + 0.9)
    for _ in range(3):  # the pad in units depends on the scale, the scale on the pad
        xr = (x0 - pad, x1 + pad)
        scale = min(PLOT_PX[0] / (xr[1] - xr[0]), PLOT_PX[1] / (yr[1] - yr[0]))
        pad = max(0.8, widest / scale)
    xr = (x0 - pad, x1 + pad)
    scale = min(PLOT_PX[0] / (xr[1] - xr[0]), PLOT_PX[1] / (yr[1] - yr[0]))
    fig.update_xaxes(visible=False, range=list(xr))
    fig.update_yaxes(visible=False, scaleanchor="x", range=list(yr))
    captions = cluster_names(plan.sensors, labels, pos)
    taken = [_label_box(x * scale, y * scale - GAP_PX, t, "top center", 11.0)
             for t, (x, y) in captions]  # fmt: skip
    n = len(plan.sensors)
    order = [i for i in range(n) if backup[i]] + [i for i in range(n) if not backup[i]]
    if n > LABEL_ALL_N:  # beyond 40 sensors only the backed-up ones are named
        order = [i for i in order if backup[i]][:LABEL_ALL_N]
    shown = visible_labels(list(plan.sensors), pos, where, order, scale, taken)
    keeps = np.isin(np.asarray(plan.sensors, dtype=object), list(plan.kept_sensors)) & ~backup
    for is_backup in (False, True):
        idx = np.flatnonzero((backup == is_backup) & ~keeps)
        fig.add_trace(_node_trace(plan, pos, idx, is_backup, where, shown))
    if keeps.any():
        fig.add_trace(_node_trace(plan, pos, np.flatnonzero(keeps), False, where, shown, True))
    for text, (x, y) in captions:
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, yanchor="bottom",
                           font={"size": 11, "color": "#555"})  # fmt: skip
    title = (
        f"Correlation graph: {plural(len(edges), 'edge')}, "
        f"{plural(int(backup.sum()), 'backed-up sensor')} (stars), "
        f"{plural(int(labels.max()) + 1, 'cluster')}"
    )
    return _layout(fig, title, 620 if len(plan.sensors) <= LABEL_ALL_N else 760)
