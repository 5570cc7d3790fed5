"""The Production page's line on the job's online controller says what its last batch
recorded: off, waiting for its model, or its bound over the windows applied."""

from __future__ import annotations

from ui.production import control_line


def test_the_control_line_says_off_waiting_or_the_bound() -> None:
    assert "no micro-batch recorded it" in control_line(None)
    assert "waiting for its model" in control_line({"active": False})
    running = {"active": True, "windows": 1200, "skipped": 3, "delay_windows": 2,
               "backup_sensors": 7, "forced": 1, "changes": 4, "miss_bound": 0.0412}  # fmt: skip
    line = control_line(running)
    assert "over the 1,200 windows applied is at most 4.1 %" in line
    assert "feedback delay 2 windows" in line and "7 sensors in its set, 1 forced" in line
    assert "4 set changes, 3 windows skipped" in line
    assert "no window applied yet" in control_line({**running, "miss_bound": None})
