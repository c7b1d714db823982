"""Shapes of the code a maintainer trips on, held (issue 44, point 5): one helper for each
thing done in several places, read from the source itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_insight"


def sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE.parent)): p.read_text()
            for p in sorted(PACKAGE.rglob("*.py"))}


def test_old_state_is_moved_aside_by_files_migrated_only():
    """Earlier versions' files and folders go aside as ``*.migrated`` through one helper
    (its log line says what moved where), not a rename of each module's own."""
    renamers = [path for path, text in sources().items()
                if ".migrated" in text and ".rename(" in text
                and path != "rl_insight/common/files.py"]
    assert renamers == []


def test_the_managed_prometheus_url_is_built_in_one_place():
    """endpoints.prometheus_url: the server's analyses, routes and the services that point
    at Prometheus (Grafana's datasource, Tempo's remote write) all take it from there."""
    built = [path for path, text in sources().items()
             if re.search(r"http_url\([^)]*bind_host\(\"prometheus\"\)", text)
             and path != "rl_insight/server/endpoints.py"]
    assert built == []


def test_prometheus_is_read_through_promapi():
    """The server's HTTP calls to Prometheus are promapi's (one place for its errors)."""
    callers = []
    for path, text in sources().items():
        if not path.startswith("rl_insight/server/") or path.endswith("promapi.py"):
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "get" and isinstance(node.func.value, ast.Name) and \
                    node.func.value.id == "requests" and "prometheus_url" in text:
                callers.append(path)
    assert callers == []


def test_no_function_is_over_80_lines():
    """A function a newcomer reads in one screen: cut along what it holds (cli's parser
    per command group, trace_op's span and its wrappers, the targets routes' writes and
    reads, a step's lanes sorted before its row is made)."""
    long = []
    for path, text in sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path}:{node.lineno} {node.name}: {lines} lines")
    assert long == []


def test_the_push_store_holds_groups_and_nothing_else():
    """pushstore.py was 678 lines: the grouping key (routes and intake read it), the text
    parsing and checking, and the exposition are modules of their own."""
    text = sources()["rl_insight/server/ingest/pushstore.py"]
    tree = ast.parse(text)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & {"parse_grouping_key", "check_families", "render_blocks",
                          "split_blocks", "PushError"}
    assert len(text.splitlines()) < 500


def test_the_sender_speaks_http_through_one_library():
    """The collector's requests (pushes, span exports, the server's API) all go through
    connection.py's urllib3 connections: plain, HTTPS and proxied alike."""
    users = [path for path, text in sources().items()
             if path.startswith("rl_insight/collector/") and
             re.search(r"^\s*(import requests|from requests)", text, re.M)]
    assert users == []


def test_no_module_is_over_600_lines():
    """A module holds one job: cli.py (802 lines) is the parser (commands/main.py) with
    its commands in rl_insight/commands/, client/api.py (699) the public calls with their
    arguments and span context apart, config.py (685) a package of the settings and their
    reading, the anatomy's series a module of their own."""
    long = {path: n for path, text in sources().items()
            if (n := len(text.splitlines())) > 600}
    assert long == {}


def _imports(path: str, text: str) -> set[str]:
    """The package's modules a module imports, anywhere in it (a lazy import too)."""
    here = path[:-3].replace("/", ".").removesuffix(".__init__")
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                parent = parts[:len(parts) - node.level + (path.endswith("__init__.py"))]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("rl_insight")}


def test_no_modules_import_each_other_round_a_circle():
    """The import picture has no circle (client/configuration.py -> options.py -> core.py
    -> configuration.py was one): each module stands on the ones below it, lazy imports
    counted."""
    modules = {path[:-3].replace("/", ".").removesuffix(".__init__"): text
               for path, text in sources().items()}
    edges = {m: {t for t in _imports(f"{m.replace('.', '/')}.py", text) if t in modules
                 and t != m and not m.startswith(t + ".")}
             for m, text in modules.items()}
    circles, index, low, stack, on, counter = [], {}, {}, [], set(), [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    assert circles == []
