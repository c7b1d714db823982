"""The wire in one room (rl_insight/wire/): no name that client and server share is
spelled as a literal anywhere else in rl_insight/, so a route and its callers, a span's
writer and its reader, cannot drift apart. The values scanned for are read from the wire
modules themselves: a name added there is scanned for from then on. Tests, dashboards and
docs may spell them (they check the contract from outside); docstrings are prose."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Mapping

import rl_insight.wire
from tests.conftest import REPO

PACKAGE = REPO / "rl_insight"
WIRE = PACKAGE / "wire"

# where a value is not our wire name but another program's that spells it alike, with why
ELSEWHERE = {
    # Prometheus' own alerts API, which the server reads (our route copies its path)
    ("rl_insight/server/analyses/promapi.py", "/api/v1/alerts"),
}


def _strings_of(value: object) -> list[str]:
    items = value if isinstance(value, (tuple, frozenset)) else (value,)
    return [v for v in items if isinstance(v, str) and v]


def wire_values() -> dict[str, str]:
    """Every string constant of every wire module (UPPER_CASE, at module level, a tuple's
    strings too), but the everyday words the modules list in ``EVERYDAY`` (left out
    wherever they appear, a module that imports one too): value -> the constant."""
    found = [importlib.import_module(f"rl_insight.wire.{info.name}")
             for info in pkgutil.iter_modules(rl_insight.wire.__path__)]
    everyday: set[str] = set()
    for module in found:
        names = getattr(module, "EVERYDAY", frozenset())
        unknown = set(names) - set(vars(module))
        assert not unknown, f"{module.__name__}.EVERYDAY names no constant: {sorted(unknown)}"
        everyday.update(v for n in names for v in _strings_of(getattr(module, n)))
    values: dict[str, str] = {}
    for module in found:
        for name, value in vars(module).items():
            if name.isupper() and not name.startswith("_") and name != "EVERYDAY":
                for v in _strings_of(value):
                    if v not in everyday:
                        values.setdefault(v, f"{module.__name__}.{name}")
    return values


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of string statements (docstrings, and strings standing as comments)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every str and bytes constant, f-strings' literal parts included."""
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in prose:
            if isinstance(node.value, str):
                yield node.lineno, node.value
            elif isinstance(node.value, bytes):
                yield node.lineno, node.value.decode("latin-1")


def spells(text: str, value: str) -> bool:
    """Whether a literal spells a wire value: the value itself; a header in any case; a
    path with more after it (``/api/v1/profiles/{pid}``, ``/metrics/job/...``)."""
    if text == value:
        return True
    if value[:2] in ("X-", "x-"):
        return text.lower() == value.lower()
    return value.startswith("/") and text.startswith(value) and \
        text[len(value):len(value) + 1] in ("/", "?", "{")


def stray(source: str, values: Mapping[str, str]) -> list[tuple[int, str, str]]:
    """(line, literal, the wire constant it spells) of every literal in ``source`` that
    spells one of ``values``."""
    found = []
    special = [v for v in values if v[:1] == "/" or v[:2] in ("X-", "x-")]
    for line, text in _strings(ast.parse(source)):
        if text in values:
            found.append((line, text, values[text]))
        elif text[:1] in ("/", "X", "x"):  # a path with more after it, a header's case
            hits = [value for value in special if spells(text, value)]
            if hits:
                found.append((line, text, values[max(hits, key=len)]))
    return found


def modules() -> Iterable[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if WIRE not in path.parents:
            yield str(path.relative_to(REPO)), path.read_text()


def test_no_wire_name_is_spelled_outside_the_wire():
    values = wire_values()
    found, allowed = [], set()
    for rel, source in modules():
        for line, text, where in stray(source, values):
            if (rel, text) in ELSEWHERE:
                allowed.add((rel, text))
            else:
                found.append(f"{rel}:{line}: {text!r} is {where}")
    assert not found, "spelled outside rl_insight/wire/ (import the constant):\n" + \
        "\n".join(found)
    assert allowed == ELSEWHERE, f"allowed, no longer there: {ELSEWHERE - allowed}"


def test_every_wire_path_is_served_by_the_server(served):
    """The routes are declared with the wire's paths: each one the clients call is a
    route of the server (its OpenAPI document, or the intake's own ASGI path)."""
    from rl_insight.profiler import readers
    from rl_insight.server.ingest import intake
    from rl_insight.wire import paths

    client, _ = served
    routes = set(client.app.openapi()["paths"]) | {intake.SPANS_ROUTE, intake.PUSH_ROUTE}
    unserved = []
    for name, value in vars(paths).items():
        if not name.isupper() or not isinstance(value, str) or not value.startswith("/"):
            continue
        if value == paths.IMPORT:  # a route per profiler whose reader takes an upload
            names = readers.uploadable()
            ok = bool(names) and all(value.format(profiler=p) in routes for p in names)
        elif value.endswith("/"):  # a prefix: of a route, or of the intake's pushes
            ok = any(r.startswith(value) for r in routes) or value.startswith(paths.PUSH_ROOT)
        else:
            ok = value in routes
        if not ok:
            unserved.append(f"paths.{name} = {value!r}")
    assert not unserved, unserved


def test_the_scan_finds_a_stray_literal_and_leaves_prose_alone():
    """The scan itself: a snippet that spells wire names the ways code does is caught,
    the same names in a docstring or in a longer message are not."""
    values = wire_values()
    assert values["state_lane_id"] == "rl_insight.wire.attributes.LANE_ATTR"
    assert values["/api/v1/prometheus/targets"] == "rl_insight.wire.paths.TARGETS"
    assert values["rank.collectives"] == "rl_insight.wire.rank_evidence.COLLECTIVES"
    assert "step" not in values  # an everyday word (attributes.EVERYDAY)
    snippet = '''
"""A module that names state_lane_id in its docstring."""
LANE = "state_lane_id"
url = f"{base}/api/v1/profiles/{pid}/take"
headers = [(b"x-rl-insight-started", b"1")]
r.post("/api/v1/prometheus/targets", json=body)
def f():
    """POST /api/v1/prometheus/targets registers targets."""
    return {"monitor.trace_segment": "state_interval"}
message = "the state_lane_id attribute names the lane"
'''
    got = sorted((line, text) for line, text, _ in stray(snippet, values))
    assert got == [(3, "state_lane_id"), (4, "/api/v1/profiles/"),
                   (5, "x-rl-insight-started"), (6, "/api/v1/prometheus/targets"),
                   (9, "monitor.trace_segment"), (9, "state_interval")], got


def test_the_wire_imports_nothing_of_the_package_above_it():
    """Both sides import the wire, so it imports neither (nor anything of the package
    beside itself): a name there never drags a client or a server along."""
    outside = []
    for path in sorted(WIRE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            outside += [f"{path.name} imports {n}" for n in names
                        if n.startswith("rl_insight") and not n.startswith("rl_insight.wire")]
    assert not outside, outside
