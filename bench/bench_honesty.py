"""Is the (eps, delta) promise kept for the whole horizon a plan is used?

    python -m bench.bench_honesty            # 8 folds a case, both contracts (~50 min, 2 cores)
    python -m bench.bench_honesty --exposures ''   # the range contract alone (minutes)
    python -m bench.bench_honesty --quick    # 3 folds a case
    python -m bench.bench_honesty --cases beijing_TEMP_avg,eeg_avg

Protocol, per case and fold (delta = 0.05, tumbling windows):

1. HISTORY = the H rows before the fold origin, written to a temporary CSV.
2. ``engine.cli.main(["plan", "--data", csv, "--eps", E, "--delta", "0.05", "--window", W,
   "--agg", A, "--horizon", S, "--out", plan.json])`` runs in process, every other
   setting at its default (``--calibration none`` for the seed's method).
3. The exported JSON config alone rebuilds the next S rows: every sensor not
   backed up is ``intercept + sum(coefficient * backup reading)`` from the
   backup sensors' TRUE readings (re-implemented here, not ``engine.export.recover``).
4. Tumbling-window aggregates of the rebuilt and the true readings; a miss is
   ``|recovered - true| > eps``, counted over (window, sensor) pairs WHERE THE
   SENSOR WAS REBUILT.

The same run scores the same version-1 plans used as the job uses them, with the
product's shadow monitor and alert re-plans in the loop (``bench.honesty_live``,
``ours_live`` in the JSON; ``--no-live`` skips it).

Honest = pooled miss rate <= delta AND the worst rebuilt sensor (most misses
per rebuilt window) is consistent with delta: the one-sided exact binomial test
``scipy.stats.binomtest(misses, windows, delta, alternative="greater")`` does
not reject at the 1 % level (i.e. delta lies inside the sensor's 99 %
Clopper-Pearson upper bound). No multiplicity correction here: stricter than
the engine's own verdict. Savings = 1 - |O| / n, averaged over folds.

Fixed before any run (not tuned):

* **H and S**: H = 3 weeks and S = 1 week of readings where the recording holds
  H + 8 S (hourly and 10-min data: 504/168 and 3,024/1,008 rows). Shorter
  recordings (30 s, 128 Hz) keep the same 3 : 1 ratio with 8 folds filling the
  file: S = rows // 11, H = 3 S. The 8 fold origins are evenly spaced from H to
  rows - S.
* **window**: the data's natural reporting period: a day of hourly data (24),
  an hour of 10-min data (6), 5 minutes of 30-s data (10), a quarter second of
  128 Hz EEG (32).
* **eps** from the unit alone, per reading: degC 1.0, % relative humidity 3,
  ug/m3 20, kW 1,000, lux 50, mbar 1.0, Wh (per 10 min) 20, uV 5; for ``sum``
  it is multiplied by the window (a tolerance per reading summed over it).
* **choose / held-out**: cases are split by data set before measuring. Any
  constant of the method may be chosen on the "choose" half (Beijing, Tetouan,
  room occupancy); the other data sets (five cities, appliances, gas turbine,
  EEG) are reported separately as held out.
* **fresh**: the held-out half has been seen (its failures are published), so
  a change to the method is judged on a third half, fixed before it was run
  and committed before any change was measured: the Intel lab motes (a data set
  not in this benchmark before) and variables or aggregates not used before of the other
  sets (turbine temperatures avg, five cities' humidity max and dew point avg,
  Tetouan zones avg, Beijing NO2 sum and dew point min, appliances indoor
  humidity avg). Same rules for H, S, window and eps; 30-min data (Intel) has
  a 2-hour window (4); ug/m3 NO2 as PM (20 a reading). The Intel subset is a
  short recording (240 rows: S = 21, H = 63), too short to calibrate all 50
  motes (a first fit needs n + 2 rows), so its cases take motes r01-r10
  (fixed by that arithmetic, not by a run).
* **fresh-2**: the fresh half's failures have been studied too, so the method
  as it stands (after the prediction bound and the no-fold rule) is judged
  again on a fourth half, fixed and committed before any of it was run and
  with no change to the method since: variables or aggregates of the same
  data sets used in no earlier case (Beijing PM10 sum, O3 max, SO2 avg and
  pressure avg; five cities' pressure min and humidity avg; appliances indoor
  temperature max and humidity min; room temperature max and light avg; EEG
  max; gas-turbine temperatures max; Tetouan zones min). Same rules for H, S,
  window and eps; hPa counts as mbar (1.0 a reading). Intel is left out: its
  history is too short for one backtest fold, so every plan backs up every
  mote and the case could only read 0 % savings.
* **fresh-3**: fixed and committed before any of them was
  run, with the method unchanged since fresh-2: thirteen more aggregates of
  variables whose unit has a rule above (Beijing temperature max,
  PM2.5 sum and pressure min; five cities' temperature avg, PM max and dew point
  max; appliances indoor temperature min and humidity sum; room temperature min
  and light sum; gas-turbine pressures avg and temperatures min; EEG min). Same
  rules for H, S, window and eps. No method change is judged on it: it is a
  further measurement of the method as it stands on cases that played no part.
* **fresh-4**: fixed and committed before the crash contract's method was run on
  any case outside the choose half: sixteen variable/aggregate pairs used in no
  earlier case (Beijing temperature min, NO2 max, O3 avg and dew point avg; five
  cities' PM sum, temperature max and humidity min; appliances indoor temperature
  sum, the two energy meters max and the outdoor and airport weather avg; room
  temperature sum and light min; gas-turbine pressures min and temperatures sum;
  EEG sum; Tetouan's temperature and humidity with its zones, max). Same rules for
  H, S, window and eps; a case of mixed units takes each unit's eps by the rule
  (``--eps-by-unit degC=1,%=3``; the zones' kW, whose unit the names do not tell,
  take ``--eps`` 1,000) and is scored against each sensor's eps. Tetouan has no
  single-unit pair left unused (its zones were measured with all four aggregates),
  so its case adds its two weather sensors, never used before, to its zones.
* **fresh-5**: whole networks, fixed and committed before any of them was run, with
  the method unchanged since fresh-4: every one of Beijing's 132 channels (12
  stations x 11 variables, gaps included: the data sets' own "realistic stress
  case") avg and max, and every one of the five cities' 40 channels (16 PM
  stations and each city's weather) sum and min. Same rules for H, S, window and
  eps, each unit's eps by the rule; the two units no earlier case used take 1 a
  reading, as degC and hPa do: rain in mm and wind speed in m/s (the five cities'
  ``Iws`` is cumulated wind speed, in m/s too).

Both contracts (a config applied alone; ``--exposures`` chooses which): the range
contract above (whole windows rebuilt), and the crash contract at exposures of
m = w/12, w/4 and w rows (rounded half up, at least 1): a failure at any row loses
m consecutive rows, and every tumbling window it touches is exact except those
rows of the rebuilt sensors. Per exposure, per fold, ours is the CLI's plan with
``--exposure m``; the seed's plan and our plan for whole windows (no
``--exposure``) are scored under the same contract beside it, and our crash plan
under the range contract too. Crash rates are over (failure position, window
touched, rebuilt sensor) triples (``w + m - 1`` failure positions touch each
window); the worst sensor's test counts its rebuilt windows, each carrying the
fraction of its failure positions that missed (the binomial tail continued to a
real count by the regularised incomplete beta; for a whole count it is
``binomtest``'s p-value). Honest as above: pooled <= delta, that p-value >= 1 %.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import betainc
from scipy.stats import binomtest

import engine  # noqa: F401  (sets single-threaded BLAS before numpy loads)
from bench.common import datasets_dir
from bench.honesty_live import run_live_fold
from engine.cli import main as cli_main
from engine.cli_parser import build_parser
from engine.data import load_history

DATASETS = datasets_dir()
RESULTS = Path(__file__).resolve().parent / "results" / "honesty.json"
DELTA = 0.05
FOLDS = 8
ALPHA = 0.01  # the worst-sensor binomial test's level


@dataclass(frozen=True)
class Case:
    name: str
    dataset: str
    sensors: tuple[str, ...]  # globs
    aggregate: str
    window: int
    eps: float
    week_rows: int | None  # readings per week; None: a short recording (S = rows // 11)
    half: str  # "choose", "held-out" or "fresh" to "fresh-5"
    # Mixed units: ``--eps-by-unit`` (each unit's eps by the rule; ``eps`` for the sensors
    # whose unit the names do not tell). Empty: one eps for every sensor.
    eps_by_unit: str = ""


HOURLY, TEN_MIN = 168, 1008
CASES = [
    Case("beijing_TEMP_avg", "beijing_multisite_aq", ("*_TEMP",), "avg", 24, 1.0, HOURLY, "choose"),
    Case("beijing_PM2.5_max", "beijing_multisite_aq", ("*_PM2.5",), "max", 24, 20.0, HOURLY,
         "choose"),
    Case("tetuan_power_sum", "tetuan_power", ("Zone_*",), "sum", 6, 6000.0, TEN_MIN, "choose"),
    Case("tetuan_power_max", "tetuan_power", ("Zone_*",), "max", 6, 1000.0, TEN_MIN, "choose"),
    Case("room_temp_avg", "room_occupancy", ("S?_temp_degC",), "avg", 10, 1.0, None, "choose"),
    Case("room_light_max", "room_occupancy", ("S?_light_lux",), "max", 10, 50.0, None, "choose"),
    Case("cities_PM_avg", "pm25_five_cities", ("*_PM_*",), "avg", 24, 20.0, HOURLY, "held-out"),
    Case("cities_TEMP_min", "pm25_five_cities", ("*_TEMP",), "min", 24, 1.0, HOURLY, "held-out"),
    Case("appliances_T_avg", "appliances_energy",
         ("T[1-5]_*_degC", "T[7-9]_*_degC"), "avg", 6, 1.0, TEN_MIN, "held-out"),
    Case("appliances_RH_max", "appliances_energy",
         ("RH[1-5]_*_pct", "RH[7-9]_*_pct"), "max", 6, 3.0, TEN_MIN, "held-out"),
    Case("appliances_Wh_sum", "appliances_energy", ("*_Wh",), "sum", 6, 120.0, TEN_MIN,
         "held-out"),
    Case("turbine_mbar_max", "gas_turbine", ("*_mbar",), "max", 24, 1.0, HOURLY, "held-out"),
    Case("eeg_avg", "eeg_eye_state", ("*_uV",), "avg", 32, 5.0, None, "held-out"),
    # Fresh cases, fixed (and committed) before any of them was run, after the method's
    # constants had been looked at on both halves above; see the module docstring.
    Case("intel_temp_avg", "intel_lab_subset", ("temp_r0[1-9]", "temp_r10"), "avg", 4, 1.0,
         None, "fresh"),
    Case("intel_hum_max", "intel_lab_subset", ("hum_r0[1-9]", "hum_r10"), "max", 4, 3.0, None,
         "fresh"),
    Case("turbine_degC_avg", "gas_turbine", ("*_degC",), "avg", 24, 1.0, HOURLY, "fresh"),
    Case("cities_HUMI_max", "pm25_five_cities", ("*_HUMI",), "max", 24, 3.0, HOURLY, "fresh"),
    Case("cities_DEWP_avg", "pm25_five_cities", ("*_DEWP",), "avg", 24, 1.0, HOURLY, "fresh"),
    Case("tetuan_power_avg", "tetuan_power", ("Zone_*",), "avg", 6, 1000.0, TEN_MIN, "fresh"),
    Case("beijing_NO2_sum", "beijing_multisite_aq", ("*_NO2",), "sum", 24, 480.0, HOURLY,
         "fresh"),
    Case("beijing_DEWP_min", "beijing_multisite_aq", ("*_DEWP",), "min", 24, 1.0, HOURLY,
         "fresh"),
    Case("appliances_RH_avg", "appliances_energy", ("RH[1-5]_*_pct", "RH[7-9]_*_pct"), "avg", 6,
         3.0, TEN_MIN, "fresh"),
    # Fresh-2 cases, fixed (and committed) before any of them was run, with the method
    # unchanged since; see the module docstring.
    Case("beijing_PM10_sum", "beijing_multisite_aq", ("*_PM10",), "sum", 24, 480.0, HOURLY,
         "fresh-2"),
    Case("beijing_O3_max", "beijing_multisite_aq", ("*_O3",), "max", 24, 20.0, HOURLY,
         "fresh-2"),
    Case("beijing_SO2_avg", "beijing_multisite_aq", ("*_SO2",), "avg", 24, 20.0, HOURLY,
         "fresh-2"),
    Case("beijing_PRES_avg", "beijing_multisite_aq", ("*_PRES",), "avg", 24, 1.0, HOURLY,
         "fresh-2"),
    Case("cities_PRES_min", "pm25_five_cities", ("*_PRES",), "min", 24, 1.0, HOURLY, "fresh-2"),
    Case("cities_HUMI_avg", "pm25_five_cities", ("*_HUMI",), "avg", 24, 3.0, HOURLY, "fresh-2"),
    Case("appliances_T_max", "appliances_energy", ("T[1-5]_*_degC", "T[7-9]_*_degC"), "max", 6,
         1.0, TEN_MIN, "fresh-2"),
    Case("appliances_RH_min", "appliances_energy", ("RH[1-5]_*_pct", "RH[7-9]_*_pct"), "min", 6,
         3.0, TEN_MIN, "fresh-2"),
    Case("room_temp_max", "room_occupancy", ("S?_temp_degC",), "max", 10, 1.0, None, "fresh-2"),
    Case("room_light_avg", "room_occupancy", ("S?_light_lux",), "avg", 10, 50.0, None, "fresh-2"),
    Case("eeg_max", "eeg_eye_state", ("*_uV",), "max", 32, 5.0, None, "fresh-2"),
    Case("turbine_degC_max", "gas_turbine", ("*_degC",), "max", 24, 1.0, HOURLY, "fresh-2"),
    Case("tetuan_power_min", "tetuan_power", ("Zone_*",), "min", 6, 1000.0, TEN_MIN, "fresh-2"),
    # Fresh-3 cases, fixed (and committed) before any of them was run, with the method
    # unchanged since fresh-2; see the module docstring.
    Case("beijing_TEMP_max", "beijing_multisite_aq", ("*_TEMP",), "max", 24, 1.0, HOURLY,
         "fresh-3"),
    Case("beijing_PM2.5_sum", "beijing_multisite_aq", ("*_PM2.5",), "sum", 24, 480.0, HOURLY,
         "fresh-3"),
    Case("beijing_PRES_min", "beijing_multisite_aq", ("*_PRES",), "min", 24, 1.0, HOURLY,
         "fresh-3"),
    Case("cities_TEMP_avg", "pm25_five_cities", ("*_TEMP",), "avg", 24, 1.0, HOURLY, "fresh-3"),
    Case("cities_PM_max", "pm25_five_cities", ("*_PM_*",), "max", 24, 20.0, HOURLY, "fresh-3"),
    Case("cities_DEWP_max", "pm25_five_cities", ("*_DEWP",), "max", 24, 1.0, HOURLY, "fresh-3"),
    Case("appliances_T_min", "appliances_energy", ("T[1-5]_*_degC", "T[7-9]_*_degC"), "min", 6,
         1.0, TEN_MIN, "fresh-3"),
    Case("appliances_RH_sum", "appliances_energy", ("RH[1-5]_*_pct", "RH[7-9]_*_pct"), "sum", 6,
         18.0, TEN_MIN, "fresh-3"),
    Case("room_temp_min", "room_occupancy", ("S?_temp_degC",), "min", 10, 1.0, None, "fresh-3"),
    Case("room_light_sum", "room_occupancy", ("S?_light_lux",), "sum", 10, 500.0, None,
         "fresh-3"),
    Case("turbine_mbar_avg", "gas_turbine", ("*_mbar",), "avg", 24, 1.0, HOURLY, "fresh-3"),
    Case("turbine_degC_min", "gas_turbine", ("*_degC",), "min", 24, 1.0, HOURLY, "fresh-3"),
    Case("eeg_min", "eeg_eye_state", ("*_uV",), "min", 32, 5.0, None, "fresh-3"),
    # Fresh-4 cases, fixed (and committed) before the crash contract's method was run on
    # anything but the choose half; see the module docstring.
    Case("beijing_TEMP_min", "beijing_multisite_aq", ("*_TEMP",), "min", 24, 1.0, HOURLY,
         "fresh-4"),
    Case("beijing_NO2_max", "beijing_multisite_aq", ("*_NO2",), "max", 24, 20.0, HOURLY,
         "fresh-4"),
    Case("beijing_O3_avg", "beijing_multisite_aq", ("*_O3",), "avg", 24, 20.0, HOURLY,
         "fresh-4"),
    Case("beijing_DEWP_avg", "beijing_multisite_aq", ("*_DEWP",), "avg", 24, 1.0, HOURLY,
         "fresh-4"),
    Case("cities_PM_sum", "pm25_five_cities", ("*_PM_*",), "sum", 24, 480.0, HOURLY, "fresh-4"),
    Case("cities_TEMP_max", "pm25_five_cities", ("*_TEMP",), "max", 24, 1.0, HOURLY, "fresh-4"),
    Case("cities_HUMI_min", "pm25_five_cities", ("*_HUMI",), "min", 24, 3.0, HOURLY, "fresh-4"),
    Case("tetuan_mixed_max", "tetuan_power", ("Temperature", "Humidity", "Zone_*"), "max", 6,
         1000.0, TEN_MIN, "fresh-4", "degC=1,%=3"),
    Case("appliances_outdoor_avg", "appliances_energy",
         ("T6_*", "RH6_*", "airport_T_degC", "airport_RH_pct", "airport_dewpoint_degC"), "avg",
         6, 1.0, TEN_MIN, "fresh-4", "degC=1,%=3"),
    Case("appliances_T_sum", "appliances_energy", ("T[1-5]_*_degC", "T[7-9]_*_degC"), "sum", 6,
         6.0, TEN_MIN, "fresh-4"),
    Case("appliances_Wh_max", "appliances_energy", ("*_Wh",), "max", 6, 20.0, TEN_MIN,
         "fresh-4"),
    Case("room_temp_sum", "room_occupancy", ("S?_temp_degC",), "sum", 10, 10.0, None,
         "fresh-4"),
    Case("room_light_min", "room_occupancy", ("S?_light_lux",), "min", 10, 50.0, None,
         "fresh-4"),
    Case("turbine_mbar_min", "gas_turbine", ("*_mbar",), "min", 24, 1.0, HOURLY, "fresh-4"),
    Case("turbine_degC_sum", "gas_turbine", ("*_degC",), "sum", 24, 24.0, HOURLY, "fresh-4"),
    Case("eeg_sum", "eeg_eye_state", ("*_uV",), "sum", 32, 160.0, None, "fresh-4"),
    # Fresh-5 cases: whole networks of mixed units, fixed (and committed) before any of
    # them was run; see the module docstring.
    Case("beijing_all_avg", "beijing_multisite_aq", ("*_*",), "avg", 24, 1.0, HOURLY, "fresh-5",
         "ug/m3=20,degC=1,hPa=1,mm=1,m/s=1"),
    Case("beijing_all_max", "beijing_multisite_aq", ("*_*",), "max", 24, 1.0, HOURLY, "fresh-5",
         "ug/m3=20,degC=1,hPa=1,mm=1,m/s=1"),
    Case("cities_all_sum", "pm25_five_cities", ("*_*",), "sum", 24, 24.0, HOURLY, "fresh-5",
         "ug/m3=480,degC=24,%=72,hPa=24,m/s=24"),
    Case("cities_all_min", "pm25_five_cities", ("*_*",), "min", 24, 1.0, HOURLY, "fresh-5",
         "ug/m3=20,degC=1,%=3,hPa=1,m/s=1"),
]  # fmt: skip


HALVES = tuple(dict.fromkeys(c.half for c in CASES))  # in the order they were fixed


def chosen_cases(names: str | None) -> list[Case]:
    """The cases named (comma-separated; None: all), in the order they were fixed.

    ``ValueError`` naming every unknown name: a typo must not run nothing and then
    write an empty result over the committed one.
    """
    wanted = set(names.split(",")) if names else None
    cases = [c for c in CASES if wanted is None or c.name in wanted]
    unknown = sorted((wanted or set()) - {c.name for c in cases})
    if unknown:
        raise ValueError(f"unknown case(s): {', '.join(unknown)}")
    return cases


def history_and_horizon(case: Case, rows: int) -> tuple[int, int]:
    """(H, S) in rows by the rule in the module docstring."""
    if case.week_rows is not None and 3 * case.week_rows + FOLDS * case.week_rows <= rows:
        return 3 * case.week_rows, case.week_rows
    s = rows // (3 + FOLDS)
    return 3 * s, s


def recover_from_config(config: dict[str, Any], truth: np.ndarray, sensors: list[str]) -> Any:
    """Rebuild every sensor from the config's linear map and the backup columns of ``truth``.

    Returns (T, n) recovered readings and the (n,) rebuilt mask.
    """
    col = {s: i for i, s in enumerate(sensors)}
    out = truth.copy()
    rebuilt = np.zeros(len(sensors), dtype=bool)
    for target, entry in config["reconstruction"].items():
        value = np.full(truth.shape[0], float(entry["intercept"]))
        for b, c in entry["coefficients"].items():
            value = value + float(c) * truth[:, col[b]]
        out[:, col[target]] = value
        rebuilt[col[target]] = True
    return out, rebuilt


def tumbling(x: np.ndarray, window: int, aggregate: str) -> np.ndarray:
    """(W, n) aggregates of complete tumbling windows of ``x`` (T, n)."""
    w = x.shape[0] // window
    blocks = x[: w * window].reshape(w, window, x.shape[1])
    return {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[aggregate](blocks, axis=1)


def write_history(path: Path, times: np.ndarray, values: np.ndarray, sensors: list[str]) -> None:
    stamps = np.datetime_as_string(times, unit="ns")
    with path.open("w") as fh:
        fh.write("time," + ",".join(sensors) + "\n")
        for t, row in zip(stamps, values, strict=True):
            fh.write(t + "," + ",".join(repr(float(v)) for v in row) + "\n")


EXPOSURES = (("w/12", 12), ("w/4", 4), ("w", 1))


def exposures(
    window: int, labels: tuple[str, ...] = tuple(e for e, _ in EXPOSURES)
) -> dict[str, int]:
    """The crash contract's exposures in rows: w/12, w/4 and w, rounded half up, >= 1."""
    return {e: max(1, math.floor(window / k + 0.5)) for e, k in EXPOSURES if e in labels}


def eps_vector(config: dict[str, Any], sensors: list[str]) -> np.ndarray:
    """(n,) each sensor's eps as the config states it (v2 and later name every sensor)."""
    given = config["parameters"].get("eps_by_sensor") or {}
    eps = float(config["parameters"]["eps"])
    return np.array([float(given.get(x, eps)) for x in sensors])


def crash_misses(
    truth: np.ndarray,
    recovered: np.ndarray,
    window: int,
    aggregate: str,
    exposure: int,
    eps: np.ndarray,
) -> np.ndarray:
    """(W, n) per tumbling window of ``truth`` (T, n): the fraction of the ``w + m - 1``
    failure positions touching it whose ``m`` lost rows, taken from ``recovered``, put the
    window's aggregate more than ``eps`` off. Direct: every mixed window is built."""
    w = truth.shape[0] // window
    t = truth[: w * window].reshape(w, window, truth.shape[1])
    r = recovered[: w * window].reshape(w, window, truth.shape[1])
    d = np.arange(1 - exposure, window)[:, None]
    pos = np.arange(window)[None, :]
    lost = (pos >= d) & (pos < d + exposure)  # (K, w) rows of the window a failure loses
    mixed = np.where(lost[None, :, :, None], r[:, None], t[:, None])  # (W, K, w, n)
    f = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[aggregate]
    err = np.abs(f(mixed, axis=2) - f(t, axis=1)[:, None])
    return np.asarray((err > eps).mean(axis=1))  # fmt: skip


def plan_config(
    case: Case, csv: Path, s: int, method: str, tmp: Path, exposure: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The exported config of the CLI's plan on the history ``csv``, and its warnings."""
    out = tmp / f"plan_{method}_{exposure}.json"
    argv = ["plan", "--data", str(csv), "--eps", repr(case.eps), "--delta", str(DELTA)]
    argv += ["--window", str(case.window), "--agg", case.aggregate, "--out", str(out)]
    if case.eps_by_unit:
        argv += ["--eps-by-unit", case.eps_by_unit]
    if HAS_HORIZON:
        argv += ["--horizon", str(s)]
    if exposure is not None:
        argv += ["--exposure", str(exposure)]
    if method == "seed":
        argv += ["--calibration", "none", "--no-backtest"]  # the backtest never changes it
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    if code != 0:
        raise RuntimeError(f"{case.name}: plan exited {code}: {err.getvalue()}")
    warnings = [ln for ln in err.getvalue().splitlines() if ln.startswith("warning:")]
    return json.loads(out.read_text()), warnings


def score_config(
    config: dict[str, Any],
    truth: np.ndarray,
    case: Case,
    sensors: list[str],
    crash: dict[str, int],
) -> dict[str, Any]:
    """Misses of the config applied alone to ``truth``: whole windows rebuilt (range) and,
    per exposure label, the crash contract (fractions of failure positions, per window)."""
    recovered, rebuilt = recover_from_config(config, truth, sensors)
    eps = eps_vector(config, sensors)
    miss = np.abs(tumbling(recovered, case.window, case.aggregate)
                  - tumbling(truth, case.window, case.aggregate)) > eps  # fmt: skip
    out: dict[str, Any] = {
        "misses": np.where(rebuilt, miss.sum(axis=0), 0),
        "pairs": np.where(rebuilt, miss.shape[0], 0),
        "backup": len(config["backup_sensors"]),
        "crash": {},
    }
    # A crash leaves the lost readings of the config's kept_readings sensors out of their
    # max/min windows: a fill no kept reading loses to (re-implemented here, not the engine's).
    left_out = recovered.copy()
    kept = [sensors.index(x) for x in config.get("kept_readings", [])]
    if kept:
        left_out[:, kept] = -np.inf if case.aggregate == "max" else np.inf
    for label, m in crash.items():
        lost = crash_misses(truth, left_out, case.window, case.aggregate, m, eps)
        out["crash"][label] = {
            "misses": np.where(rebuilt, lost.sum(axis=0), 0.0),
            "pairs": np.where(rebuilt, lost.shape[0], 0),
            "backup": out["backup"],
        }
    return out


def run_fold(
    case: Case,
    data: Any,
    t: int,
    h: int,
    s: int,
    method: str,
    tmp: Path,
    exposure: int | None = None,
    crash: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One fold: the CLI's plan (``exposure`` rows for the crash contract) on the H rows
    before ``t``, its config applied alone to the next S rows (range, and the crash
    contract at each of ``crash``'s exposures)."""
    sensors = list(data.sensors)
    csv = tmp / "history.csv"
    write_history(csv, data.times[t - h : t], data.values[t - h : t], sensors)
    config, warnings = plan_config(case, csv, s, method, tmp, exposure)
    scored = score_config(config, data.values[t : t + s], case, sensors, crash or {})
    return scored | {"warnings": warnings, "config": config}


def score(folds: list[dict[str, Any]], sensors: list[str]) -> dict[str, Any]:
    misses = np.sum([f["misses"] for f in folds], axis=0)
    pairs = np.sum([f["pairs"] for f in folds], axis=0)
    n = len(sensors)
    savings = float(np.mean([1.0 - f["backup"] / n for f in folds]))
    pooled = float(misses.sum() / pairs.sum()) if pairs.sum() else 0.0
    rates = np.where(pairs > 0, misses / np.maximum(pairs, 1), -1.0)
    worst = int(np.argmax(rates))
    p = (
        float(binomtest(int(misses[worst]), int(pairs[worst]), DELTA, "greater").pvalue)
        if pairs[worst]
        else 1.0
    )
    return {
        "savings": savings,
        "pooled_rate": pooled,
        "rebuilt_pairs": int(pairs.sum()),
        "worst_sensor": sensors[worst] if pairs[worst] else None,
        "worst_rate": float(max(rates[worst], 0.0)),
        "worst_pairs": int(pairs[worst]),
        "worst_p_value": p,
        "honest": bool(pooled <= DELTA and p >= ALPHA),
        "warnings": sorted({w for f in folds for w in f.get("warnings", [])}),
    }


def score_crash(folds: list[dict[str, Any]], sensors: list[str], label: str) -> dict[str, Any]:
    """The crash contract at ``label``'s exposure: rates over (failure position, window
    touched, rebuilt sensor) triples; the worst sensor's test counts windows, each with its
    fraction of missed failure positions (a real count: the binomial tail continued by the
    regularised incomplete beta, ``P(Bin(n, delta) >= k) = I_delta(k, n - k + 1)``)."""
    parts = [f["crash"][label] for f in folds]
    misses = np.sum([p["misses"] for p in parts], axis=0)
    pairs = np.sum([p["pairs"] for p in parts], axis=0)
    n = len(sensors)
    pooled = float(misses.sum() / pairs.sum()) if pairs.sum() else 0.0
    rates = np.where(pairs > 0, misses / np.maximum(pairs, 1), -1.0)
    worst = int(np.argmax(rates))
    k, m = float(misses[worst]), int(pairs[worst])
    p = float(betainc(min(k, m), m - min(k, m) + 1.0, DELTA)) if m and k > 0 else 1.0
    return {
        "savings": float(np.mean([1.0 - f["backup"] / n for f in parts])),
        "pooled_rate": pooled,
        "rebuilt_windows": int(pairs.sum()),
        "worst_sensor": sensors[worst] if pairs[worst] else None,
        "worst_rate": float(max(rates[worst], 0.0)),
        "worst_windows": m,
        "worst_p_value": p,
        "honest": bool(pooled <= DELTA and p >= ALPHA),
    }


def case_folds(case: Case, folds: int = FOLDS) -> tuple[Any, list[str], int, int, np.ndarray]:
    """The case's readings (its sensors only), their names, H, S and the fold origins."""
    data = load_history(DATASETS / case.dataset / "wide.csv")
    names = [x for x in data.sensors if any(fnmatchcase(x, g) for g in case.sensors)]
    data = data.select(names)
    rows = data.values.shape[0]
    h, s = history_and_horizon(case, rows)
    return data, names, h, s, np.linspace(h, rows - s, folds).round().astype(int)


def run_case(
    case: Case, folds: int, live: bool = True, labels: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Per fold the seed's plan, ours for whole windows and ours for each exposure of
    ``labels`` (``EXPOSURES``), every plan scored under the range contract and the crash
    contract at the exposures."""
    data, names, h, s, origins = case_folds(case, folds)
    out: dict[str, Any] = {"case": case.name, "half": case.half, "sensors": len(names)}
    out |= {"aggregate": case.aggregate, "window": case.window, "eps": case.eps, "H": h, "S": s}
    crash = exposures(case.window, labels)
    runs: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plans: list[tuple[str, str, int | None, dict[str, int]]] = [
            ("seed", "seed", None, crash),
            ("ours", "ours", None, crash),
        ]
        plans += [(f"ours@{e}", "ours", m, {e: m}) for e, m in crash.items()]
        for key, method, m, scored in plans:
            start = time.perf_counter()
            runs[key] = [run_fold(case, data, int(t), h, s, method, Path(tmp), m, scored)
                         for t in origins]  # fmt: skip
            seconds[key] = time.perf_counter() - start
    for method in ("seed", "ours"):
        out[method] = score(runs[method], names) | {"seconds": seconds[method]}
    if crash:
        out["crash"] = {
            e: {
                "exposure": m,
                "seed": score_crash(runs["seed"], names, e),
                "ours_range_plan": score_crash(runs["ours"], names, e),
                "ours": score_crash(runs[f"ours@{e}"], names, e)
                | {"seconds": seconds[f"ours@{e}"], "warnings": score(runs[f"ours@{e}"], names)[
                    "warnings"]},
                "ours_range": score(runs[f"ours@{e}"], names),
            }
            for e, m in crash.items()
        }  # fmt: skip
    if live:  # the same version-1 plans, used as the job uses them (bench/honesty_live.py)
        start = time.perf_counter()
        lives = [
            run_live_fold(f["config"], data.times, data.values, names, int(t), s, case.window,
                          case.aggregate)
            for f, t in zip(runs["ours"], origins, strict=True)
        ]  # fmt: skip
        out["ours_live"] = score(lives, names) | {
            "seconds": time.perf_counter() - start,
            "replans": [r for f in lives for r in f["replans"]],
            "failed_replans": [e for f in lives for e in f["failed_replans"]],
        }
    return out


def _has_horizon() -> bool:
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]  # type: ignore[union-attr]
    return any("--horizon" in a.option_strings for a in plan._actions)


HAS_HORIZON = _has_horizon()


def _tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "honest": f"{sum(r['honest'] for r in rows)}/{len(rows)}",
        "mean_savings": float(np.mean([r["savings"] for r in rows])) if rows else None,
    }


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for half in [*HALVES, "all"]:
        rs = [r for r in results if half in ("all", r["half"])]
        out[half] = {
            m: _tally([r[m] for r in rs]) for m in ("seed", "ours", "ours_live")
            if all(m in r for r in rs)
        }  # fmt: skip
        labels = [e for e, _ in EXPOSURES if rs and all(e in r.get("crash", {}) for r in rs)]
        for e in labels:
            out[half][f"crash {e}"] = {
                who: _tally([r["crash"][e][who] for r in rs])
                for who in ("seed", "ours_range_plan", "ours", "ours_range")
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 folds a case")
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--no-live", action="store_true", help="skip the shadow-monitored run (honesty_live)"
    )
    ap.add_argument(
        "--exposures",
        default=",".join(e for e, _ in EXPOSURES),
        help="crash-contract exposures to plan for and score (w/12,w/4,w; empty: range only)",
    )
    args = ap.parse_args(argv)
    labels = tuple(e for e in args.exposures.split(",") if e)
    if set(labels) - {e for e, _ in EXPOSURES}:
        print(f"error: unknown exposure(s): {args.exposures}", file=sys.stderr)
        return 2
    try:
        chosen = chosen_cases(args.cases)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = []
    for case in chosen:
        start = time.perf_counter()
        results.append(run_case(case, 3 if args.quick else FOLDS, not args.no_live, labels))
        r = results[-1]
        print(
            f"{case.name}: seed {r['seed']['pooled_rate']:.3f}/{r['seed']['worst_rate']:.3f} "
            f"{'honest' if r['seed']['honest'] else 'NOT'} {r['seed']['savings']:.0%}; ours "
            f"{r['ours']['pooled_rate']:.3f}/{r['ours']['worst_rate']:.3f} "
            f"{'honest' if r['ours']['honest'] else 'NOT'} {r['ours']['savings']:.0%}"
            + (
                f"; monitored {r['ours_live']['pooled_rate']:.3f}/"
                f"{r['ours_live']['worst_rate']:.3f} "
                f"{'honest' if r['ours_live']['honest'] else 'NOT'} "
                f"{r['ours_live']['savings']:.0%}, {len(r['ours_live']['replans'])} re-plans"
                if "ours_live" in r
                else ""
            )
            + "".join(
                f"; crash {e} (m={c['exposure']}) ours {c['ours']['pooled_rate']:.3f}/"
                f"{c['ours']['worst_rate']:.3f} {'honest' if c['ours']['honest'] else 'NOT'} "
                f"{c['ours']['savings']:.0%} "
                f"(range {'honest' if c['ours_range']['honest'] else 'NOT'})"
                f", seed {'honest' if c['seed']['honest'] else 'NOT'}"
                for e, c in r.get("crash", {}).items()
            )
            + f" ({time.perf_counter() - start:.0f} s)",
            file=sys.stderr,
        )
    report = {
        "protocol": "plan via the CLI on H rows, config applied for S rows, "
        "misses over rebuilt (window, sensor) pairs; worst sensor: scipy binomtest, 1 % level",
        "delta": DELTA,
        "folds": 3 if args.quick else FOLDS,
        "horizon_flag": HAS_HORIZON,
        "summary": summarise(results),
        "cases": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
