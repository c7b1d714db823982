"""A checker for the TraceQL the dashboards use, following Tempo's documented syntax
(https://grafana.com/docs/tempo/latest/traceql/construct-traceql-queries/): spanset
filters in braces with scoped attributes (span., resource., event., link.,
instrumentation., or unscoped .name) and intrinsics, comparison operators, && and ||,
spanset operators between filters, and pipeline stages (select, by, coalesce,
aggregates compared to a value). Tempo cannot run here, so this stands in for its
parser on the expressions we ship; it is tested on invalid queries too."""

from __future__ import annotations

import re

INTRINSICS = {"name", "status", "statusMessage", "duration", "kind", "rootName",
              "rootServiceName", "traceDuration", "span:name", "span:status",
              "span:duration", "span:kind", "trace:duration", "trace:rootName",
              "trace:rootService", "event:name", "link:traceID", "instrumentation:name"}
STATUS = {"error", "ok", "unset"}
KINDS = {"unspecified", "internal", "server", "client", "producer", "consumer"}
COMPARE = {"=", "!=", ">", ">=", "<", "<=", "=~", "!~"}
SPANSET_OPS = {"&&", "||", ">", ">>", "<", "<<", "~", "!>", "!>>", "!<", "!<<", "!~"}
AGGREGATES = {"count", "avg", "min", "max", "sum"}

TOKEN = re.compile(r"""\s*(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<duration>\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<attr>(?:span|resource|event|link|instrumentation)?\.[A-Za-z_][\w.\-/]*|
             (?:span|trace|event|link|instrumentation):[A-Za-z]+)
  | (?P<op>!>>|!<<|>>|<<|&&|\|\||=~|!~|!=|>=|<=|!>|!<|=|>|<|~|\||\{|\}|\(|\)|,)
  | (?P<word>[A-Za-z_][\w]*)
)""", re.X)


class TraceQLError(ValueError):
    pass


def tokenize(text: str) -> list[tuple[str, str]]:
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TraceQLError(f"unexpected text at {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens):
        self.t = tokens
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else ("eof", "")

    def take(self, value=None, kind=None):
        tok = self.peek()
        if (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            raise TraceQLError(f"expected {value or kind}, found {tok[1] or 'the end'!r}")
        self.i += 1
        return tok

    def query(self):
        self.spanset_expr()
        while self.peek()[1] == "|":
            self.take("|")
            self.stage()
        if self.peek()[0] != "eof":
            raise TraceQLError(f"unexpected {self.peek()[1]!r}")

    def spanset_expr(self):
        self.spanset_term()
        while self.peek()[1] in SPANSET_OPS:
            self.take()
            self.spanset_term()

    def spanset_term(self):
        if self.peek()[1] == "(":
            self.take("(")
            self.spanset_expr()
            self.take(")")
            return
        self.take("{")
        if self.peek()[1] != "}":
            self.field_expr()
        self.take("}")

    def field_expr(self):
        self.field_term()
        while self.peek()[1] in ("&&", "||"):
            self.take()
            self.field_term()

    def field_term(self):
        if self.peek()[1] == "(":
            self.take("(")
            self.field_expr()
            self.take(")")
            return
        left = self.operand()
        if self.peek()[1] not in COMPARE:
            if left in ("attr", "bool"):  # a bare boolean attribute or literal
                return
            raise TraceQLError(f"expected a comparison after {self.t[self.i - 1][1]!r}")
        self.take()
        right = self.operand()
        if left == right == "attr":
            return
        if "attr" not in (left, right):
            raise TraceQLError("a comparison needs an attribute on one side")

    def operand(self) -> str:
        kind, value = self.peek()
        if kind == "attr":
            self.take()
            return "attr"
        if kind == "word" and value in INTRINSICS:
            self.take()
            return "attr"
        if kind in ("string", "number", "duration"):
            self.take()
            return "static"
        if kind == "word" and value in STATUS | KINDS | {"nil"}:
            self.take()
            return "static"
        if kind == "word" and value in ("true", "false"):
            self.take()
            return "bool"
        raise TraceQLError(f"not an attribute or value: {value!r}")

    def stage(self):
        kind, name = self.take(kind="word")
        if name in ("select", "by", "coalesce"):
            self.take("(")
            if name != "coalesce":
                self.attribute_list()
            self.take(")")
            return
        if name in AGGREGATES:
            self.take("(")
            if name != "count":
                self.attribute_list()
            self.take(")")
            if self.peek()[1] not in COMPARE:
                raise TraceQLError(f"{name}() must be compared to a value")
            self.take()
            self.operand()
            return
        raise TraceQLError(f"unknown pipeline stage {name!r}")

    def attribute_list(self):
        while True:
            if self.operand() != "attr":
                raise TraceQLError("expected an attribute")
            if self.peek()[1] != ",":
                return
            self.take(",")


def check(query: str) -> None:
    """Raise TraceQLError when ``query`` is not TraceQL of the documented form."""
    _Parser(tokenize(query)).query()


def span_filter(query: str):
    """What Tempo's search keeps of one span for the first spanset filter of ``query``:
    conditions joined by ``&&`` and ``||`` (no parentheses: the dashboards use none),
    each an attribute compared with a literal. Typed as Tempo compares: a string literal
    matches only a string attribute, a number only a numeric one (a ``global_steps`` sent
    as "7" does not match ``span.global_steps = 7``); ``=~``/``!~`` match the whole
    value. ``span.`` and ``resource.`` both read the span's merged attributes (the OTLP
    receiver merges them), ``name`` and ``status`` the span itself. Returns
    ``predicate(attributes, span) -> bool``; pipeline stages (select) are ignored."""
    check(query)
    tokens = tokenize(query)
    start = next(i for i, t in enumerate(tokens) if t[1] == "{")
    end = next(i for i in range(start, len(tokens)) if tokens[i][1] == "}")
    inner = tokens[start + 1:end]
    alternatives: list[list[tuple]] = [[]]
    i = 0
    while i < len(inner):
        kind, value = inner[i]
        if value == "||":
            alternatives.append([])
            i += 1
            continue
        if value == "&&":
            i += 1
            continue
        (_, lv), (_, op), (rk, rv) = inner[i], inner[i + 1], inner[i + 2]
        alternatives[-1].append((lv, op, rk, rv))
        i += 3

    def literal(kind: str, value: str):
        if kind == "string":
            return bytes(value[1:-1], "utf-8").decode("unicode_escape")
        if kind == "number":
            return float(value)
        return value  # a status or kind word

    def actual(attr: str, attrs: dict, span):
        if attr == "name":
            return span.name
        if attr == "status":
            return {0: "unset", 1: "ok", 2: "error"}.get(span.status.code, "unset")
        key = attr.split(".", 1)[1] if attr.startswith(("span.", "resource.")) else attr[1:]
        return attrs.get(key)

    def holds(cond, attrs, span) -> bool:
        attr, op, kind, raw = cond
        got, want = actual(attr, attrs, span), literal(kind, raw)
        if got is None:  # Tempo: a span without the attribute matches no comparison
            return False
        if kind == "number":
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                return False
            return {"=": got == want, "!=": got != want, ">": got > want, ">=": got >= want,
                    "<": got < want, "<=": got <= want}.get(op, False)
        if not isinstance(got, str):
            return False
        if op in ("=~", "!~"):
            return bool(re.fullmatch(want, got)) == (op == "=~")
        return {"=": got == want, "!=": got != want}.get(op, False)

    def predicate(attrs: dict, span) -> bool:
        return any(all(holds(c, attrs, span) for c in conds) for conds in alternatives)

    return predicate
