"""Can any setting of the method's conservatism reach the honesty targets? The frontier, measured.

    python -m bench.honesty_frontier "base;margin=1.0;nodrift,nopb,margin=1.0" \\
        choose,held-out,fresh,fresh-2,fresh-3 [--logs /tmp/sweep]

A study tool, not product code. The targets: a plan honest on every case of the
honesty benchmark AND a mean savings of at least 40 %. This runs each variant
of ``bench.honesty_variants`` (separated by ``;``, each a comma-separated set of its
options: ``margin=M``, ``nodrift``, ``nopb``, ...) on the cases of the given halves,
each in a fresh subprocess (``python -m bench.honesty_variants VARIANT HALVES --json
...``) so no variant's patch of ``engine.planning`` leaks into the next; variants run
one after another, never in parallel. Per variant it keeps every case's pooled and
worst rebuilt sensor miss rate, verdict and savings (full precision, from the
subprocess's ``--json`` rows), and per half and over all cases the honest count and
mean savings, and merges them into ``bench/results/honesty_frontier.json`` (a
variant run again replaces its entry; others are kept). ``--logs DIR`` keeps each
run's stdout in ``DIR/VARIANT.txt`` and its rows in ``DIR/VARIANT.json``.

Finally it prints, over every variant in the JSON, a table (honest and mean savings
per half and over all cases) and the cases whose verdict differs between variants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "honesty_frontier.json"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Honest count, case count and mean savings of ``rows``."""
    return {
        "honest": sum(bool(r["honest"]) for r in rows),
        "n": len(rows),
        "mean_savings": float(np.mean([r["savings"] for r in rows])) if rows else None,
    }


def run_variant(variant: str, halves: str, logs: Path) -> dict[str, Any]:
    """One variant in a fresh ``bench.honesty_variants`` subprocess; its entry for the JSON."""
    rows_path = logs / f"{variant}.json"
    cmd = [sys.executable, "-m", "bench.honesty_variants", variant, halves]
    cmd += ["--json", str(rows_path)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    (logs / f"{variant}.txt").write_text(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{variant}: exited {done.returncode}\n{done.stderr}")
    rows = json.loads(rows_path.read_text())["cases"]
    cases = {
        r["case"]: {
            "half": r["half"],
            "pooled": r["pooled_rate"],
            "worst": r["worst_rate"],
            "worst_sensor": r["worst_sensor"],
            "worst_p_value": r["worst_p_value"],
            "honest": r["honest"],
            "savings": r["savings"],
        }
        for r in rows
    }
    order = list(dict.fromkeys(r["half"] for r in rows))
    by_half = {h: summarise([r for r in rows if r["half"] == h]) for h in order}
    return {
        "command": f"python -m bench.honesty_variants {variant} {halves}",
        "seconds": round(seconds, 1),
        "cases": cases,
        "halves": by_half,
        "all": summarise(rows),
    }


def report(results: dict[str, Any]) -> None:
    """A markdown table of every variant, then the cases whose verdict differs."""
    halves = list(dict.fromkeys(h for v in results.values() for h in v["halves"]))
    print("| variant | " + " | ".join(halves) + " | all: honest, mean savings |")
    print("|---" * (len(halves) + 2) + "|")
    for name, v in results.items():
        cells = [
            f"{v['halves'][h]['honest']}/{v['halves'][h]['n']}, "
            f"{100 * v['halves'][h]['mean_savings']:.1f} %"
            if h in v["halves"]
            else ""
            for h in halves
        ]
        a = v["all"]
        print(f"| {name} | " + " | ".join(cells) + f" | {a['honest']}/{a['n']}, "
              f"{100 * a['mean_savings']:.1f} % |")  # fmt: skip
    names = list(dict.fromkeys(c for v in results.values() for c in v["cases"]))
    for c in names:
        verdicts = {n: v["cases"][c]["honest"] for n, v in results.items() if c in v["cases"]}
        if len(set(verdicts.values())) > 1:
            bad = ", ".join(n for n, ok in verdicts.items() if not ok)
            print(f"{c}: NOT under {bad}; honest under the others")


def main(argv: list[str]) -> None:
    logs = None
    if "--logs" in argv:
        i = argv.index("--logs")
        logs, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2 :]
    variants, halves = [v for v in argv[0].split(";") if v], argv[1]
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        where = logs or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for variant in variants:  # one at a time: each run takes both cores' worth of minutes
            entry = run_variant(variant, halves, where)
            results[variant] = entry
            OUT.write_text(json.dumps(results, indent=1) + "\n")
            a = entry["all"]
            print(
                f"{variant}: honest {a['honest']}/{a['n']}, mean savings "
                f"{100 * a['mean_savings']:.1f} %, {entry['seconds']:.0f} s",
                flush=True,
            )
    report(results)


if __name__ == "__main__":
    main(sys.argv[1:])
