"""Numbers for people: SI prefixes, percentages, plurals and ranges (no Streamlit).

Tables and metrics use these instead of ``%g`` or ``%.2e``, so an operator
never reads "8.03e-11" or "$0.00000265".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.data.units import eps_summary
from engine.planning import PlanParameters
from engine.planning.verdict import pct  # also ui's short name for format_percent

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_quantity(x: float | int | None, unit: str = "", digits: int = 3) -> str:
    """``x`` with an SI prefix and ``digits`` significant digits: 1234567 B -> "1.23 MB".

    Values below 1 keep positional notation down to 0.001 (``0.0123``); smaller
    ones are written as "< 0.001". None or NaN is "n/a".
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    sep = " " if unit else ""
    if x == 0:
        return f"0{sep}{unit}"
    sign, a = ("-" if x < 0 else ""), abs(float(x))
    for size, prefix in _PREFIXES:
        if a >= size:
            return f"{sign}{_sig(a / size, digits)} {prefix}{unit}".rstrip()
    if a < 0.001:
        return f"{sign}< 0.001{sep}{unit}"
    return f"{sign}{_sig(a, digits)}{sep}{unit}"


def _sig(a: float, digits: int) -> str:
    """Positional, ``digits`` significant digits, trailing zeros dropped (999.96 -> "1000")."""
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    text = f"{a:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_percent(p: float | None, digits: int = 1) -> str:
    """A probability as a percentage, never rounded onto 0 % or 100 % when it is neither:
    0.0425 -> "4.3 %", 0.0003 -> "< 0.1 %" (``engine.planning.verdict.pct``)."""
    return pct(p, digits)


def format_money(x: float) -> str:
    """Dollars: "$1,234.50", "$0.42", "-$3.10", "< $0.01" for amounts below a cent."""
    if x == 0:
        return "$0.00"
    if 0 < abs(x) < 0.01:
        return "< $0.01" if x > 0 else "> -$0.01"
    return f"${x:,.2f}" if x > 0 else f"-${-x:,.2f}"


def eps_text(sensors: Sequence[str], params: PlanParameters) -> str:
    """The tolerance in force: ``eps 0.5``, or with one eps per unit group
    ``eps degC 1, % 5, Wh 80`` (never the unused single eps)."""
    if not params.eps_by_sensor:
        return f"eps {params.eps:g}"
    given = dict(params.eps_by_sensor)
    return eps_summary(sensors, [given.get(s, params.eps) for s in sensors], params.units)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``3 windows``, ``1 window`` (``many`` for irregular plurals)."""
    return f"{n:,} {noun if n == 1 else (many or noun + 's')}"


def span(first: int, last: int, noun: str = "reading") -> str:
    """An inclusive range of numbered things: "none", "reading 7", "readings 7..9"."""
    if last < first:
        return f"no {noun}s"
    if last == first:
        return f"{noun} {first:,}"
    return f"{noun}s {first:,}..{last:,} ({last - first + 1:,})"


# What a run that does not use the approx plan gets from a failure; its shadow check
# still measures the approx plan (what a re-plan or a switch to approx would use).
NOT_THIS_RUN = {
    "none": "a failure loses every window open at it and nothing rebuilds them; the shadow "
    "check measures the approx plan, which this run does not use",
    "full": "a recovery reads every reading back, exact; the shadow check measures the "
    "approx plan, which this run does not use",
}


def shadow_counted(misses: float, windows: int, contract: str) -> str:
    """What a sensor's shadow misses count, in the contract's terms: whole windows that
    missed (range), or the share of the m-row failures touching its windows that missed
    (crash; a window counts the fraction of its failure positions)."""
    if contract == "crash":
        share = pct(misses / windows if windows else 0.0)  # never "0.0 %" for a few misses
        return f"{share} of the failures touching its {windows:,} shadow windows"
    return f"{round(misses):,} of {windows:,} shadow windows"


def shorten(text: str, most: int = 500) -> str:
    """``text`` cut in the middle to at most ``most`` characters: an error quoting a
    3,000-character column name keeps its start (what is wrong) and end (what to do)."""
    if len(text) <= most:
        return text
    keep = most - 5
    return f"{text[: keep * 3 // 5]} ... {text[len(text) - keep * 2 // 5 :]}"
