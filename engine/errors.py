"""One family of errors for everything the engine rejects.

Edges (CLI, pages) catch ``EngineError`` and show ``str(err)``: a single line
that names the problem. Anything else escaping is a bug, not bad input.
"""

from __future__ import annotations

from collections.abc import Sequence


def named(names: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` of ``names`` and how many more there are, for a one-line
    message: ``"a, b, c, d, e and 3 more"``."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


class EngineError(Exception):
    """Base class: the message is one line an operator can act on."""


class DataError(EngineError):
    """A sensor-history file cannot be used (names file, column, row where possible)."""


class ParameterError(EngineError):
    """A parameter is out of range or of the wrong type (names the value)."""


class ConfigError(EngineError):
    """An exported backup config is malformed or does not match the data."""


class NotFittedError(EngineError):
    """A model was used before ``fit``."""


class StoreError(EngineError):
    """The backup store cannot be opened or written."""


class PipelineError(EngineError):
    """The live Spark pipeline cannot start, run or recover."""


class Cancelled(EngineError):
    """Long work was cancelled by the operator (raised from a progress callback)."""
