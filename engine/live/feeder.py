"""Replay a sensor history as a live stream of small Parquet files.

Each file holds readings ``(seq, event_time, arrival_time, sensor, value)``;
``seq`` is the reading's row in the history, which is what windows count. A file
is written under ``landing/.tmp/`` (hidden from Spark's file source, which skips
names starting with ``.``) and then moved into ``landing/`` with ``os.replace``,
so Spark never sees half a file. Files are written in arrival-time order with
strictly increasing modification times, because Spark's file source picks the
oldest files first.

The truth (the replayed history) is written once to ``truth/truth.parquet``; it
is only for scoring recovery, never read by the pipeline.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import ParameterError, PipelineError
from engine.live.spec import HistoryLike, align_history
from engine.live.status import FeedProgress

FEED_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("arrival_time", pa.timestamp("us", tz="UTC")),
        ("sensor", pa.string()),
        ("value", pa.float64()),
    ]
)


@dataclass(frozen=True, eq=False)
class FeedOptions:
    """How the history is replayed.

    speed : replay speed as a multiple of real time (60.0 = one hour of data per
        minute); 0 writes as fast as possible.
    rows_per_file : history rows per file when readings arrive in order (a file
        then holds whole time steps); with ``delays`` it is ``rows_per_file * n``
        readings per file, in arrival order.
    delays : optional (T, n) arrival delays in seconds (>= 0), per reading.
    start_row, stop_row : the slice of the history to replay (stop None = end).
    """

    speed: float = 0.0
    rows_per_file: int = 24
    delays: np.ndarray | None = field(default=None, repr=False)
    start_row: int = 0
    stop_row: int | None = None

    def __post_init__(self) -> None:
        if not np.isfinite(self.speed) or self.speed < 0:
            raise ParameterError(
                f"speed must be >= 0 (0 = as fast as possible), got {self.speed!r}"
            )
        if not isinstance(self.rows_per_file, int) or self.rows_per_file < 1:
            raise ParameterError(
                f"rows_per_file must be an integer >= 1, got {self.rows_per_file!r}"
            )
        if self.start_row < 0 or (self.stop_row is not None and self.stop_row <= self.start_row):
            raise ParameterError(
                f"need 0 <= start_row < stop_row, got {self.start_row!r} and {self.stop_row!r}"
            )
        if self.delays is not None:
            d = np.asarray(self.delays, dtype=float)
            if d.ndim != 2 or not np.isfinite(d).all() or (d < 0).any():
                raise ParameterError("delays must be a finite (T, n) array of seconds >= 0")


class Feeder:
    """Writes a history's readings into ``landing`` as Parquet micro-files.

    Parameters
    ----------
    history : times (T,) datetime64[ns], values (T, n), sensors.
    sensors : the sensors to replay, in this order (``ConfigError`` if missing).
    landing, truth : directories (created if missing).
    options : ``FeedOptions``.
    sleep : ``sleep(seconds, stop_event)`` used between files at a finite speed.
    """

    def __init__(
        self,
        history: HistoryLike,
        sensors: Sequence[str],
        landing: Path,
        truth: Path | None = None,
        options: FeedOptions | None = None,
        sleep: Callable[[float, threading.Event], None] | None = None,
    ) -> None:
        self.options = options or FeedOptions()
        stop = len(history.times) if self.options.stop_row is None else self.options.stop_row
        rows = slice(self.options.start_row, stop)
        self.sensors = tuple(sensors)
        self.values = align_history(history, self.sensors)[rows]
        self.times = np.asarray(history.times, dtype="datetime64[ns]")[rows]
        self.first_seq = self.options.start_row
        self.landing, self.truth = Path(landing), truth
        self._sleep = sleep or (lambda seconds, event: event.wait(seconds) and None)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # counted from the history's first row: a resumed feed goes on from what was fed
        n = len(self.sensors)
        total = np.asarray(history.times).shape[0] * n
        self._progress = FeedProgress(
            readings=self.first_seq * n, rows=self.first_seq, total_readings=int(total)
        )
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_mtime_ns = 0
        self._file_no = 0

    # -- control ------------------------------------------------------------

    def start(self) -> None:
        """Replay in a background thread (``progress().done`` when finished)."""
        self._thread = threading.Thread(target=self._run_safely, name="lacuna-feeder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise PipelineError(f"the feeder failed: {self._error}") from self._error

    def progress(self) -> FeedProgress:
        with self._lock:
            return self._progress

    @property
    def error(self) -> BaseException | None:
        return self._error

    def failure(self) -> str | None:
        """Why the feed died (None while it runs, after it finished or was stopped)."""
        if self._error is not None:
            return f"the feeder failed: {_first_line(self._error)}"
        thread = self._thread
        if thread is None or thread.is_alive() or self._stop.is_set() or self.progress().done:
            return None
        return "the feeder thread ended before the feed was done"

    def _run_safely(self) -> None:
        try:
            self.run()
        except (
            BaseException
        ) as err:  # kept and re-raised by join(); the thread must not die silently
            self._error = err

    # -- work ---------------------------------------------------------------

    def run(self) -> FeedProgress:
        """Replay in the calling thread until done or ``stop()``."""
        tmp = self.landing / ".tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            if self.truth is not None:
                self.write_truth(Path(self.truth))
        except OSError as err:
            raise PipelineError(f"cannot write the feed into {str(self.landing)!r}: {err}") from err
        previous: np.datetime64 | None = None
        for table, arrival in self._files():
            if self._stop.is_set():
                break
            if self.options.speed > 0 and previous is not None:
                wait = (arrival - previous) / np.timedelta64(1, "s") / self.options.speed
                self._sleep(max(0.0, float(wait)), self._stop)
                if self._stop.is_set():
                    break
            previous = arrival
            self._publish(table, tmp)
        with self._lock:
            self._progress = replace(self._progress, done=True, stopped=self._stop.is_set())
        return self._progress

    def _files(self) -> Iterator[tuple[pa.Table, np.datetime64]]:
        """(table, arrival time of its first reading) per file, in arrival order."""
        t, n = self.values.shape
        seq = np.repeat(np.arange(t, dtype=np.int64) + self.first_seq, n)
        event = np.repeat(self.times, n)
        sensor = np.tile(np.asarray(self.sensors, dtype=object), t)
        value = self.values.reshape(-1)
        if self.options.delays is None:
            arrival, order, per_file = event, np.arange(t * n), self.options.rows_per_file * n
        else:
            delays = np.asarray(self.options.delays, dtype=float)[
                self.first_seq : self.first_seq + t
            ]
            if delays.shape != (t, n):
                raise ParameterError(f"delays must have shape ({t}, {n}), got {delays.shape}")
            # Parquet keeps microseconds: round the delays there.
            lag = np.round(delays.reshape(-1) * 1e6).astype(np.int64).astype("timedelta64[us]")
            arrival = event + lag.astype("timedelta64[ns]")
            order = np.argsort(arrival, kind="stable")
            per_file = self.options.rows_per_file * n
        for lo in range(0, t * n, per_file):
            idx = order[lo : lo + per_file]
            table = pa.table(
                {
                    "seq": seq[idx],
                    "event_time": pd.DatetimeIndex(event[idx]).tz_localize("UTC"),
                    "arrival_time": pd.DatetimeIndex(arrival[idx]).tz_localize("UTC"),
                    "sensor": sensor[idx],
                    "value": value[idx],
                },
                schema=FEED_SCHEMA,
            )
            yield table, arrival[idx[0]]

    def _publish(self, table: pa.Table, tmp: Path) -> None:
        # Named by the first replayed row too, so two feeds of one history never clash.
        name = f"part-{self.first_seq:010d}-{self._file_no:08d}.parquet"
        staged, final = tmp / name, self.landing / name
        pq.write_table(table, staged)
        os.replace(staged, final)
        # Spark's file source orders files by modification time (milliseconds):
        # keep them strictly increasing so files are consumed in arrival order.
        mtime = max(final.stat().st_mtime_ns, self._last_mtime_ns + 1_000_000)
        os.utime(final, ns=(mtime, mtime))
        self._last_mtime_ns = mtime
        self._file_no += 1
        seqs = table.column("seq").to_numpy()
        whole_rows = int(seqs.max()) + 1 if self.options.delays is None else 0
        with self._lock:
            p = self._progress
            self._progress = replace(
                p,
                files=p.files + 1,
                readings=p.readings + table.num_rows,
                rows=max(p.rows, whole_rows),
                last_event_time=str(table.column("event_time")[-1].as_py()),
            )

    def write_truth(self, directory: Path) -> Path:
        """The replayed history, wide (``seq``, ``time``, one column per sensor)."""
        directory.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(self.values, columns=list(self.sensors))
        frame.insert(0, "time", self.times)
        frame.insert(0, "seq", np.arange(len(self.times)) + self.first_seq)
        path = directory / "truth.parquet"
        frame.to_parquet(path, index=False)
        return path


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
