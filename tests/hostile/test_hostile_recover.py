"""``recover --backup FILE``: a wide file holding more than the backup sensors (the full
export of the day the others failed, a note column) is read for the columns recovery
uses, and the others are named as ignored, never validated as sensors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, pd.DataFrame]:
    """A config of the small sample's temperatures, it as a dict, and those readings."""
    from engine.cli import main

    folder = tmp_path_factory.mktemp("recover")
    config = folder / "plan.json"
    argv = ["plan", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1", "--delta",
            "0.05", "--window", "24", "--no-backtest", "--out", str(config)]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(config.read_text())
    # every backup reading there, so a row left out is the loader's doing
    frame = pd.read_csv(SMALL)[["timestamp", *data["sensors"]]].dropna().reset_index(drop=True)
    return config, data, frame


def _recover(run_cli, config: Path, frame: pd.DataFrame, tmp_path: Path) -> tuple[dict, str]:
    frame.to_csv(tmp_path / "backup.csv", index=False)
    code, out, err = run_cli(
        "recover", "--config", config, "--backup", tmp_path / "backup.csv",
        "--out", tmp_path / "all.csv",
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out), err


def _damaged(frame: pd.DataFrame, rebuilt: list[str], case: str) -> pd.DataFrame:
    frame = frame.copy()
    if case == "rebuilt sensors blank for the last 100 rows":  # was: 100 rows dropped
        frame.loc[frame.index[-100:], rebuilt] = float("nan")
    elif case == "a rebuilt sensor blank throughout":  # was: "sensor ... has no values"
        frame[rebuilt[0]] = float("nan")
    else:  # was: "cannot parse 'ok' as a number"
        frame["note"] = "ok"
    return frame


@pytest.mark.parametrize(
    "case",
    [
        "rebuilt sensors blank for the last 100 rows",
        "a rebuilt sensor blank throughout",
        "a text column beside the readings",
    ],
)
def test_recover_reads_only_the_columns_it_uses(run_cli, planned, tmp_path, case) -> None:
    config, data, frame = planned
    rebuilt = [s for s in data["sensors"] if s not in data["backup_sensors"]]
    whole, whole_err = _recover(run_cli, config, frame, tmp_path)
    written = pd.read_csv(tmp_path / "all.csv")
    result, err = _recover(run_cli, config, _damaged(frame, rebuilt, case), tmp_path)
    assert result["rows"] == whole["rows"]
    assert result["backup_rows_dropped"] == whole["backup_rows_dropped"]
    assert result["backup_values_filled"] == 0
    assert err == whole_err  # no false "time step(s) where a backup sensor has no reading"
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "all.csv"), written)
    extra = ["note"] if case.startswith("a text column") else []
    assert sorted(result["ignored_columns"]) == sorted(rebuilt + extra)
