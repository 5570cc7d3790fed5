"""Export glue: the config file, its checks and what to paste in production."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from engine.data import SensorHistory
from engine.data.names import spreadsheet_safe
from engine.export import dump_config, plan_to_config, validate_config
from engine.export.snippets import ProductionPaths, contract_text
from engine.planning import BackupPlan

MIME = {"json": "application/json", "yaml": "application/x-yaml"}


def config_name(fmt: str) -> str:
    """The file name the Export page downloads the config as."""
    return f"lacuna_backup.{fmt}"


def config_text(plan: BackupPlan, fmt: str) -> tuple[dict[str, Any], str]:
    """The schema-v3 config of ``plan`` (validated) and its text in ``fmt``, its production
    snippets naming the file the page downloads (``config_name``)."""
    config = plan_to_config(plan, paths=ProductionPaths(config=config_name(fmt)))
    validate_config(config)
    return config, dump_config(config, fmt)


def summary_text(config: dict[str, Any], name: str) -> str:
    """The Export page's line on what the config holds: which sensors are backed up, which
    keep their readings under a crash (nothing rebuilds them then), which are rebuilt."""
    n, backed = len(config["sensors"]), len(config["backup_sensors"])
    kept = len(config.get("kept_readings", ()))
    head = f"{name}: valid against backup config schema v{config['schema_version']} — "
    rebuilt = n - backed - kept
    rest = f", {rebuilt} rebuilt from them" if rebuilt else ""
    if not kept:
        return head + f"{n} sensors, {backed} backed up{rest}."
    return head + (
        f"{n} sensors, {backed} backed up, {kept} keep their readings under a crash (the "
        f"window state holds them; a rebuilt range rebuilds them from the backup){rest}."
    )


def validity_text(config: dict[str, Any]) -> str:
    """One sentence: the fit period and until when the plan may be used."""
    v = config["validity"]
    return (
        f"Fitted on {v['fit_start']} .. {v['fit_end']}; valid until {v['valid_until']} "
        f"(horizon {v['horizon_rows']} rows). The `run` job (its command is in the PySpark "
        "script's docstring below) plans again by itself "
        "once the stream passes that time (or when its live monitor alerts), and keeps "
        "every plan version with the backup; a backup kept another way needs a new plan "
        f"by then (`recover` warns outside {v['fit_end']} .. {v['valid_until']})."
    )


def backup_csv(history: SensorHistory, plan: BackupPlan) -> bytes:
    """The backed-up sensors' readings: what production keeps, and ``recover`` reads."""
    frame = (
        history.select(list(plan.backup_sensors)).to_frame()
        if plan.backup_sensors
        else (history.to_frame()[["time"]])
    )
    # names a spreadsheet would run as formulas get a leading quote; recover reads them back
    frame.columns = [spreadsheet_safe(str(c)) for c in frame.columns]
    return frame.to_csv(index=False).encode()


BACKUP_CSV = "lacuna_backup_sensors.csv"


def recover_command(config_name: str) -> str:
    """A shell command that rebuilds every sensor, run from the folder holding the two
    downloads: this server's interpreter and checkout by absolute path, so it works
    outside the repository too."""
    root = Path(__file__).resolve().parent.parent
    python = shlex.quote(sys.executable)
    return (
        "# in the folder that holds the two downloads:\n"
        f"PYTHONPATH={shlex.quote(str(root))} \\\n  {python} -m engine recover \\\n"
        f"  --config {shlex.quote(config_name)} --backup {BACKUP_CSV} --out all_sensors.csv"
    )


def snippets_contract(plan: BackupPlan) -> str:
    """What the plan's contract asks of a job built from the snippets below (the script's
    docstring and the Flink keys' comment say the same)."""
    return contract_text(plan.parameters.exposure, plan.sampling_interval_s)
