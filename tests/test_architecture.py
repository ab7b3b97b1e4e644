"""The house plan, enforced: imports point one way, and the domain never imports a surface.

    accounting  <-  runs  <-  schedules          (a lower app never imports a higher one)
    domain (models, services, selectors, ...)  <-  surfaces (views, API, admin, template tags,
                                                    forms, urls, tasks, commands)

Every `import` in the apps' source is read with `ast`, including those inside functions, so a
lazy import cannot hide an upward dependency. Migrations are generated and exempt.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"accounting": 0, "runs": 1, "schedules": 2}
# Utilities of config/ that any app may use; config.settings and config.urls sit above everything.
BASE_MODULES = {"config.env", "config.http"}
# Settings are parsed with the consumer's parsers (parse once): pure modules, no Django models.
PARSERS = ("accounting.money", "accounting.timezones")
SURFACE_PARTS = {"views", "api", "admin", "templatetags", "forms", "urls", "tasks", "management"}
SURFACE_MODULES = {"context_processors", "apps"}
# django_q is a worker behind two doors.
QUEUE_MODULES = {"schedules.tasks", "runs.tasks"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    files = []
    for app in (*LAYERS, "config"):
        files += [p for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts]
    return sorted(files)


def imports_of(path: Path) -> list[Import]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return imports_in(path.read_text(), module, package)


def imports_in(source: str, module: str, package: str) -> list[Import]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found += [
                Import(module, f"{base}.{alias.name}" if base else alias.name, node.lineno)
                for alias in node.names
            ]
    return found


def app_of(module: str) -> str:
    return module.split(".")[0]


def is_surface(module: str) -> bool:
    parts = module.split(".")
    return bool(SURFACE_PARTS & set(parts[1:])) or parts[-1] in SURFACE_MODULES


def violations(all_imports: list[Import]) -> list[str]:
    problems = []
    for imp in all_imports:
        source_app, target_app = app_of(imp.module), app_of(imp.target)
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        if target_app == "django_q" and imp.module not in QUEUE_MODULES:
            problems.append(f"{where}: only {', '.join(sorted(QUEUE_MODULES))} import django_q")
        if source_app == "config":
            if imp.module in BASE_MODULES and target_app in LAYERS and not imp.target.startswith(PARSERS):
                problems.append(f"{where}: config's utilities sit below every app")
            continue
        if target_app == "config" and not any(imp.target.startswith(m) for m in BASE_MODULES):
            problems.append(f"{where}: an app may use config.env and config.http only")
        if target_app not in LAYERS or source_app not in LAYERS:
            continue
        if LAYERS[target_app] > LAYERS[source_app]:
            problems.append(
                f"{where}: {source_app} sits below {target_app} (accounting <- runs <- schedules)"
            )
        if not is_surface(imp.module) and is_surface(imp.target):
            problems.append(f"{where}: the domain never imports a surface (views, API, admin, tasks, ...)")
    return problems


def all_project_imports() -> list[Import]:
    return [imp for path in source_files() for imp in imports_of(path)]


def test_imports_point_one_way_and_the_domain_never_imports_a_surface():
    assert violations(all_project_imports()) == []


def import_graph(all_imports: list[Import], modules: set[str]) -> dict[str, set[str]]:
    """Which of our modules each module imports, at module level or inside a function (a late
    import is a cycle with its seatbelt on). Importing `a.b.c` runs `a.b`'s __init__ too, so the
    packages above a target count, except the importer's own (Python is already inside those)."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for imp in all_imports:
        target = imp.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target or target == imp.module:
            continue
        graph[imp.module].add(target)
        package = target.rpartition(".")[0]
        while package:
            if package in modules and not imp.module.startswith(package + "."):
                graph[imp.module].add(package)
            package = package.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other_even_inside_a_function():
    modules = {module_name(path) for path in source_files()}
    assert cycles(import_graph(all_project_imports(), modules)) == []


def test_the_cycle_check_catches_a_late_import_back():
    modules = {"accounting.ledger", "accounting.alerts", "accounting.models"}
    imports = [
        Import("accounting.alerts", "accounting.ledger.summarize", 1),
        Import("accounting.ledger", "accounting.alerts", 200),  # inside a function
        Import("accounting.ledger", "accounting.models.LedgerEntry", 3),
    ]
    assert cycles(import_graph(imports, modules)) == [["accounting.alerts", "accounting.ledger"]]


@pytest.mark.parametrize(
    ("module", "target", "problem"),
    [
        ("accounting.ledger", "runs.models", "accounting sits below runs"),
        ("runs.runtime", "schedules.services", "runs sits below schedules"),
        ("schedules.services", "schedules.tasks", "the domain never imports a surface"),
        (
            "schedules.words",
            "schedules.templatetags.dashboard",
            "the domain never imports a surface",
        ),
        ("schedules.execution", "django_q.tasks", "only runs.tasks, schedules.tasks import django_q"),
        ("runs.services", "config.settings", "an app may use config.env and config.http only"),
    ],
)
def test_the_check_catches_each_kind_of_wrong_import(module, target, problem):
    (found,) = violations([Import(module, target, 1)])
    assert problem in found


def test_surfaces_may_use_the_domain_and_lower_apps():
    allowed = [
        Import("schedules.views.budget", "accounting.selectors", 1),
        Import("schedules.admin", "runs.admin", 1),
        Import("runs.admin", "accounting.admin", 1),
        Import("schedules.api.routes", "schedules.services", 1),
        Import("schedules.tasks", "django_q.tasks", 1),
    ]
    assert violations(allowed) == []


def test_a_lazy_or_relative_import_inside_a_function_is_seen():
    body = "def later():\n    from schedules.tasks import tick\n    from ..schedules import services\n"
    found = violations(imports_in(body, "runs.runtime", "runs"))
    assert sum("runs sits below schedules" in problem for problem in found) >= 2


def test_the_admin_and_the_api_never_read_hx_request():
    """HTMX is the dashboard's: an admin page or an API route answers an HTMX request exactly as
    any other (which is why the crawler sends HX-Request to dashboard URLs only)."""
    readers = []
    for path in source_files():
        module = module_name(path)
        if ".admin" in f".{module}" or ".api" in f".{module}" or module.endswith("admin"):
            text = path.read_text()
            if "htmx" in text.lower() or "hx-request" in text.lower():
                readers.append(module)
    assert readers == []
