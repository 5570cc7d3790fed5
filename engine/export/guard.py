"""Reading an untrusted backup config without letting it take the machine or lie in numbers.

Limits (each refusal is one ``ConfigError`` line):

- size: at most ``MAX_CONFIG_BYTES`` (64 MiB), checked before reading. A dense
  config for 2,000 sensors is about 40 MiB; the shipped samples' are under 60 KiB.
- nesting: at most ``MAX_DEPTH`` (32) levels of objects and lists. Schema v1
  needs 5; JSON is measured by a bracket scan before parsing and YAML while it
  is composed, so neither parser recurses 100,000 levels deep.
- YAML aliases (``*name``) are refused: a 4.5 KB file of nested aliases
  expands to hundreds of millions of nodes (the "billion laughs"); a config
  never needs them.
- keys: a key given twice in one object is refused (parsers keep the last
  value silently).
- values: only what JSON holds (objects with string keys, lists, strings,
  numbers, booleans, null); every number finite. NaN, Infinity and overflowing
  literals such as ``1e999`` are refused with the key's dotted path, e.g.
  ``reconstruction.s03.coefficients.s01``.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from engine.errors import ConfigError

MAX_CONFIG_BYTES = 64 << 20
MAX_DEPTH = 32
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def read_config_text(path: Path) -> str:
    """The file's text, refusing a directory, a device, a FIFO or a socket (also behind a
    symlink), a missing file, or one over the size limit.

    The file is opened without blocking (a FIFO would wait for a writer forever), checked
    on its open descriptor to be a regular file (so a swap after a check cannot slip a
    device in), and read up to the limit plus one byte: a file that grows past the limit
    while it is read (or a ``/proc`` file whose size says 0) is refused, never read
    without bound.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"config {_shown(path)} is a directory, not a file")
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(
                    f"config {_shown(path)} is not a regular file (a device, FIFO or socket)"
                )
            if info.st_size > MAX_CONFIG_BYTES:
                raise ConfigError(_too_large(path, info.st_size))
            # one byte past the stated size shows a file still growing (read() would
            # allocate its whole argument up front, so not the limit's 64 MiB)
            data = handle.read(info.st_size + 1)
            if len(data) > info.st_size:
                data += handle.read(MAX_CONFIG_BYTES + 1 - len(data))
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(_too_large(path, len(data)))
        return data.decode("utf-8-sig")  # a BOM (Notepad writes one) is no content
    except OSError as err:
        raise ConfigError(f"cannot read config {_shown(path)}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path.name}: config is not UTF-8 text ({err.reason})") from err


def _shown(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 80 else f"{text[:40]}...{text[-40:]}"


def _too_large(path: Path, size: int) -> str:
    return (
        f"{path.name}: config is {size:,} bytes or more, larger than the limit of "
        f"{MAX_CONFIG_BYTES:,}"
    )


def parse_config_text(text: str, name: str, fmt: str) -> Any:
    """Parse JSON (``fmt="json"``) or YAML within the limits; ``ConfigError`` otherwise."""
    try:
        if fmt == "yaml":
            return _load_yaml(text, name)
        depth = _json_depth(text)
        if depth > MAX_DEPTH:
            raise ConfigError(f"{name}: config is nested deeper than {MAX_DEPTH} levels")
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (ValueError, yaml.YAMLError) as err:  # ValueError: JSON syntax, a 5,000-digit int
        first = str(err).splitlines()[0].split("; use sys.set_int_max_str_digits")[0]
        raise ConfigError(f"{name}: not valid {fmt}: {first}") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice would silently keep only its last value."""
    out = dict(pairs)  # in C; the loop below only runs to name a repeated key
    if len(out) == len(pairs):
        return out
    out = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"config key {key!r} appears twice in one object")
        out[key] = value
    return out


def _load_yaml(text: str, name: str) -> Any:
    loader = _GuardedLoader(text)
    try:
        return loader.get_single_data()
    except ConfigError as err:
        raise ConfigError(f"{name}: {err}") from None
    finally:
        loader.dispose()


def _json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings, without parsing (so without recursion)."""
    codes = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    opens = (codes == ord("[")) | (codes == ord("{"))
    closes = (codes == ord("]")) | (codes == ord("}"))
    at = np.flatnonzero((opens | closes) & ~_inside_strings(codes))
    step = opens[at].astype(np.int64) - closes[at]
    return int(np.cumsum(step).max(initial=0))


def _inside_strings(codes: np.ndarray) -> np.ndarray:
    """Mask of the bytes of ``codes`` (UTF-8 JSON) after an odd number of string quotes.

    A quote opens or closes a string unless an odd run of backslashes precedes
    it. Vectorised: the regex pass of ``_json_depth_reference`` took 0.13 s on a
    6.5 MB config. Where the text is not valid JSON the mask may differ from a
    parser's view only after the first error, where ``json.loads`` stops (so
    never recurses) anyway.
    """
    is_quote = (codes == ord('"')).view(np.uint8)
    slashes = np.flatnonzero(codes == ord("\\"))
    if slashes.size:  # on the (few) backslashes only: where each run of them starts
        starts = np.r_[True, np.diff(slashes) != 1]
        run_start = np.maximum.accumulate(np.where(starts, slashes, 0))
        after = slashes[np.r_[starts[1:], True]] + 1  # the byte after each run
        after = after[after < codes.size]
        run = after - run_start[np.searchsorted(slashes, after - 1)]
        escaped = after[(run % 2 == 1) & is_quote[after].astype(bool)]
        is_quote = is_quote.copy()
        is_quote[escaped] = 0  # an escaped quote is string content
    return np.bitwise_xor.accumulate(is_quote).view(bool)


def _json_depth_reference(text: str) -> int:
    """The regex version of ``_json_depth``, kept as the tests' reference."""
    bare = _JSON_STRING.sub('""', text).encode("utf-8")
    codes = np.frombuffer(bare, dtype=np.uint8)
    step = np.zeros(codes.size, dtype=np.int64)
    step[(codes == ord("[")) | (codes == ord("{"))] = 1
    step[(codes == ord("]")) | (codes == ord("}"))] = -1
    return int(np.cumsum(step).max(initial=0))


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and stops composing beyond ``MAX_DEPTH``."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(
                f"config line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) "
                "are not allowed in a config"
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ConfigError(f"config is nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[str] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue  # check_plain_values names a key that is not a string
            if key in seen:
                raise ConfigError(
                    f"config key {key!r} appears twice in one mapping "
                    f"(line {key_node.start_mark.line + 1})"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def check_plain_values(data: Any) -> None:
    """Walk ``data`` without recursion: JSON types only, finite numbers, bounded depth.

    An integer too large for a double (YAML can hold one) is refused like
    ``1e999``: every reader turns it into infinity or an ``OverflowError``.
    """
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        where = ".".join(path) or "top level"
        if len(path) > MAX_DEPTH:
            raise ConfigError(f"config is nested deeper than {MAX_DEPTH} levels (at {where})")
        if isinstance(value, dict):
            if len(path) < MAX_DEPTH and _plain_keys(value) and _plain_leaves(value.values()):
                continue  # nothing below to refuse: skip the per-value walk (150,000 of them)
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(f"config key {key!r} at {where} is not a string")
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            if len(path) < MAX_DEPTH and _plain_leaves(value):
                continue
            stack.extend((item, (*path, str(i))) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config value at {where} is not a finite number, got {value!r}")
        elif isinstance(value, int) and not _fits_a_double(value):
            raise ConfigError(
                f"config value at {where} is not a finite number as a double, got an integer "
                f"of {len(str(abs(value)))} digits"
            )
        elif value is not None and not isinstance(value, str | int | float):
            raise ConfigError(
                f"config value at {where} is a {type(value).__name__}, which JSON cannot hold; "
                "quote it"
            )


_LEAVES = frozenset({str, int, float, bool, type(None)})
_NUMBERS = frozenset({int, float, bool})


def _plain_keys(mapping: dict[Any, Any]) -> bool:
    return set(map(type, mapping)) <= {str}


def _plain_leaves(values: Any) -> bool:
    """Every value a plain JSON scalar the walk would pass (so need not visit one by one).

    Exact types only: a container, an odd type or a subclass sends the caller
    to the per-value walk, which names the offending key.
    """
    kinds = set(map(type, values))
    if not kinds <= _LEAVES:
        return False
    numbers = values if kinds <= _NUMBERS else [v for v in values if type(v) in _NUMBERS]
    try:
        return all(map(math.isfinite, numbers))
    except OverflowError:  # an int too large for a double
        return False


def _fits_a_double(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True
