"""Sensor history: a CSV/Parquet file (wide or long) read with DuckDB into a ``SensorHistory``.

``options`` says how to read, ``files`` opens the file into DuckDB, ``reader``
decodes it, ``history`` sorts, fills and describes the readings.
"""

from engine.data.files import NULL_STRINGS, SUFFIXES
from engine.data.history import (
    EDGE_FILL_FRACTION,
    GAP_FACTOR,
    DataReport,
    SensorHistory,
    history_from_frame,
    load_history,
    load_sensors,
)
from engine.data.options import (
    DEFAULT_OPTIONS,
    UNIT_NS,
    UNIT_WORDS,
    Layout,
    LoadOptions,
    MissingPolicy,
)
from engine.data.reader import SENSOR_NAMES, TIME_NAMES, VALUE_NAMES

__all__ = [
    "DEFAULT_OPTIONS", "EDGE_FILL_FRACTION", "GAP_FACTOR", "NULL_STRINGS", "SENSOR_NAMES",
    "SUFFIXES", "TIME_NAMES", "UNIT_NS", "UNIT_WORDS", "VALUE_NAMES", "DataReport", "Layout",
    "LoadOptions", "MissingPolicy", "SensorHistory", "history_from_frame", "load_history",
    "load_sensors",
]  # fmt: skip
