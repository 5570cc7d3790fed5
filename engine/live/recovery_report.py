"""The recovery report: recovered windows scored against the truth kept aside.

``score_recovery`` reads the recovered (and live) results of the lost range
from the store, recomputes the same windows from the true readings and gives
``RecoveryReport``: per-window errors, violation rates against each sensor's
eps, what was lost and rebuilt, and how long it took.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import ParameterError
from engine.live.records import INDEXED_KINDS
from engine.live.recovery import LostRange
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.planning.verdict import STATE_LABELS
from engine.windows import count_unheld, window_aggregates

if TYPE_CHECKING:
    from engine.planning import BackupPlan

__all__ = ["RecoveryReport", "covering_contract", "promise_note", "score_recovery"]


def covering_contract(failure: str, lost_rows: int, exposure: int | None) -> str:
    """The contract that covers a recovery: ``"crash"`` for a crash that kept the window
    state and lost at most the plan's exposure, ``"range"`` otherwise."""
    crash = failure == "crash" and exposure is not None and lost_rows <= exposure
    return "crash" if crash else "range"


@dataclass(frozen=True)
class RecoveryReport:
    """How recovery went, scored against the truth kept aside.

    ``errors`` is (W, n): the absolute error of every recovered window
    (``window_ids``) and sensor (``sensors`` order). Violation rates count
    errors above ``eps``; ``violation_rate`` is over the (window, reconstructed
    sensor) pairs, 0 when nothing is reconstructed. ``backup_rows`` are the rows
    read from the backup for the lost range; ``backup_bytes`` is the whole
    Parquet backup on disk (``backup_file_bytes`` the DuckDB file of the small
    tables: results, markers, state).
    """

    mode: str
    spark_version: str
    windows_lost: int
    windows_recovered: int
    windows_pending: int
    max_abs_error: float | None
    mean_abs_error: float | None
    violation_rate: float | None
    violation_rate_worst_sensor: float | None
    violation_rates: dict[str, float]
    eps: float
    delta: float
    window: int
    slide: int
    aggregate: str
    recovery_seconds: float
    backup_rows: int
    backup_bytes: int
    backup_file_bytes: int
    input_rows: int
    lost_rows: tuple[int, int]
    window_ids: tuple[int, ...]
    errors: tuple[tuple[float, ...], ...]
    sensors: tuple[str, ...]
    backup_sensors: tuple[str, ...]
    note: str
    eps_by_sensor: tuple[float, ...] = ()  # per-sensor eps, ``sensors`` order; () = eps

    def eps_for(self, sensor: str) -> float:
        """The eps ``sensor``'s windows were scored against."""
        if not self.eps_by_sensor:
            return self.eps
        return self.eps_by_sensor[self.sensors.index(sensor)]

    # Rebuilt rows of the lost range each plan version served ("id" -> rows; approx only).
    rows_by_version: dict[str, int] = field(default_factory=dict)
    # The plan versions of the stream (``PlanVersion.to_dict``, the open one up to now).
    plan_versions: tuple[dict[str, Any], ...] = ()
    # Lost windows that will get no result: a row they need had no whole backup when
    # recovery ran (with arrival delays, its backed-up readings can come after the failure).
    windows_unrecoverable: int = 0
    # What failed (``engine.live.failure``: "crash" or "machine") and the contract whose
    # measured miss rate covers this recovery: "crash" when the plan has an exposure and
    # the failure lost at most that many rows with the window state kept, else "range".
    failure: str = "machine"
    contract: str = "range"
    # (window, sensor) pairs of ``errors`` whose lost readings the backup held whole (a
    # micro-batch that stored every sensor): exact, not rebuilt, so not scored as rebuilt.
    # () when none.
    exact: tuple[tuple[bool, ...], ...] = ()

    def rebuilt_pairs(self) -> np.ndarray:
        """(W, n) bool: the (window, sensor) pairs scored as rebuilt (the sensors not
        backed up throughout, less the ``exact`` pairs)."""
        mask = np.tile([s not in self.backup_sensors for s in self.sensors], (len(self.errors), 1))
        if self.exact:
            mask &= ~np.asarray(self.exact, dtype=bool)
        return mask

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types; NaN becomes ``None``."""
        return _json_safe(asdict(self))


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def score_recovery(
    store: BackupStore,
    spec: StreamSpec,
    mode: str,
    lost: LostRange,
    truth: np.ndarray,
    *,
    spark_version: str,
    seconds: float,
    rows_read: int,
    input_rows: int,
    truth_first_seq: int = 0,
    stored: tuple[str, ...] | None = None,
    cells: np.ndarray | None = None,
) -> RecoveryReport:
    """Compare every recovered window of the lost range with the truth.

    ``truth`` is (T, n) in ``spec.sensors`` order, row ``i`` = reading ``truth_first_seq + i``.
    ``stored``: the sensors backed up throughout the lost range (default: ``spec``'s in
    ``mode``); the others are scored as rebuilt. A plan in force by the time the report
    is read may back up a sensor the lost rows had to rebuild. ``cells``: which readings
    of the lost range the backup held (``RecoveryOutcome.stored``); a (window, sensor)
    pair whose lost readings it held whole is exact, not rebuilt, and is not scored.
    """
    stored = spec.stored_sensors(mode) if stored is None else stored
    lost_ids = lost.lost_windows(spec.slide)
    ids, recovered = _recovered_windows(store, spec, lost_ids)
    errors = np.abs(recovered - _truth_aggregates(truth, ids, spec, truth_first_seq))
    eps = spec.eps_vector
    target = np.tile([s not in stored for s in spec.sensors], (len(ids), 1))
    exact = _exact_pairs(ids, spec, lost, cells) & target  # backed-up sensors score as before
    rebuilt = target & ~exact
    # per sensor, over its windows not held whole (NaN: none)
    counted = (~exact).sum(axis=0)
    over = ((errors > eps) & ~exact).sum(axis=0)
    rates = np.where(counted > 0, over / np.maximum(counted, 1), np.nan)
    missed = (errors > eps)[rebuilt] if mode == "approx" else np.zeros(0, dtype=bool)
    size = store.size()
    return RecoveryReport(
        mode=mode,
        spark_version=spark_version,
        windows_lost=int(lost_ids.size),
        windows_recovered=int(ids.size),
        windows_pending=0,
        max_abs_error=float(errors.max()) if errors.size else None,
        mean_abs_error=float(errors.mean()) if errors.size else None,
        violation_rate=float(missed.mean()) if missed.size else (0.0 if ids.size else None),
        violation_rate_worst_sensor=(
            float(np.nanmax(rates)) if ids.size and not np.isnan(rates).all() else None
        ),
        violation_rates={s: float(r) for s, r in zip(spec.sensors, rates, strict=True)},
        eps=spec.eps,
        delta=spec.delta,
        window=spec.window,
        slide=spec.slide,
        aggregate=spec.aggregate,
        recovery_seconds=float(seconds),
        backup_rows=int(rows_read),
        backup_bytes=size.backup_bytes,
        backup_file_bytes=size.file_bytes,
        input_rows=int(input_rows),
        lost_rows=(lost.first_row, lost.last_row),
        window_ids=tuple(int(j) for j in ids),
        errors=tuple(tuple(float(v) for v in row) for row in errors),
        sensors=spec.sensors,
        backup_sensors=stored,
        note=_note(mode, int(lost_ids.size), int(ids.size)),
        eps_by_sensor=tuple(spec.eps_vector.tolist()) if spec.query.eps_by_sensor else (),
        exact=tuple(tuple(bool(v) for v in row) for row in exact) if exact.any() else (),
    )


def _exact_pairs(
    ids: np.ndarray, spec: StreamSpec, lost: LostRange, cells: np.ndarray | None
) -> np.ndarray:
    """(W, n) bool: windows ``ids`` whose lost readings of a sensor ``cells`` holds whole
    (``cells``: (lost rows, n), row 0 = ``lost.first_row``); all False without ``cells``."""
    n = len(spec.sensors)
    if cells is None or not ids.size or not cells.size:
        return np.zeros((len(ids), n), dtype=bool)
    first = np.clip(ids * spec.slide - lost.first_row, 0, len(cells))
    last = np.clip(ids * spec.slide + spec.window - lost.first_row, 0, len(cells))
    return count_unheld(cells, first, last) == 0


def _truth_aggregates(
    truth: np.ndarray, ids: np.ndarray, spec: StreamSpec, first_seq: int
) -> np.ndarray:
    """(W, n) true aggregates of windows ``ids``, each on its own rows (bit-comparable)."""
    firsts = ids * spec.slide - first_seq
    if firsts.size and (firsts.min() < 0 or firsts.max() + spec.window > len(truth)):
        raise ParameterError(
            f"the truth ({len(truth)} rows from reading {first_seq}) does not cover "
            f"windows {int(ids.min())}..{int(ids.max())}"
        )
    w = spec.window
    rows = [window_aggregates(truth[f : f + w], w, w, spec.aggregate) for f in firsts]
    return np.vstack([np.zeros((0, len(spec.sensors))), *rows])


def _recovered_windows(
    store: BackupStore, spec: StreamSpec, lost_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Ids (W,) and aggregates (W, n) of the results among ``lost_ids``: ``recovered``, or
    ``live`` where no row was rebuilt (the backup held the lost rows whole: mode ``full``,
    a crashed batch that stored every sensor). Each came after the failure: a lost window
    had no result before it."""
    if lost_ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(spec.sensors)))
    res = store.read_results(windows=(int(lost_ids.min()), int(lost_ids.max())))
    res = res[res["kind"].isin(INDEXED_KINDS) & res["window_id"].isin(lost_ids.tolist())]
    res = res[res["final"]]
    if res.empty:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(spec.sensors)))
    wide = res.pivot_table(index="window_id", columns="sensor", values="value", aggfunc="last")
    wide = wide.reindex(columns=list(spec.sensors)).dropna()
    return wide.index.to_numpy(dtype=np.int64), wide.to_numpy(dtype=float)


def _note(mode: str, lost: int, recovered: int) -> str:
    if lost == 0:
        return "no window was lost: nothing to recover"
    if mode == "none":
        return f"mode none keeps no backup: {lost} window(s) lost, none can be recovered"
    missing = lost - recovered
    what = (
        "exact copies from the full backup"
        if mode == "full"
        else ("backed-up sensors exact, the others rebuilt with the plan's linear map")
    )
    tail = f"; {missing} window(s) not (yet) recovered" if missing else ""
    return f"{recovered} of {lost} lost window(s) recovered: {what}{tail}"


def promise_note(report: RecoveryReport, plan: BackupPlan) -> str:
    """ "" unless a crash plan rebuilt whole windows (a machine loss, a crash that lost
    more than its exposure): its delta is promised for the crash contract, and what it
    gets for whole windows is its range backtest's figure (or nothing measured)."""
    exposure = plan.parameters.exposure
    if report.contract != "range" or exposure is None or not report.windows_recovered:
        return ""
    promise = (
        f"This plan promises delta {100 * report.delta:g} % for a crash that loses at most "
        f"{exposure} row{'' if exposure == 1 else 's'}; this recovery rebuilt whole windows, "
    )
    bt = plan.backtest
    if bt is None or not bt.n_folds or bt.crash is None:
        return promise + "which no backtest of this plan measured: compare with nothing."
    return (
        promise + f"which its backtest measured at {bt.pooled_label()} pooled, worst sensor "
        f"{bt.worst_label()} (range verdict: {STATE_LABELS[bt.assess(report.delta).state]}): "
        "compare the rates here with "
        "that, not with delta."
    )
