"""The ``reconstruction`` section of a backup config: a fast schema check and its matrix.

At 1,056 sensors the section holds about 150,000 coefficients, and ``jsonschema``
spends about 8 microseconds on each (0.66 s of a 1.2 s load). ``schema_problem``
decides the same question (does the section satisfy the schema's
``properties.reconstruction``?) with plain type checks per target, in a few
milliseconds. It only has to decide: on any problem, ``validate_config`` runs
the full ``jsonschema`` validation to word the error exactly as before, so the
fast path never changes a message, and ``tests/unit/test_reconstruction_check.py``
checks that the two agree on a corpus of bad sections.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ENTRY_KEYS = frozenset({"intercept", "coefficients", "conditional_variance"})
# bool is an int subclass but not a JSON Schema number; the exact types let the
# common case skip per-value isinstance checks.
_PLAIN_NUMBERS = frozenset({int, float})


def is_number(value: Any) -> bool:
    """JSON Schema's ``number``: an int or float, never a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def schema_problem(section: Any) -> tuple[tuple[str, ...], str] | None:
    """The first place where ``section`` breaks the schema's ``reconstruction``, or None.

    Mirrors ``backup_config.v{1,2,3}.json`` (identical there): an object of
    objects with exactly ``intercept`` (number), ``coefficients`` (object of
    numbers) and ``conditional_variance`` (number >= 0). Returns the path
    (keys from ``reconstruction`` down) and a short reason.
    """
    if not isinstance(section, dict):
        return (), "not an object"
    for target, entry in section.items():
        found = _entry_problem(entry)
        if found is not None:
            return (target, *found[0]), found[1]
    return None


def _entry_problem(entry: Any) -> tuple[tuple[str, ...], str] | None:
    if not isinstance(entry, dict):
        return (), "not an object"
    if entry.keys() != ENTRY_KEYS:
        extra = sorted(set(entry) - ENTRY_KEYS)
        return (), f"unexpected key(s) {extra}" if extra else "a required key is missing"
    for key in ("intercept", "conditional_variance"):
        if not is_number(entry[key]):
            return (key,), "not a number"
    if entry["conditional_variance"] < 0:
        return ("conditional_variance",), "below 0"
    coefs = entry["coefficients"]
    if not isinstance(coefs, dict):
        return ("coefficients",), "not an object"
    if not set(map(type, coefs.values())) <= _PLAIN_NUMBERS:
        for backup, value in coefs.items():  # rare: an odd type, or an int/float subclass
            if not is_number(value):
                return ("coefficients", backup), "not a number"
    return None


def coefficient_matrix(
    section: dict[str, Any], targets: tuple[str, ...], backup: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``intercept`` (k,), ``coef`` (k, m) and ``conditional_variance`` (k,) of a checked section.

    ``targets`` (k) and ``backup`` (m) give the row and column order; a
    coefficient the config leaves out is 0.
    """
    coef = np.zeros((len(targets), len(backup)))
    column = {b: j for j, b in enumerate(backup)}
    for i, target in enumerate(targets):
        given = section[target]["coefficients"]
        if list(given) == list(backup):  # as exported: every backup sensor, in order
            coef[i] = list(given.values())
        else:
            for b, c in given.items():
                coef[i, column[b]] = c
    intercept = np.array([section[t]["intercept"] for t in targets], dtype=float)
    variance = np.array([section[t]["conditional_variance"] for t in targets], dtype=float)
    return intercept, coef, variance
