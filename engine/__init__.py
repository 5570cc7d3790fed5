"""Lacuna engine: approximate fault tolerance for sensor streams.

Pure Python. Importing this package never imports Streamlit and never starts a
JVM; PySpark is imported lazily inside ``engine.stream`` functions.
"""

from engine.errors import (
    ConfigError,
    DataError,
    EngineError,
    NotFittedError,
    ParameterError,
    PipelineError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "EngineError",
    "NotFittedError",
    "ParameterError",
    "PipelineError",
    "StoreError",
    "__version__",
]
