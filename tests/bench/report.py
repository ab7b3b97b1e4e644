"""The one machine-readable line a bench prints per figure, next to its human-readable output:

    BENCH {"bench": "bench_runtime", "figure": "overhead per step", "value": 4.56, "unit": "ms",
           "baseline": "pgbench -N per transaction", "baseline_value": 0.27, "ratio": 16.9,
           "goal": "<= 3x", "met": false}

(on one line: JSON after "BENCH "). `tests/bench/run_all.py` collects these lines from every bench
and writes the table of docs/performance.md from them, so no figure there is written by hand.
A figure without a baseline or a goal has null in those fields. A goal not met is a figure like any
other: the bench still ends normally (people read ratios; nothing asserts a timing).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

PREFIX = "BENCH "
FIELDS = ("bench", "figure", "value", "unit", "baseline", "baseline_value", "ratio", "goal", "met")


def _round(value: float | None) -> float | None:
    """Three significant figures at least, two decimals at least: what a reader can use."""
    if value is None:
        return None
    if isinstance(value, bool) or not math.isfinite(float(value)):
        raise ValueError(f"not a figure: {value!r}")
    if isinstance(value, int):
        return value
    magnitude = abs(float(value))
    places = 2
    if 0 < magnitude < 1:
        places = max(2, 2 - math.floor(math.log10(magnitude)))
    return round(float(value), places)


def line(
    figure: str,
    value: float,
    unit: str,
    *,
    baseline: str | None = None,
    baseline_value: float | None = None,
    ratio: float | None = None,
    goal: str | None = None,
    met: bool | None = None,
    bench: str | None = None,
) -> str:
    """The BENCH line of one figure. The bench is the running script's name unless given; the
    ratio is value / baseline_value unless given (pass it when the goal reads the other way)."""
    if ratio is None and baseline_value:
        ratio = value / baseline_value
    record = {
        "bench": bench or Path(sys.argv[0]).stem,
        "figure": figure,
        "value": _round(value),
        "unit": unit,
        "baseline": baseline,
        "baseline_value": _round(baseline_value),
        "ratio": _round(ratio),
        "goal": goal,
        "met": met,
    }
    return PREFIX + json.dumps(record, ensure_ascii=False)


def figure(figure: str, value: float, unit: str, **fields: Any) -> None:
    """Print the BENCH line of one figure (see `line`)."""
    print(line(figure, value, unit, **fields), flush=True)


def parse(output: str) -> list[dict[str, Any]]:
    """The figures among a bench's output lines; a malformed BENCH line is an error, not skipped."""
    found = []
    for text in output.splitlines():
        if not text.startswith(PREFIX):
            continue
        record = json.loads(text[len(PREFIX) :])
        if not isinstance(record, dict) or set(record) != set(FIELDS):
            raise ValueError(f"a BENCH line needs exactly the fields {', '.join(FIELDS)}: {text}")
        found.append(record)
    return found


def parse_args(parser: argparse.ArgumentParser, *, quick: dict[str, Any]) -> argparse.Namespace:
    """The bench's arguments, with `--quick`: each option in `quick` left at its default takes the
    small value given there instead, a size that still runs every path of the bench in seconds
    (`./dev bench --quick`, and CI). Quick figures are not figures to publish."""
    sizes = ", ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in quick.items())
    parser.add_argument(
        "--quick", action="store_true", help=f"a small size that still exercises the code ({sizes})"
    )
    args = parser.parse_args()
    if args.quick:
        for dest, value in quick.items():
            if getattr(args, dest) == parser.get_default(dest):
                setattr(args, dest, value)
    return args
