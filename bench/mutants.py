"""Mutation check of calibration (both contracts), K-slack and re-planning (issue 10, item 7).

Each mutant is one subtle edit that once passed the whole suite. For every
mutant this script copies ``engine/``, ``tests/`` and ``sample_data/`` into a
temporary directory, applies the edit there (the working tree is never
touched), runs the unit tests that must catch it and reports whether they
failed ("killed") or not ("survived"). The unmutated copy runs first: if it
fails, nothing is judged.

Run from the repository root: ``.venv/bin/python -m bench.mutants [--only a,e]``
(about two minutes on a shared 2-core machine). Prints one JSON object; exits 1 if a
mutant survived or the control failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import print_json

ROOT = Path(__file__).resolve().parents[1]
COPY = ("engine", "tests", "sample_data", "pyproject.toml")


@dataclass(frozen=True)
class Mutant:
    """Replace ``old`` (which must occur exactly once in ``path``) by ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("a: worst-sensor bound without the Bonferroni correction",
           "engine/planning/verdict.py",
           "int(viol[worst]), int(rebuilt[worst]), 1.0 - VERDICT_ALPHA / m",
           "int(viol[worst]), int(rebuilt[worst]), 1.0 - VERDICT_ALPHA",
           ("tests/unit/test_verdict.py",)),
    Mutant("a': sensor test without the Bonferroni correction",
           "engine/planning/verdict.py",
           "return VERDICT_ALPHA / max(rebuilt_sensors, 1)",
           "return VERDICT_ALPHA",
           ("tests/unit/test_verdict.py",)),
    Mutant("b: later calibration passes may relax (np.maximum)",
           "engine/planning/calibration.py",
           "np.minimum(targets, new)",
           "np.maximum(targets, new)",
           ("tests/unit/test_horizon.py",)),
    Mutant("c: quantile level 1 - delta instead of 1 - delta * margin",
           "engine/planning/calibration.py",
           "return 1.0 - self.delta * self.margin",
           "return 1.0 - self.delta",
           ("tests/unit/test_horizon.py",)),
    Mutant("d: flipped sign of the online update",
           "engine/planning/backtest.py",
           "log_scale += spec.adapt_rate",
           "log_scale -= spec.adapt_rate",
           ("tests/unit/test_horizon.py",)),
    Mutant("e: K = k instead of alpha * k",
           "engine/disorder/buffer.py",
           "return self.pd.alpha * self.k",
           "return self.k",
           ("tests/unit/test_disorder.py",)),
    Mutant("f1: the alert reads the overall tally, not the version's",
           "engine/planning/monitor.py",
           "violations, windows_seen = self._by_version[self.version]",
           "violations, windows_seen = self._violations, self._windows",
           ("tests/unit/test_monitor.py", "tests/unit/test_replan.py")),
    Mutant("f2: the re-planning monitor drops the plan version",
           "engine/planning/replan.py",
           "alert = self.monitor.observe(errors, reconstructed, version)",
           "alert = self.monitor.observe(errors, reconstructed)",
           ("tests/unit/test_replan.py",)),
    Mutant("f3: the monitor never moves to the new version",
           "engine/planning/monitor.py",
           "        self.version = int(version)\n",
           "",
           ("tests/unit/test_monitor.py", "tests/unit/test_replan.py")),
    Mutant("f4: a fresh re-plan keeps the alerts' target scale",
           "engine/planning/replan.py",
           "                self.scale = np.ones(len(old.sensors))\n",
           "",
           ("tests/unit/test_replan.py",)),
    Mutant("f5: the pipeline reports shadow errors without the version",
           "engine/stream/reporting.py",
           "reconstructed=targets, version=version.id)",
           "reconstructed=targets)",
           ("tests/unit/test_versions.py",)),
    Mutant("x1: a failure loses one row fewer than its exposure",
           "engine/stretches.py",
           "a + np.clip(d + exposure, 0, window)",
           "a + np.clip(d + exposure - 1, 0, window)",
           ("tests/unit/test_exposure.py",)),
    Mutant("x2: avg's crash error is the lost rows' sum, not over the window",
           "engine/aggregates.py",
           "return err if self.scale_by_window else err / window",
           "return err",
           ("tests/unit/test_exposure.py",)),
    Mutant("x3: max/min keep only the readings before the lost rows",
           "engine/aggregates.py",
           "kept = np.maximum(range_max(t, a, lo, window), range_max(t, hi, a + window, window))",
           "kept = range_max(t, a, lo, window)",
           ("tests/unit/test_exposure.py",)),
    Mutant("x4: the crash score of max/min ignores the headroom below the extreme",
           "engine/aggregates.py",
           "over = np.maximum(-rho, 0.0) * eps / (eps + g)",
           "over = np.maximum(-rho, 0.0)",
           ("tests/unit/test_exposure.py",)),
    Mutant("x5: max/min calibrated without the mirrored residual",
           "engine/aggregates.py",
           "        return False\n",
           "        return True\n",
           ("tests/unit/test_crash_contract.py",)),
    Mutant("x6: a sensor with no measured error gets an infinite target",
           "engine/planning/calibration.py",
           "        new = np.where(flat, sd**2, new)\n",
           "",
           ("tests/unit/test_crash_contract.py",)),
    Mutant("x7: the crash verdict tests triples as if independent",
           "engine/planning/verdict.py",
           "window_p_value(v / self.positions, r // self.positions, delta)",
           "window_p_value(v, r, delta)",
           ("tests/unit/test_crash_contract.py",)),
    Mutant("x8: the backtest's crash tally counts backed-up sensors' misses",
           "engine/planning/backtest.py",
           "crash_viol += np.where(rebuilt, lost.sum(axis=(0, 1)), 0)",
           "crash_viol += lost.sum(axis=(0, 1))",
           ("tests/unit/test_crash_contract.py",)),
)  # fmt: skip


def copy_tree(dest: Path) -> None:
    """The parts of the repository the unit tests need (no caches, no venv)."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def run_tests(where: Path, tests: tuple[str, ...]) -> tuple[bool, list[str], float]:
    """Run ``tests`` in ``where``; returns (passed, failing test ids, seconds)."""
    start = time.perf_counter()
    # -rf lists every failing test on one "FAILED id" line each.
    cmd = [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", "-rf"]
    done = subprocess.run(cmd, cwd=where, capture_output=True, text=True, check=False)
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    return done.returncode == 0, failed, round(time.perf_counter() - start, 1)


def apply(where: Path, mutant: Mutant) -> None:
    path = where / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: its text is not found once in {mutant.path}")
    path.write_text(text.replace(mutant.old, mutant.new))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated mutant ids, e.g. a,e,f2")
    args = parser.parse_args()
    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    chosen = [m for m in MUTANTS if not wanted or m.name.split(":")[0] in wanted]
    tests = tuple(sorted({t for m in chosen for t in m.tests}))
    with tempfile.TemporaryDirectory(prefix="lacuna-mutants-") as tmp:
        clean = Path(tmp) / "clean"
        copy_tree(clean)
        ok, failed, seconds = run_tests(clean, tests)
        out: dict[str, object] = {"control": {"passed": ok, "failed": failed, "s": seconds}}
        if not ok:
            print_json(out)
            return 1
        results = []
        for i, mutant in enumerate(chosen):
            where = Path(tmp) / f"m{i}"
            copy_tree(where)
            apply(where, mutant)
            ok, failed, seconds = run_tests(where, mutant.tests)
            results.append(
                {"mutant": mutant.name, "edit": f"{mutant.path}: {mutant.old.strip()!r} -> "
                 f"{mutant.new.strip()!r}", "killed": not ok, "caught_by": failed, "s": seconds}
            )  # fmt: skip
            shutil.rmtree(where)
        out["mutants"] = results
        out["survived"] = [r["mutant"] for r in results if not r["killed"]]
    print_json(out)
    return 1 if out["survived"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
