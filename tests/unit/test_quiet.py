"""Only py4j's records about our own simulated failure or an interrupt are dropped."""

from __future__ import annotations

import logging
import sys

import pytest

from engine.stream.query_errors import FAILURE_MARK, SimulatedFailure
from engine.stream.quiet import ExpectedPy4jNoise, quiet_py4j

PY4J = "/venv/lib/python3.11/site-packages/py4j/clientserver.py"


def record(pathname: str, err: BaseException | None, msg: str = "There was an exception") -> bool:
    exc_info = None
    if err is not None:
        try:
            raise err
        except BaseException:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("py4j.clientserver", logging.ERROR, pathname, 1, msg, (), exc_info)
    return ExpectedPy4jNoise().filter(rec)


@pytest.mark.parametrize(
    ("pathname", "err", "kept"),
    [
        (PY4J, SimulatedFailure(f"{FAILURE_MARK} before batch 3"), False),
        (PY4J, KeyboardInterrupt("signal 15"), False),
        (PY4J, ValueError("a real problem in a callback"), True),
        (PY4J, None, True),
        ("/work/engine/live/pipeline.py", KeyboardInterrupt(), True),  # not py4j's
    ],
)
def test_only_expected_py4j_records_are_dropped(
    pathname: str, err: BaseException | None, kept: bool
) -> None:
    assert record(pathname, err) is kept


def test_the_filter_is_installed_once_on_py4j_and_root(caplog: pytest.LogCaptureFixture) -> None:
    quiet_py4j()
    quiet_py4j()
    for name in ("py4j.clientserver", "py4j.java_gateway", ""):
        found = [f for f in logging.getLogger(name).filters if isinstance(f, ExpectedPy4jNoise)]
        assert len(found) == 1


def test_a_socket_error_raised_while_handling_the_interrupt_is_dropped_too() -> None:
    """py4j logs the socket error of its shutdown, raised while handling our SIGTERM."""
    try:
        try:
            raise KeyboardInterrupt("signal 15")
        except KeyboardInterrupt:
            raise OSError("Bad file descriptor") from None
    except OSError as err:
        # ``from None`` hides the context from tracebacks but keeps ``__context__``
        assert record(PY4J, err) is False
    try:
        try:
            raise ValueError("a real problem")
        except ValueError:
            raise OSError("Bad file descriptor")  # noqa: B904 - a chain without an interrupt
    except OSError as err:
        assert record(PY4J, err) is True


def test_pyspark_warnings_are_dropped_once_a_signal_tears_the_process_down() -> None:
    """An interrupted ``toPandas`` warns with the Java stack of the call a SIGTERM stopped."""
    import warnings

    from engine.stream import quiet

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        before = quiet._FILTER.stopping
        try:
            quiet.exiting()
            shown = {
                m: bool(_shown_now(m))
                for m in ("pyspark.sql.pandas.conversion", "pyspark", "engine.live", "pysparkle")
            }
        finally:
            quiet.stopping(before)
    assert shown == {
        "pyspark.sql.pandas.conversion": False,
        "pyspark": False,
        "engine.live": True,
        "pysparkle": True,
    }
    assert _shown_now("pyspark.sql.pandas.conversion")  # the filters restored: shown again


def _shown_now(module: str) -> list[str]:
    """The messages a warning from ``module`` shows under the filters in force now."""
    import warnings

    shown: list[str] = []
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *_a, **_k: shown.append(str(message))
    try:
        warnings.warn_explicit("msg", UserWarning, "f.py", 1, module=module, registry={})
    finally:
        warnings.showwarning = previous
    return shown
