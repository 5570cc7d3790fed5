"""The replay split's one line says which rows the plan learnt from and which it replays."""

from __future__ import annotations

from engine.data import load_history
from engine.live.split import split_for_replay
from tests.helpers import SMALL_SAMPLE


def test_the_note_names_the_rows_the_plan_was_fitted_on() -> None:
    """With a history shorter than the prefix the plan learns from its last rows only:
    the note said 'fitted on rows 0-359' for a plan fitted on rows 110-359."""
    history = load_history(SMALL_SAMPLE)
    n = len(history.times)
    split = split_for_replay(n, 360)
    last = split.fit_rows - 1
    whole = split.describe(history)
    assert whole.startswith(f"plan fitted on rows 0-{last} (") and "backtested" not in whole
    part = split.describe(history, 250)
    first = split.fit_rows - 250
    assert part.startswith(f"plan fitted on rows {first}-{last} (")
    assert f"backtested on rows 0-{last}; replay of the 360 rows after it" in part
    assert split.describe(history, split.fit_rows + 10).startswith(f"plan fitted on rows 0-{last}")
