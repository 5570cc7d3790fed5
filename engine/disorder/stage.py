"""Disorder handling inside the live Spark pipeline (the pipeline's ``Stage`` hook).

``DisorderStage`` wraps the pure-Python ``DisorderProcessor`` (K-slack buffer +
batch corrections, ``engine.disorder.buffer`` / ``engine.disorder.ledger``). Spark only
delivers micro-batches: ``foreachBatch`` hands each one to ``process`` on the
driver, where the buffer state lives. Inside a batch, rows are fed in arrival
order (ties: event time, then sensor name), so any split of a stream into
micro-batches that respects arrival order gives exactly the result of one pass
of the pure-Python processor over the whole stream.

State: ``snapshot()``/``restore()`` give a JSON-serialisable dict (the pipeline
keeps it with its window state). With ``state_path`` the stage also writes it
to a JSON file after every batch (atomically), so a restarted query resumes
with the tuples that were still buffered. With ``backup_sensors`` only those
sensors' raw readings are persisted, like the rest of approximate backup:
after a failure, buffered or pending-late readings of other sensors are gone
(recovery reconstructs their windows); the per-window partial aggregates of
every sensor are kept, so late readings that arrive after the restart still
correct any sensor's results.

No PySpark import here: the stage is pure pandas and runs without a JVM.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.disorder.config import DisorderConfig
from engine.disorder.items import Item, LateItem, parse_item, parse_late_item
from engine.disorder.ledger import DisorderProcessor, ResultRow, parse_row
from engine.errors import PipelineError
from engine.query import WindowQuery

INPUT_COLUMNS: tuple[str, ...] = ("seq", "event_time", "arrival_time", "sensor", "value")
RESULT_COLUMNS: tuple[str, ...] = (
    "window_id", "window_start", "window_end", "sensor", "value", "kind", "version", "final",
    "emitted_at",
)  # fmt: skip


def to_seconds(column: pd.Series) -> np.ndarray:
    """(N,) float seconds since the epoch from a timestamp (naive = UTC) or numeric column."""
    if pd.api.types.is_datetime64_any_dtype(column):
        stamps = pd.to_datetime(column, utc=True).dt.tz_localize(None)
        return stamps.to_numpy(dtype="datetime64[ns]").view(np.int64) / 1e9
    return pd.to_numeric(column).to_numpy(dtype=float)


def to_timestamps(seconds: Sequence[float], like: pd.Series | None = None) -> pd.Series:
    """Inverse of ``to_seconds`` at microsecond precision (Spark's), in ``like``'s dtype."""
    micros = np.round(np.asarray(seconds, dtype=float) * 1e6).astype(np.int64)
    stamps = pd.Series(pd.to_datetime(micros, unit="us", utc=True))
    if like is None or not pd.api.types.is_datetime64_any_dtype(like):
        return stamps if like is None else pd.Series(np.asarray(seconds, dtype=float))
    if getattr(like.dtype, "tz", None) is None:
        stamps = stamps.dt.tz_localize(None)
    return stamps.astype(like.dtype)


def order_arrivals(batch: pd.DataFrame) -> pd.DataFrame:
    """Rows in the canonical arrival order: arrival time, event time, sensor name."""
    return batch.sort_values(["arrival_time", "event_time", "sensor"], kind="stable")


def tuples_frame(
    rows: Sequence[tuple[float, float, str, float, int]], dtypes: dict[str, Any] | None = None
) -> pd.DataFrame:
    """``INPUT_COLUMNS`` from (event s, arrival s, sensor, value, seq) rows.

    ``dtypes`` gives the timestamp dtypes to return (default: UTC microseconds).
    """
    ts, arrival, sensor, value, tag = (
        (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 5
    )
    like = {name: pd.Series([], dtype=dtype) for name, dtype in (dtypes or {}).items()}
    utc = pd.Series([], dtype="datetime64[us, UTC]")
    return pd.DataFrame(
        {
            "seq": pd.Series(tag, dtype="int64"),
            "event_time": to_timestamps(ts, like.get("event_time", utc)),
            "arrival_time": to_timestamps(arrival, like.get("arrival_time", utc)),
            "sensor": pd.Series(sensor, dtype=object),
            "value": pd.Series(value, dtype="float64"),
        }
    )


def released_frame(items: Sequence[Item], dtypes: dict[str, Any] | None = None) -> pd.DataFrame:
    """Released tuples as ``INPUT_COLUMNS`` (in release order)."""
    return tuples_frame([(r.ts, r.arrival, r.sensor, r.value, r.tag) for r in items], dtypes)


def late_frame(items: Sequence[LateItem], dtypes: dict[str, Any] | None = None) -> pd.DataFrame:
    """Late tuples as ``INPUT_COLUMNS`` (the store's ``late`` table columns)."""
    return tuples_frame([(x.ts, x.arrival, x.sensor, x.value, x.tag) for x in items], dtypes)


def results_frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    """Result rows as ``RESULT_COLUMNS`` (the store's ``results`` table plus ``emitted_at``)."""
    frame = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    frame = frame.astype({"window_id": "int64", "version": "int64", "final": "bool"})
    utc = pd.Series([], dtype="datetime64[us, UTC]")
    for name in ("window_start", "window_end", "emitted_at"):
        frame[name] = to_timestamps(frame[name].to_numpy(float), utc)
    return frame


class DisorderStage:
    """The pipeline's disorder stage: ``process``, ``snapshot``, ``restore``."""

    def __init__(
        self,
        config: DisorderConfig,
        *,
        state_path: str | Path | None = None,
        backup_sensors: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        self.processor = DisorderProcessor(config)
        self.state_path = None if state_path is None else Path(state_path)
        self.backup_sensors = None if backup_sensors is None else set(backup_sensors)
        self.rows: list[ResultRow] = []
        self.last_batch_id: int | None = None
        self._last_output: tuple[list[Item], list[LateItem]] = ([], [])
        self._dtypes: dict[str, Any] = {}
        self.emit_from_s: float | None = None  # see ``resume_at``

    def resume_at(self, ts: float) -> DisorderStage:
        """A stage restarted after a failure: report no window that began before ``ts``.

        The failure discarded the readings it held of the windows open then, and a new
        stage sees only the readings from the restart (event time ``ts``) on, so its
        results for those windows would be computed from part of them and, in time,
        marked final. Their results are the pipeline's reading-indexed windows
        (``recovered``, or ``live`` once the restarted query completes them).
        """
        self.emit_from_s = float(ts)
        return self

    @classmethod
    def for_history(cls, times: np.ndarray, query: WindowQuery, **options: Any) -> DisorderStage:
        """A stage for ``query`` whose windows line up with the pipeline's: window 0
        starts at ``times[0]``.

        ``times`` (T,) datetime64 of the replayed history; the interval is its
        median step. ``options`` go to ``DisorderConfig`` except ``state_path``
        and ``backup_sensors``, which go to the stage.
        """
        seconds = np.asarray(times).astype("datetime64[ns]").view(np.int64) / 1e9
        if seconds.size < 2:
            raise PipelineError(
                f"need at least 2 reading times to size windows, got {seconds.size}"
            )
        stage_keys = {"state_path", "backup_sensors"}
        config = DisorderConfig(
            query, interval_s=float(np.median(np.diff(seconds))), origin_s=float(seconds[0]),
            **{k: v for k, v in options.items() if k not in stage_keys},
        )  # fmt: skip
        return cls(config, **{k: v for k, v in options.items() if k in stage_keys})

    @classmethod
    def load(cls, state_path: str | Path, **kwargs: Any) -> DisorderStage:
        """A stage resumed from the JSON file a previous stage wrote."""
        path = Path(state_path)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise PipelineError(f"cannot read disorder state {path}: {err}") from err
        stage = cls(
            DisorderConfig.from_dict(state["processor"]["buffer"]["config"]),
            state_path=path,
            **kwargs,
        )
        stage.restore(state)
        return stage

    # -- the hook -------------------------------------------------------------
    def process(
        self, batch: pd.DataFrame, batch_id: int | None = None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Feed a micro-batch; return (released in timestamp order, late tuples).

        ``batch`` has ``event_time``, ``arrival_time``, ``sensor``, ``value`` and
        optionally ``seq`` (carried through). Given ``batch_id``, a batch that
        was already processed (Spark replays the last batch after a crash)
        returns the same output again instead of being fed twice.
        """
        missing = [c for c in INPUT_COLUMNS if c != "seq" and c not in batch.columns]
        if missing:
            raise PipelineError(
                f"disorder stage input lacks column(s) {missing}, got {list(batch.columns)}"
            )
        if (
            batch_id is not None
            and self.last_batch_id is not None
            and batch_id <= self.last_batch_id
        ):
            if batch_id == self.last_batch_id:
                return self._frames(*self._last_output)
            return self._frames([], [])
        for name in ("event_time", "arrival_time", "value"):
            self._dtypes.setdefault(name, batch[name].dtype)
        ordered = order_arrivals(batch)
        tags = ordered["seq"].to_numpy(np.int64) if "seq" in ordered else np.full(len(ordered), -1)
        columns = zip(
            to_seconds(ordered["event_time"]).tolist(), ordered["sensor"].astype(str).tolist(),
            ordered["value"].to_numpy(float).tolist(), to_seconds(ordered["arrival_time"]).tolist(),
            tags.tolist(), strict=True,
        )  # fmt: skip
        for ts, sensor, value, arrival, tag in columns:
            self.processor.push(ts, sensor, value, arrival, tag)
        return self._finish_batch(batch_id)

    def flush(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """End of stream: release everything, apply every correction, mark all final."""
        self.processor.flush()
        return self._finish_batch(None)

    def _finish_batch(self, batch_id: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
        released, late, rows = self.processor.drain()
        start = self.emit_from_s
        self.rows.extend(r for r in rows if start is None or r.start_s >= start)
        if batch_id is not None:
            self.last_batch_id = batch_id
            self._last_output = (released, late)
        self._save()
        return self._frames(released, late)

    def metrics(self) -> dict[str, float | None]:
        """Buffer size ``K`` (s) and the watermark gap: arrival clock minus watermark (s).

        The watermark is ``t_max - K``: windows ending before it are closed. None
        before the first tuple.
        """
        buffer = self.processor.buffer
        if buffer.t_max is None:
            return {"k_s": None, "watermark_gap_s": None}
        k = float(buffer.current_k())
        return {"k_s": k, "watermark_gap_s": float(buffer.now - (buffer.t_max - k))}

    def pop_results(self) -> pd.DataFrame:
        """Result rows (provisional, correction, final) emitted since the last call."""
        rows, self.rows = self.rows, []
        return results_frame(rows)

    def _frames(
        self, released: list[Item], late: list[LateItem]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        return released_frame(released, self._dtypes), late_frame(late, self._dtypes)

    # -- state ------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state (raw readings of ``backup_sensors`` only, if set)."""
        keep = self.backup_sensors
        released, late = self._last_output
        return {
            "processor": self.processor.snapshot(keep),
            "rows": [list(r) for r in self.rows],
            "last_batch_id": self.last_batch_id,
            "last_output": {
                "released": [list(r) for r in released if keep is None or r.sensor in keep],
                "late": [list(x) for x in late if keep is None or x[4] in keep],
            },
            "dtypes": {name: str(dtype) for name, dtype in self._dtypes.items()},
            "emit_from_s": self.emit_from_s,
        }

    def restore(self, state: dict[str, Any]) -> DisorderStage:
        """Continue from ``snapshot()`` (in place; returns self)."""
        self.processor = DisorderProcessor.restore(state["processor"])
        self.config = self.processor.buffer.config
        self.rows = [parse_row(x) for x in state["rows"]]
        self.last_batch_id = state["last_batch_id"]
        out = state["last_output"]
        self._last_output = (
            [parse_item(x) for x in out["released"]],
            [parse_late_item(x) for x in out["late"]],
        )
        self._dtypes = {name: pd.api.types.pandas_dtype(d) for name, d in state["dtypes"].items()}
        self.emit_from_s = state.get("emit_from_s")  # absent in snapshots of earlier releases
        return self

    def _save(self) -> None:
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        staged = self.state_path.with_suffix(self.state_path.suffix + ".tmp")
        staged.write_text(json.dumps(self.snapshot()))
        os.replace(staged, self.state_path)
