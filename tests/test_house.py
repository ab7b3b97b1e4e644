"""The design lives in the repository: every reference in code and templates names a file of docs/ (and a
heading that exists), never a document outside the repository; and the ledger and the spend rollups are
written by the accounting app alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("accounting", "runs", "schedules", "config", "templates", "tests")
# docs/contract.md#a-heading, with more anchors of the same file after ", #" or " and #".
CONTRACT_REF = re.compile(r"docs/contract\.md((?:#[a-z0-9-]+)(?:(?:, | and )#[a-z0-9-]+)*)?")
DECISION_REF = re.compile(r"docs/decisions/(\d{4})(-[a-z0-9-]+\.md)?(#[a-z0-9-]+)?")
OUTSIDE = re.compile(r"SPEC §|SPEC\.md|ADR-0\d|STYLE §")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text)


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def source_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", *APPS], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if name.endswith((".py", ".html", ".js", ".css"))
        and (ROOT / name).exists()
        and "/migrations/" not in name
        and not name.startswith("tests/test_house.py")
    ]


def broken_references(text: str) -> list[str]:
    contract = anchors(ROOT / "docs" / "contract.md")
    broken = []
    for match in CONTRACT_REF.finditer(text):
        for anchor in re.findall(r"#([a-z0-9-]+)", match[1] or ""):
            if anchor not in contract:
                broken.append(f"docs/contract.md#{anchor}")
    for match in DECISION_REF.finditer(text):
        found = sorted((ROOT / "docs" / "decisions").glob(f"{match[1]}-*.md"))
        wrong_name = len(found) != 1 or (match[2] and found[0].name != match[1] + match[2])
        if wrong_name or (match[3] and match[3][1:] not in anchors(found[0])):
            broken.append(match[0])
    return broken


def test_every_design_reference_in_code_and_templates_resolves_in_the_repository():
    problems = []
    for path in source_files():
        text = path.read_text()
        problems += [f"{path.relative_to(ROOT)}: {ref}" for ref in broken_references(text)]
        problems += [
            f"{path.relative_to(ROOT)}: outside the repository: {m[0]}" for m in OUTSIDE.finditer(text)
        ]
    assert problems == []


def test_the_readme_and_docs_link_only_to_files_that_exist():
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", doc.read_text()):
            path, anchor = target
            if path.startswith(("http://", "https://", "mailto:")):
                continue
            resolved = (doc.parent / path).resolve()
            if not resolved.exists():
                problems.append(f"{doc.relative_to(ROOT)} -> {path}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{doc.relative_to(ROOT)} -> {path}#{anchor}")
    assert problems == []


@pytest.mark.parametrize(
    ("text", "broken"),
    [
        ("see docs/contract.md#no-such-heading", ["docs/contract.md#no-such-heading"]),
        ("docs/contract.md#schedules and #nowhere", ["docs/contract.md#nowhere"]),
        ("docs/decisions/0099, point 1", ["docs/decisions/0099"]),
        ("docs/decisions/0002-a-wrong-name.md", ["docs/decisions/0002-a-wrong-name.md"]),
        ("docs/contract.md#schedules, docs/decisions/0002", []),
    ],
)
def test_the_check_catches_a_broken_reference(text, broken):
    assert broken_references(text) == broken


# The ledger's and the rollups' tables, and the models' write methods: only accounting/ uses them.
LEDGER_WRITES = re.compile(
    r"(LedgerEntry|SpendRollup)\s*\(|(LedgerEntry|SpendRollup)\.objects\.(create|bulk_create|update|"
    r"delete|get_or_create|update_or_create)|INSERT INTO\s+\"?accounting_(ledgerentry|spendrollup)|"
    r"UPDATE\s+\"?accounting_(ledgerentry|spendrollup)"
)


def test_only_the_accounting_app_writes_ledger_entries_or_rollups():
    writers = []
    for app in ("runs", "schedules", "config"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if LEDGER_WRITES.search(line):
                    writers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert writers == []


def test_the_ledger_check_catches_a_write_outside_accounting():
    assert LEDGER_WRITES.search("LedgerEntry.objects.create(run_id=1, cost=0)")
    assert LEDGER_WRITES.search('cursor.execute("INSERT INTO accounting_ledgerentry VALUES (...)")')
    assert LEDGER_WRITES.search("UPDATE accounting_spendrollup SET amount = amount + 1")
    assert not LEDGER_WRITES.search("LedgerEntry.objects.filter(run_id=1)")


# A path in backticks, as the code map writes one: `runs/watch.py`, `schedules/notices/`.
MAP_PATH = re.compile(r"`((?:accounting|runs|schedules|config|templates|tests|docs)/[\w./-]*)`")


def test_every_path_the_code_map_names_exists():
    # The README's map and docs/architecture.md are how a newcomer finds a module: a moved or
    # renamed file must take its name there with it.
    named = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        named += [(doc.name, path) for path in MAP_PATH.findall(doc.read_text())]
    assert len(named) > 20  # the map is there to be checked
    missing = [f"{doc}: {path}" for doc, path in named if not (ROOT / path.rstrip("/")).exists()]
    assert missing == []
