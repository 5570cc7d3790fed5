"""Mutation check of calibration (both contracts), K-slack, re-planning, online control,
the production job's exposure rule and shadow check, the live backup's compaction and
the selection's indispensable-sensor screen.

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
COPY = ("engine", "ui", "tests", "sample_data", "bench", "pyproject.toml")


CTRL = "tests/unit/test_control.py::"
INC = "tests/unit/test_incremental_selection.py::"
LOOP = "tests/unit/test_control_loop.py::"
BOUND = CTRL + "test_the_miss_fraction_bound_holds_for_any_errors_and_delays"
KEPT = "tests/unit/test_kept_readings.py::"
COMPACT = "tests/unit/test_run_compaction.py"
JOB_CONTROL = "tests/unit/test_job_control.py"
SCREEN = "tests/unit/test_selection_screen.py"
PARTIALS = "tests/unit/test_partials.py"
LIVE_SHADOW = (
    "tests/unit/test_crash_shadow.py::"
    "test_each_row_is_rebuilt_under_its_own_version_and_each_window_counts_for_its_oldest"
)
FULL_BATCH = "tests/unit/test_crash_shadow.py::test_readings_a_full_batch_stored_are_scored_as_read"
KEPT_PLAN = KEPT + "test_a_crash_plan_for_max_keeps_the_smooth_sensors_and_backs_up_the_spiky_one"


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
           "engine/planning/backtest_result.py",
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
    Mutant("c': the conformal quantile read one rank low",
           "engine/planning/horizon.py",
           "out[j] = np.partition(errors[:, j], rank - 1)[rank - 1]",
           "out[j] = np.partition(errors[:, j], rank - 2)[rank - 2]",
           ("tests/unit/test_horizon.py::test_conformal_quantile_is_the_finite_sample_rank",)),
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
           "return self._after(self.monitor.observe(errors, reconstructed, version), version)",
           "return self._after(self.monitor.observe(errors, reconstructed), version)",
           ("tests/unit/test_replan.py",)),
    Mutant("f3: the monitor never moves to the new version",
           "engine/planning/monitor.py",
           "        self._add(version, violations, windows)\n        self.version = int(version)\n",
           "        self._add(version, violations, windows)\n",
           ("tests/unit/test_monitor.py", "tests/unit/test_replan.py")),
    Mutant("f4: a fresh re-plan keeps the alerts' target scale",
           "engine/planning/replan.py",
           "        self.scale = np.ones(len(old.sensors))\n        return fresh_plan",
           "        return fresh_plan",
           ("tests/unit/test_replan.py",)),
    Mutant("f5: the pipeline reports shadow errors without the version",
           "engine/live/reporting.py",
           "reconstructed=targets, version=version.id)",
           "reconstructed=targets)",
           ("tests/unit/test_versions.py",)),
    Mutant("g1: the control update's sign flipped",
           "engine/planning/control.py",
           "self.scale + self.config.gamma * (aim - u)",
           "self.scale - self.config.gamma * (aim - u)",
           (BOUND, CTRL + "test_an_adversary_that_always_misses_is_held_to_the_bound_and_forced",)),
    Mutant("g2: no floor: a sensor at s_min is not forced into the backup",
           "engine/planning/control.py",
           "return np.where(forced, 0.0, self.targets",
           "return np.where(False, 0.0, self.targets",
           (BOUND, CTRL + "test_an_adversary_that_always_misses_is_held_to_the_bound_and_forced",)),
    Mutant("g3: a forced sensor sinks on counterfactual misses",
           "engine/planning/control.py",
           "backed = np.where(forced, np.minimum(backed, aim), backed)",
           "backed = np.where(forced, backed, backed)",
           (BOUND, CTRL + "test_a_forced_sensor_does_not_sink_on_counterfactual_misses",)),
    Mutant("g4: an unmeasured rebuilt window counts as a hit",
           "engine/planning/control.py",
           "np.where(np.isnan(miss), 1.0, miss)",
           "np.where(np.isnan(miss), 0.0, miss)",
           (CTRL + "test_an_unmeasured_rebuilt_window_counts_as_a_miss",)),
    Mutant("g5: release without a full record of measured windows",
           "engine/planning/control.py",
           "full = self.evidence_count >= cfg.evidence_windows",
           "full = self.evidence_count >= 0",
           (CTRL + "test_release_needs_a_full_record_of_measured_clean_windows",)),
    Mutant("g6: release whatever the record's misses",
           "engine/planning/control.py",
           "clean = self.evidence.sum(axis=1) <= cfg.aim * cfg.evidence_windows",
           "clean = self.evidence.sum(axis=1) >= 0",
           (CTRL + "test_release_is_refused_while_the_recent_record_holds_misses",)),
    Mutant("g7: no hold after an add",
           "engine/planning/control.py",
           "held = self.windows - self.added_at < cfg.hold_windows",
           "held = self.windows - self.added_at < 0",
           (CTRL + "test_a_sensor_added_by_the_controller_is_held",)),
    Mutant("g8: no hysteresis margin on release",
           "engine/planning/control.py",
           "cfg.release_margin, cfg.max_releases",
           "1.0, cfg.max_releases",
           (CTRL + "test_hysteresis_keeps_a_sensor_whose_release_would_leave_little_slack",)),
    Mutant("g9: no cap on releases per decision",
           "engine/planning/control.py",
           "cfg.release_margin, cfg.max_releases",
           "cfg.release_margin, None",
           (CTRL + "test_releases_are_limited_per_decision",)),
    Mutant("g10: the scale is not clipped above",
           "engine/planning/control.py",
           "self.scale = np.minimum(self.config.s_max, self.scale + self.config.gamma * (aim - u))",
           "self.scale = self.scale + self.config.gamma * (aim - u)",
           (BOUND,)),
    Mutant("g11: a replayed window is applied again",
           "engine/planning/control.py",
           "if f.window < self.watermark or f.window in self.recent:",
           "if f.window < self.watermark and f.window in self.recent:",
           (CTRL + "test_a_replayed_or_late_window_is_applied_once",)),
    Mutant("i1: adding a sensor updates C with the wrong sign",
           "engine/selection/incremental.py",
           "_rank_one(self.C, c, -1.0 / pivot)",
           "_rank_one(self.C, c, 1.0 / pivot)",
           (INC + "test_adds_and_removals_match_direct_solves",)),
    Mutant("i2: removing a sensor updates C with the wrong sign",
           "engine/selection/incremental.py",
           "_rank_one(self.C, b, 1.0 / p)",
           "_rank_one(self.C, b, -1.0 / p)",
           (INC + "test_adds_and_removals_match_direct_solves",)),
    Mutant("i3: a sensor with target 0 is left to the greedy",
           "engine/selection/incremental.py",
           "np.flatnonzero(t <= 0.0)",
           "np.flatnonzero(t < 0.0)",
           (INC + "test_a_sensor_with_target_zero_is_backed_up_itself",)),
    Mutant("i4: a release ignores its margin",
           "engine/selection/incremental.py",
           "(raised <= margin * tol[:, None])",
           "(raised <= tol[:, None])",
           (INC + "test_release_refuses_a_removal_that_breaks_a_target",)),
    Mutant("s1: every greedy run taken as all-indispensable",
           "engine/selection/greedy.py",
           "self.complete = len(forced) == live",
           "self.complete = len(forced) >= 0",
           ("tests/unit/test_selection.py",)),
    Mutant("s2: the ridge check shifts the diagonal the wrong way",
           "engine/model/repair.py",
           "shifted.flat[:: block.shape[0] + 1] -= level",
           "shifted.flat[:: block.shape[0] + 1] += level",
           ("tests/unit/test_model.py",)),
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
           "engine/planning/crash_result.py",
           "window_p_value(v / self.positions, r // self.positions, delta)",
           "window_p_value(v, r, delta)",
           ("tests/unit/test_crash_contract.py",)),
    Mutant("x8: the backtest's crash tally counts backed-up sensors' misses",
           "engine/planning/backtest.py",
           "crash_viol += np.where(rebuilt, lost.sum(axis=(0, 1)), 0)",
           "crash_viol += lost.sum(axis=(0, 1))",
           ("tests/unit/test_crash_contract.py",)),
    Mutant("e1: a micro-batch over the exposure keeps the plan's backup set",
           "engine/live/exposure.py",
           "    if rows > m:\n",
           "    if rows > 2 * m:\n",
           ("tests/unit/test_exposure_rules.py",)),
    Mutant("e2: after a failure the plan's set again at once",
           "engine/live/exposure.py",
           "    return (damaged_until // slide) * slide + window - 1",
           "    return damaged_until",
           ("tests/unit/test_exposure_rules.py",)),
    Mutant("e3: a crash covered by the crash contract whatever it lost",
           "engine/live/recovery_report.py",
           "exposure is not None and lost_rows <= exposure",
           "exposure is not None",
           ("tests/unit/test_exposure_rules.py",)),
    Mutant("n1: the live loop gives the controller no feedback",
           "engine/live/control_loop.py",
           "decision = self.controller.observe(self._feedback(closed))",
           "decision = self.controller.observe([])",
           (LOOP + "test_a_broken_sensor_is_backed_up_by_a_control_version",)),
    Mutant("n2: the shadow feedback's miss flipped (a hit counts as the miss)",
           "engine/planning/feedback.py",
           "return (np.abs(error) > eps).astype(float)",
           "return (np.abs(error) <= eps).astype(float)",
           (LOOP + "test_window_misses_match_a_direct_reference",
            LOOP + "test_a_broken_sensor_is_backed_up_by_a_control_version")),
    Mutant("n3: windows holding rebuilt rows count as measured",
           "engine/live/control_loop.py",
           "measured=whole & ~closed.recovered",
           "measured=whole",
           (LOOP + "test_no_release_without_measured_windows",)),
    Mutant("j8: the production job lets a micro-batch over the exposure keep the plan's set",
           "engine/job/exposure.py",
           "return exposure is not None and rows > exposure",
           "return exposure is not None and rows > 2 * exposure",
           ("tests/unit/test_job_exposure.py",)),
    Mutant("j9: the production job counts a batch's rows in one window only",
           "engine/job/exposure.py",
           'per_sensor = partials.groupby("sensor", sort=False)["readings"].sum()',
           'per_sensor = partials.groupby("sensor", sort=False)["readings"].max()',
           ("tests/unit/test_job_exposure.py",)),
    Mutant("k1: the backtest scores kept sensors as rebuilt from the backup",
           "engine/planning/backtest.py",
           "recovered = leave_out(",
           "recovered = (lambda r, _k, _a: r)(",
           (KEPT + "test_the_backtest_scores_a_folds_kept_sensors_by_their_kept_readings",)),
    Mutant("k2: calibration keeps a sensor whose kept readings miss by up to twice eps",
           "engine/planning/calibration.py",
           "return np.asarray(q <= spec.eps)",
           "return np.asarray(q <= 2 * spec.eps)",
           (KEPT_PLAN,)),
    Mutant("k3: a re-target to a smaller eps keeps what was measured at the larger one",
           "engine/planning/reselect.py",
           "still = [i for i in kept if factor[i] >= 1.0]",
           "still = list(kept)",
           (KEPT + "test_a_smaller_eps_does_not_keep_what_was_measured_at_a_larger_one",)),
    Mutant("k4: the shadow check scores kept sensors as rebuilt",
           "engine/planning/feedback.py",
           "if kept is not None and exposure is not None and np.any(kept):",
           "if False:",
           (KEPT + "test_the_shadow_check_scores_kept_sensors_by_their_kept_readings",)),
    Mutant("k5: the live control loop scores kept sensors as rebuilt",
           "engine/live/control_loop.py",
           "kept=np.isin(self.plan.sensors, self.plan.keepable),",
           "kept=None,",
           (LOOP + "test_a_kept_sensor_feeds_the_miss_of_its_kept_readings",)),
    Mutant("x9: the job's crash check scores rows a batch over the exposure backed up as rebuilt",
           "engine/job/crash_check.py",
           "        rebuilt[whole_rows] = truth[whole_rows]",
           "        pass",
           ("tests/unit/test_job_crash_check.py",)),
    Mutant("x10: the job's crash check rebuilds every row under the version in force",
           "engine/job/crash_check.py",
           "            group[version == number] = k",
           "            pass",
           ("tests/unit/test_job_crash_check.py",)),
    Mutant("x11: several rebuilds scored together all score as the first",
           "engine/aggregates.py",
           "        for rebuilt in rebuilts:\n",
           "        for rebuilt in list(rebuilts[:1]) * len(rebuilts):\n",
           ("tests/unit/test_exposure.py::test_several_rebuilds_score_as_each_alone",)),
    Mutant("j1: the job's controller scores every row as backed up by the newest set",
           "engine/job/control.py",
           "            [(self._map(p.version, p.config), p.config.backup_sensors) "
           "for p in plans],",
           "            [(self._map(p.version, p.config), plans[-1].config.backup_sensors) "
           "for p in plans],",
           (JOB_CONTROL,)),
    Mutant("v1: rows are rebuilt under versions with every map's targets but no backed-up set",
           "engine/planning/feedback.py",
           "        backed[np.ix_(rows, idx)] = True",
           "        pass",
           (JOB_CONTROL, LOOP + "test_a_broken_sensor_is_backed_up_by_a_control_version")),
    Mutant("j2: the job's controller measures windows with unknown rows or numbers",
           "engine/job/control.py",
           "        measured = known.reshape(count, w, n).all(axis=1)  # (count, n)",
           "        measured = np.ones((count, n), bool)",
           (JOB_CONTROL,)),
    Mutant("j3: the job's controller never installs the set it chose",
           "engine/job/control.py",
           "        if chosen == set(current.config.backup_sensors):",
           "        if True:",
           (JOB_CONTROL,)),
    Mutant("j4: a re-plan under control installs the refit's own set, not the controller's",
           "engine/job/control.py",
           "        return _config(with_backup(plan, self.controller.backup))",
           "        return _config(plan)",
           (JOB_CONTROL,)),
    Mutant("j5: a model fit finishing after a re-plan was adopted replaces the fresher model",
           "engine/job/control.py",
           "        if self.controller is not None:  # a re-plan's fresher model was adopted",
           "        if False:  # a re-plan's fresher model was adopted",
           (JOB_CONTROL,)),
    Mutant("j6: absent rows of a short window count as rebuilt for every sensor",
           "engine/job/control.py",
           "        backed[take < 0] = True",
           "        pass",
           (JOB_CONTROL,)),
    Mutant("j7: the job's feedback delay is measured after the batch's feedback is applied",
           "engine/job/control.py",
           "        self._measure_delay(max_event_us)\n        if starts.size:",
           "        if starts.size:",
           (JOB_CONTROL,)),
    Mutant("k6: a set change forgets the kept sensors it had backed up",
           "engine/planning/steering.py",
           "    return tuple(plan.sensors.index(s) for s in plan.keepable)",
           "    return tuple(plan.sensors.index(s) for s in plan.kept_sensors)",
           (KEPT + "test_a_kept_sensor_backed_up_for_a_while_keeps_its_readings_once_released",
            LOOP + "test_a_kept_sensor_released_by_the_controller_keeps_its_readings")),
    Mutant("k7: the live controller scores a backed-up kept sensor's release as rebuilt",
           "engine/live/control_loop.py",
           "kept=np.isin(self.plan.sensors, self.plan.keepable),",
           "kept=np.isin(self.plan.sensors, self.plan.kept_sensors),",
           (LOOP + "test_a_backed_up_kept_sensor_is_released_on_its_kept_readings",)),
    Mutant("k8: the job's controller scores a backed-up kept sensor's release as rebuilt",
           "engine/job/control.py",
           "kept=np.isin(sensors, plan.keepable),",
           "kept=np.isin(sensors, plan.kept_sensors),",
           (JOB_CONTROL + "::test_a_backed_up_kept_sensors_counterfactual_leaves_its_"
            "lost_readings_out",)),
    Mutant("k9: a re-plan the restarting pipeline refused is dropped, not retried",
           "engine/live/control_loop.py",
           "            elif self._unsent is not None:\n                self._send()\n",
           "",
           (LOOP + "test_a_replan_the_pipeline_cannot_take_yet_is_installed_at_the_next_batch",)),
    Mutant("k10: a re-plan the controller cannot rebase on leaves the monitor waiting for it",
           "engine/live/control_loop.py",
           "                self._busy, self._wait_for = False, None\n",
           "                self._busy = False\n",
           (LOOP + "test_a_replan_that_fails_to_rebase_leaves_the_schedule_running",)),
    Mutant("i5: a refresh leaves the backed-up sensors' regression rows at 0, not the identity",
           "engine/selection/incremental.py",
           "            self.B[held, np.arange(held.size)] = 1.0\n",
           "",
           ("tests/unit/test_incremental_selection.py::"
            "test_a_refresh_recomputes_every_matrix_from_the_covariance",)),
    Mutant("i6: a refresh multiplies the factor's inverse in the wrong order",
           "engine/selection/incremental.py",
           "self.P = inv.T @ inv",
           "self.P = inv @ inv.T",
           ("tests/unit/test_incremental_selection.py::"
            "test_a_refresh_recomputes_every_matrix_from_the_covariance",)),
    Mutant("s3: the indispensable screen drops the sensors it cannot cover, not those it can",
           "engine/selection/greedy.py",
           "unsure = np.flatnonzero(~(bound <= self.tol[live]))",
           "unsure = np.flatnonzero(bound <= self.tol[live])",
           (SCREEN,)),
    Mutant("s4: the screen bounds a sensor on a block it could not factorise",
           "engine/selection/core.py",
           "out[rows] = np.where(ok, bound, np.inf)",
           "out[rows] = bound",
           (SCREEN,)),
    Mutant("s5: the greedy's ranking block is rebuilt without the chosen sensors' downdate",
           "engine/selection/greedy.py",
           "            exact -= self.lines[:m, part].T @ self.lines[:m, rows]\n",
           "",
           ("tests/unit/test_selection.py::"
            "test_the_float32_block_is_rebuilt_from_the_factor_on_two_threads",)),
    Mutant("c1: a reader takes a compacted batch from its compaction and its own directory",
           "engine/backup/runs.py",
           "                found += parquet_under(cover)\n            continue\n",
           "                found += parquet_under(cover)\n",
           (COMPACT,)),
    Mutant("c2: an unmarked compaction (a crash before its _SUCCESS) hides the batches",
           "engine/backup/dataset.py",
           "if (compacted or marked) and not os.path.exists(",
           "if (marked and not compacted) and not os.path.exists(",
           (COMPACT,)),
    Mutant("c3: a compaction drops the rows of one it folds in",
           "engine/backup/run_compaction.py",
           "for f in parquet_under(d)]",
           "for f in parquet_under(d)][:0]",
           (COMPACT,)),
    Mutant("r1: the job's shadow check takes a batch's stored sensors to be the plan's set",
           "engine/job/partials.py",
           "keep = sensor.of(stored) >= 0",
           "keep = sensor.of(lm.backup) >= 0",
           (PARTIALS,)),
    Mutant("r2: a window open when an older state was restored is scored on its later batches",
           "engine/job/partials.py",
           "rebuilt = finished.where((closed[REBUILT + COUNT.name] > 0) & (stored >= 0))",
           "rebuilt = finished.where(closed[REBUILT + COUNT.name] > 0)",
           (PARTIALS,)),
    Mutant("r3: avg/sum take a target's count as the steps a recovery has, backup gaps or not",
           "engine/job/partials.py",
           "np.where((lo == hi) & (hi == n), n, UNKNOWN)",
           "n",
           (PARTIALS,)),
    Mutant("r4: a window is on the record of the newest version it was read under",
           "engine/job/partials.py",
           'more: dict[str, Reduce] = {STORED: "sum", FIRST: "min"}',
           'more: dict[str, Reduce] = {STORED: "sum", FIRST: "max"}',
           (PARTIALS,)),
    Mutant("r5: the job's monitor counts an older version's windows under the one in force",
           "engine/job/tally.py",
           'rebuilt = results[~results["backed_up"].astype(bool) & own]',
           'rebuilt = results[~results["backed_up"].astype(bool)]',
           (PARTIALS,)),
    Mutant("l1: the live shadow check rebuilds every row under the newest version",
           "engine/live/shadow_rows.py",
           "maps = [(s.linear_map, s.backup_sensors) for s in specs]",
           "maps = [(specs[-1].linear_map, specs[-1].backup_sensors) for s in specs]",
           (LIVE_SHADOW,)),
    Mutant("l2: a live window counts on the record of the newest version it holds",
           "engine/live/shadow_rows.py",
           "return ShadowRows(rebuilt, ids[group[starts]])",
           "return ShadowRows(rebuilt, ids[group[starts] * 0 + group.max()])",
           (LIVE_SHADOW,)),
    Mutant("l3: the live monitor judges the version in force by an older version's windows",
           "engine/live/reporting.py",
           "own = rows.versions == version.id  # the monitor judges the version in force",
           "own = rows.versions >= 0  # the monitor judges the version in force",
           (LIVE_SHADOW,)),
    Mutant("l4: the live shadow rows rebuild a reading its full batch stored",
           "engine/live/shadow_rows.py",
           "    rebuilt[stored] = block[stored]\n",
           "",
           (FULL_BATCH,)),
    Mutant("l5: the closed windows forget which readings a full batch stored",
           "engine/live/batch.py",
           "        stored=state.stored_cells[lo:hi],\n",
           "",
           (FULL_BATCH,)),
    Mutant("l6: the window state forgets a full batch's readings at the snapshot",
           "engine/live/batch.py",
           "            stored=self.stored_cells,\n",
           "",
           (FULL_BATCH,)),
    Mutant("l7: the live controller hears a reading its full batch stored as rebuilt",
           "engine/live/control_loop.py",
           "        backed |= stored\n",
           "",
           (LOOP + "test_readings_a_full_batch_stored_reach_the_controller_as_backed_up",)),
    Mutant("r6: the job's crash check puts a window on the newest version among its rows",
           "engine/job/crash_check.py",
           "            out[i] = int(part.min())",
           "            out[i] = int(part.max())",
           ("tests/unit/test_job_crash_check.py::"
            "test_a_windows_record_is_the_oldest_version_among_its_rows",)),
    Mutant("r7: recover leaves out the readings of a time step the map cannot rebuild",
           "engine/export/recover.py",
           "held = extra | (~kept[:, None] & ~np.isnan(wide))",
           "held = extra",
           ("tests/unit/test_wide.py",)),
    Mutant("l8: the range shadow check scores windows holding rows recovery rebuilt",
           "engine/live/reporting.py",
           "errors = np.where(np.asarray(advance.closed.recovered)[:, None], np.nan, errors)",
           "errors = np.asarray(errors)",
           ("tests/unit/test_crash_shadow.py",)),
    Mutant("l9: the seed snapshot replaced outside a transaction",
           "engine/live/store.py",
           'with self._transaction(f"the window state of run {run}") as cur:',
           "with self._cursor() as cur:",
           ("tests/unit/test_store.py",)),
    Mutant("l10: a resumed pipeline forgets the versions before the one in force",
           "engine/live/pipeline.py",
           "if v.id < self._version.id}",
           "if v.id < 0}",
           ("tests/unit/test_stream_batch.py",)),
    Mutant("l11: a crash recovery ignores the readings in flight at the last commit",
           "engine/live/crash.py",
           "if flight is not None and crashed.batch_id >= 0:",
           "if False:",
           ("tests/unit/test_crash_in_flight.py",)),
    Mutant("q1: a job compaction replaces a results fold already committed",
           "engine/job/compaction.py",
           "if not folder.is_dir() or (target / COMMIT_MARKER).exists():",
           "if not folder.is_dir():",
           ("tests/unit/test_job_compaction_crash.py",)),
    Mutant("q2: a job compaction folds plain batches only, not a committed fold it spans",
           "engine/job/compaction.py",
           "if _within(batch, first, last)",
           "if _within(batch, first, last) and not is_compacted(batch)",
           ("tests/unit/test_job_compaction_crash.py",)),
    Mutant("q3: two job compactions of one backup at once",
           "engine/job/compaction.py",
           "fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)",
           "pass",
           ("tests/unit/test_job_compaction_crash.py",)),
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
