"""Keep expected py4j log records off stderr, and only those.

py4j logs, with a traceback, every exception a Python callback raises and every
interrupted call:

* the ``SimulatedFailure`` that ``foreachBatch`` raises on purpose (the status
  board already reports the failure, as state ``failed``);
* ``KeyboardInterrupt while sending command`` when Ctrl-C or SIGTERM (see
  ``engine.live.simulate``) stops a run: the interrupt itself is reported by the CLI;
* while a pipeline is being stopped on purpose (``stopping(True)``, from
  ``LivePipeline.stop``), the exception py4j logs for the micro-batch the stop
  interrupted: that batch is not committed and is replayed by the next run.

Any other py4j record still goes through.
"""

from __future__ import annotations

import logging
import warnings

from engine.stream.query_errors import FAILURE_MARK, SimulatedFailure

_LOGGERS = ("py4j.clientserver", "py4j.java_gateway", "")  # "" = root: py4j logs there too


class ExpectedPy4jNoise(logging.Filter):
    """Drops py4j records about our own simulated failure, an interrupt or a stop."""

    stopping = False  # a pipeline is being stopped on purpose

    def filter(self, record: logging.LogRecord) -> bool:
        if "py4j" not in record.pathname:
            return True
        if self.stopping:
            return False
        err = record.exc_info[1] if record.exc_info else None
        if any(isinstance(e, SimulatedFailure | KeyboardInterrupt) for e in _chain(err)):
            return False  # also a socket error raised while handling the interrupt
        return FAILURE_MARK not in record.getMessage()


def _chain(err: BaseException | None) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or while handling (cycle-safe)."""
    seen: list[BaseException] = []
    while err is not None and all(err is not s for s in seen):
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


_FILTER = ExpectedPy4jNoise()


def quiet_py4j() -> None:
    """Install the filter on py4j's loggers and the root logger (idempotent)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def stopping(on: bool) -> None:
    """Say that a pipeline is being stopped on purpose (``True``) or runs (``False``)."""
    _FILTER.stopping = bool(on)


def exiting() -> None:
    """A signal is tearing this process down: what py4j logs from here on is the
    shutdown, which the CLI reports in one line, and PySpark's warnings are ignored."""
    stopping(True)
    warnings.filterwarnings("ignore", module=r"pyspark(\.|$)")
