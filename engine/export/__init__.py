"""Export: the backup config (JSON schema, YAML), its loader, snippets, offline recovery.

``config``: plan -> config dict, validation against ``schema/``, ``load_config``;
``recover``: rebuild every sensor from a config and a file of the backup sensors.
"""

from engine.export.config import (
    BackupConfig,
    dump_config,
    json_safe,
    load_config,
    load_schema,
    plan_to_config,
    production_snippets,
    validate_config,
    write_config,
)
from engine.export.recover import RecoverResult, recover_file

__all__ = [
    "BackupConfig", "RecoverResult", "dump_config", "json_safe", "load_config", "load_schema",
    "plan_to_config", "production_snippets", "recover_file", "validate_config", "write_config",
]  # fmt: skip
