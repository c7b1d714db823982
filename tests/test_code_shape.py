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
                if ".migrated" in text and ".rename(" in text and path != "rl_insight/files.py"]
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
