"""Plain sentences from a ``CostReport``: where Lacuna pays, where it does not, the break-even."""

from __future__ import annotations

import math

from engine.costs.model import CostReport

__all__ = ["where_it_pays"]


def _money(x: float) -> str:
    if abs(x) < 0.01:
        return "under $0.01" if x >= 0 else "-(under $0.01)"
    return f"${x:,.2f}" if x >= 0 else f"-${-x:,.2f}"


def _rate(x: float) -> str:
    """Readings a second, never shown as 0 when there are some: two significant digits
    below 10 (24 hourly sensors: 0.0067)."""
    if x >= 10 or x <= 0:
        return f"{x:,.0f}"
    return f"{x:.{max(0, 1 - math.floor(math.log10(x)))}f}"


def _sensors(x: float) -> str:
    if math.isinf(x):
        return "no fleet size"
    return f"{math.ceil(x):,} sensors per site" if x >= 1 else "any number of sensors"


def where_it_pays(report: CostReport, contract: str = "range") -> list[str]:
    """Three or four sentences: the saving and what it is made of, the break-even, what
    does not change (requests), and the rule of thumb (rate, size, replication)."""
    inputs, full = report.inputs, report.full
    fleet, store = inputs.fleet, inputs.store
    mine = report.contracts[contract]
    saving = report.saving(contract)
    lines = {k: full.lines()[k] - v for k, v in mine.lines().items()}
    biggest = max(lines, key=lambda k: lines[k])
    pays = saving > 0
    out = [
        f"{contract.capitalize()} contract, {fleet.sensors:,} sensors every "
        f"{fleet.interval_s:g} s ({_rate(fleet.readings_per_second)} readings/s): "
        + (
            f"saves {_money(saving)} a month of full backup's {_money(full.total)} "
            f"(most from {biggest}: {_money(lines[biggest])})."
            if pays
            else f"does not pay: it costs {_money(-saving)} a month more than full backup's "
            f"{_money(full.total)} (its shadow check and re-plans outweigh what it saves)."
        )
    ]
    even = report.break_even[contract]
    if math.isinf(even.readings_per_second):
        out.append(
            "Break-even: never at these prices: each reading left out saves less than "
            "Lacuna's own work on it."
        )
    else:
        out.append(
            f"Break-even: {_sensors(even.sensors_per_site)} at this interval "
            f"({_rate(even.readings_per_second)} readings/s over {fleet.sites:,} site(s)); "
            "below it the shadow check and a re-plan per site and horizon cost more than "
            "the backup saved."
        )
    most = inputs.contracts.most_rows(contract)
    if mine.requests > full.requests and most is not None:
        out.append(
            f"Requests cost more ({_money(mine.requests)} a month against "
            f"{_money(full.requests)}): a crash-contract micro-batch may hold at most "
            f"{most:,} row(s), so it is priced with a trigger of at most "
            f"{most * fleet.interval_s:g} s (the job backs up every sensor for a bigger "
            "batch), one file per micro-batch and partition."
        )
    elif mine.fraction == 0.0 and full.requests > 0:  # no sensor backed up: no file written
        out.append(
            f"Requests: none ({_money(full.requests)} a month for full backup): it backs up "
            "no sensor, so it writes no file."
        )
    elif full.requests > 0:
        out.append(
            f"Requests cost the same either way ({_money(full.requests)} a month): one file "
            "per micro-batch and partition, however few readings are in it."
        )
    out.append(
        "Lacuna pays with high-rate sensors and many of them (every saving grows with "
        f"readings per second) and on replicated stores (x{store.replication} here: storage "
        "and write bandwidth grow with the copies)"
        + ("." if pays else "; with a few slow sensors the saving is cents.")
    )
    return out
