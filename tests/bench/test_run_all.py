"""`./dev bench` writes the table of docs/performance.md from the benches' BENCH lines: the runner
reads them among a bench's other output, renders them, writes them between the markers and
nowhere else; and every bench takes --quick, the size CI runs. No bench runs here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench import report, run_all

OUTPUT = """migrating bench_runtime …
loop overhead per step     4.560 ms = 16.9x pgbench -N (goal: 3x)
BENCH {"bench": "bench_runtime", "figure": "overhead per step", "value": 4.56, "unit": "ms", \
"baseline": "pgbench -N per transaction", "baseline_value": 0.27, "ratio": 16.9, \
"goal": "<= 3x", "met": false}
  a line that mentions BENCH {"not": "a figure"} in passing
BENCH {"bench": "bench_runtime", "figure": "SQL statements per step", "value": 4, "unit": "", \
"baseline": null, "baseline_value": null, "ratio": null, "goal": null, "met": null}
BENCH {"bench": "bench_dashboard", "figure": "budget: p95", "value": 1234.5, "unit": "ms", \
"baseline": "a light owner's", "baseline_value": 1029.1, "ratio": 1.2, \
"goal": "<= 1.5x", "met": true}
"""


def test_the_runner_reads_the_bench_lines_among_a_benchs_output():
    figures = report.parse(OUTPUT)
    assert [f["figure"] for f in figures] == ["overhead per step", "SQL statements per step", "budget: p95"]
    assert figures[0] == {
        "bench": "bench_runtime",
        "figure": "overhead per step",
        "value": 4.56,
        "unit": "ms",
        "baseline": "pgbench -N per transaction",
        "baseline_value": 0.27,
        "ratio": 16.9,
        "goal": "<= 3x",
        "met": False,
    }


def test_a_bench_line_with_fields_missing_is_an_error_not_a_figure_dropped():
    with pytest.raises(ValueError, match="exactly the fields"):
        report.parse('BENCH {"bench": "bench_x", "figure": "f", "value": 1}')


def test_a_bench_prints_the_exact_line_the_runner_reads(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tests/bench/bench_runtime.py"])
    printed = report.line(
        "overhead per step", 4.5612, "ms", baseline="pgbench -N per transaction", baseline_value=0.2703
    )
    assert printed.startswith("BENCH {") and "\n" not in printed
    assert json.loads(printed.removeprefix("BENCH ")) == {
        "bench": "bench_runtime",
        "figure": "overhead per step",
        "value": 4.56,
        "unit": "ms",
        "baseline": "pgbench -N per transaction",
        "baseline_value": 0.27,
        "ratio": 16.87,
        "goal": None,
        "met": None,
    }
    assert report.parse(printed)[0]["ratio"] == 16.87


def test_the_table_has_a_row_per_figure_its_baseline_ratio_and_whether_the_goal_was_met():
    table = run_all.render(report.parse(OUTPUT))
    rows = table.splitlines()
    assert rows[0] == "| bench | figure | value | baseline | ratio | goal | met |"
    assert (
        "| `bench_runtime` | overhead per step | 4.56 ms | pgbench -N per transaction: 0.27 ms | 16.9x "
        "| <= 3x | **no** |"
    ) in rows
    assert "|  | SQL statements per step | 4 |  |  |  |  |" in rows  # same bench: its name once
    assert (
        "| `bench_dashboard` | budget: p95 | 1,234 ms | a light owner's: 1,029 ms | 1.20x | <= 1.5x | yes |"
        in rows
    )
    assert rows[-1] == (
        "3 figures from 2 benches; 1 of 2 goals met: not met: bench_runtime overhead per step."
    )


def test_the_table_goes_between_the_markers_and_the_prose_around_it_stays(tmp_path: Path):
    document = tmp_path / "performance.md"
    document.write_text(
        "# Performance\n\nWhat each bench measures.\n\n<!-- bench:begin -->\nold figures\n"
        "<!-- bench:end -->\n\nWhat bounds the goals not met.\n"
    )
    run_all.write_docs("Generated from commit abc1234.\n\n| a | b |", document)
    assert document.read_text() == (
        "# Performance\n\nWhat each bench measures.\n\n<!-- bench:begin -->\nGenerated from commit "
        "abc1234.\n\n| a | b |\n<!-- bench:end -->\n\nWhat bounds the goals not met.\n"
    )


def test_the_performance_page_has_the_markers_and_no_figure_written_by_hand_outside_them():
    text = run_all.DOC.read_text()
    assert text.count(run_all.BEGIN) == 1 and text.count(run_all.END) == 1
    outside = text.split(run_all.BEGIN)[0] + text.split(run_all.END)[1]
    assert not [line for line in outside.splitlines() if line.startswith("|")]  # no table by hand
    assert not re.findall(r"\b\d+\.\d+ ?(?:ms|s|µs|MB)\b|\d+(?:\.\d+)?x (?:lower|slower|faster)", outside)


def test_every_bench_takes_quick():
    benches = run_all.benches()
    assert len(benches) >= 9
    helps = {
        path.stem: subprocess.Popen(
            [sys.executable, str(path), "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for path in benches
    }
    for name, process in helps.items():
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0 and "--quick" in out, (name, out[-2000:])


def test_a_bench_that_crashes_is_named_and_the_others_still_count(tmp_path: Path, capsys):
    fine = tmp_path / "bench_fine.py"
    fine.write_text(
        f"print('working …')\nprint({report.line('a figure', 2.5, 'ms', bench='bench_fine')!r})\n"
    )
    broken = tmp_path / "bench_broken.py"
    broken.write_text("print('seeding …')\nraise SystemExit('the schema moved on')\n")
    silent = tmp_path / "bench_silent.py"
    silent.write_text("print('measured, but said nothing')\n")
    slow = tmp_path / "bench_slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    figures, crashed = run_all.run_benches(
        [fine, broken, silent, slow], quick=True, url="", verbose=False, timeout=2, logs=tmp_path / "logs"
    )
    assert [f["figure"] for f in figures] == ["a figure"]
    assert crashed[:2] == ["bench_broken (exit 1)", "bench_silent (no BENCH line)"]
    assert crashed[2].startswith("bench_slow (exit ")
    shown = capsys.readouterr().out
    assert "[2/4] bench_broken CRASHED (exit 1)" in shown and "the schema moved on" in shown
    assert "[1/4] bench_fine: 1 figure in" in shown
    assert (tmp_path / "logs" / "bench_broken.log").read_text().startswith("seeding …")
