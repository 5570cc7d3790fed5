"""Export: the backup config (JSON schema, YAML), its loader, snippets, offline recovery.

``config``: plan -> config dict, written as JSON or YAML; ``codec``: the config's window
query and times, typed (``to_config``, ``from_config``); ``loader``: validation against
``schema/`` and ``load_config``; ``recover``: rebuild every sensor from a config and a
file of the backup sensors.
"""

from engine.export.codec import from_config, iso_utc, parse_utc, plan_parameters, to_config
from engine.export.config import (
    check_config_out,
    dump_config,
    json_safe,
    plan_to_config,
    production_snippets,
    write_config,
)
from engine.export.loader import BackupConfig, load_config, load_schema, validate_config
from engine.export.recover import RecoverResult, recover_file

__all__ = [
    "BackupConfig", "RecoverResult", "check_config_out", "dump_config", "from_config",
    "iso_utc", "json_safe", "load_config", "load_schema", "parse_utc", "plan_parameters",
    "plan_to_config", "production_snippets", "recover_file", "to_config", "validate_config",
    "write_config",
]  # fmt: skip
