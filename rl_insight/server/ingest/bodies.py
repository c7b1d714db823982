"""The JSON bodies the server reads, declared once. Each model validates a body and
produces the schema the OpenAPI document shows (``schema_of``), so the two cannot drift.
Each field type carries its validator (the parser whose message says what was wrong) and
its schema (what generators such as schemathesis draw from) side by side; what JSON Schema
cannot say alone (a hardware target names its node, both run fields or neither) is a
model validator beside the schema fragment that says it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, SkipJsonSchema

from rl_insight.server.ingest.grouping import valid_label_name
from rl_insight.server.ingest.targets import (
    HARDWARE_JOBS,
    JOB_RE,
    OWNER_RE,
    RESERVED_LABELS,
    Target,
    TargetError,
    parse_owner,
    validate_hostport,
)
from rl_insight.wire import runconfig as runconfig

# [a-zA-Z_][a-zA-Z0-9_]* not starting with "__", written without a lookahead
LABEL_NAME = r"^(?:[a-zA-Z][a-zA-Z0-9_]*|_[a-zA-Z0-9][a-zA-Z0-9_]*|_)$"
_OCTET = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_IPV6 = r"(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){7}|::1|::)"
# what generators draw targets from: a part of what validate_hostport reads (it takes any
# host name and IPv6 form), written without lookaheads
HOSTPORT = rf"^(?:{_OCTET}(?:\.{_OCTET}){{0,2}}|\[{_IPV6}\]):{_PORT}$"
MAX_BATCH_GROUPS = 10_000


class BodyError(ValueError):
    """A body that does not fit its model; the message names the field. Answered 400."""

    status = 400


def _label_name(reserved: tuple[str, ...], why: str):
    def check(name: str) -> str:
        if not valid_label_name(name):
            raise ValueError(f"invalid label name {name!r} (use [a-zA-Z_][a-zA-Z0-9_]*, "
                             "not starting with __)")
        if name in reserved:
            raise ValueError(f"label {name!r} is reserved; {why}")
        return name
    return check


# a registration's label: any name Prometheus takes but the run's own and the job
LabelName = Annotated[StrictStr, AfterValidator(_label_name(
    RESERVED_LABELS, "set project and experiment_name as fields of the request, job as "
                     "job_name")), WithJsonSchema(
    {"type": "string", "pattern": LABEL_NAME, "not": {"enum": list(RESERVED_LABELS)}})]


def _plain(value: Any) -> str | bool | int | float:
    if not isinstance(value, (str, bool, int, float)):
        raise ValueError(f"a label needs a plain value (text, number or boolean), got "
                         f"{value!r}")
    return value


LabelValue = Annotated[Any, AfterValidator(_plain), WithJsonSchema(
    {"type": ["string", "number", "boolean"]})]
Labels = dict[LabelName, LabelValue]
HostPort = Annotated[StrictStr, AfterValidator(validate_hostport), WithJsonSchema(
    {"type": "string", "pattern": HOSTPORT, "maxLength": 259,
     "description": "host:port (IPv6 in brackets); no scheme, path or credentials"})]
Owner = Annotated[StrictStr, AfterValidator(parse_owner), WithJsonSchema(
    {"type": "string", "pattern": OWNER_RE.pattern,
     "description": "who registered, e.g. 'ray:<session>:<job id>'"})]
NoOwner = Annotated[StrictStr, StringConstraints(max_length=0)]  # "" reads as none
JobName = Annotated[StrictStr, StringConstraints(pattern=JOB_RE.pattern)]
RunName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)]


class _Body(BaseModel):
    """Unknown fields are ignored, as the parsers always did; nothing is coerced."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class TargetItem(_Body):
    target: HostPort
    labels: Labels | None = Field(None, description="this target's own labels")


def _item_kind(value: Any) -> str:
    return "object" if isinstance(value, Mapping) else "host:port"


_TAGS = {"object", "host:port"}
TargetEntry = Annotated[Annotated[HostPort, Tag("host:port")]
                        | Annotated[TargetItem, Tag("object")], Discriminator(_item_kind)]
_NODE = {"type": "object", "required": ["node"], "properties": {"node": {"minLength": 1}}}
_RUN = {"project": {"type": "string", "minLength": 1, "maxLength": 256},
        "experiment_name": {"type": "string", "minLength": 1, "maxLength": 256}}
_NONE = [{"type": "null"}, {"const": ""}]


class Registration(_Body):
    """Scrape targets of one job, for a run or (with ``owner``) for the run its owner names
    later. Also read, for clients of earlier versions: ``targets`` as one string, and
    ``labels`` as a list with one entry (or null) per target."""

    model_config = ConfigDict(json_schema_extra={
        # both run fields or neither (null and "" are neither)
        "allOf": [{"anyOf": [{"required": ["project", "experiment_name"], "properties": _RUN},
                             {"properties": {"project": {"anyOf": _NONE},
                                             "experiment_name": {"anyOf": _NONE}}}]}],
        # a hardware exporter's target names its node (the dashboards join on it)
        "if": {"required": ["job_name"],
               "properties": {"job_name": {"enum": list(HARDWARE_JOBS)}}},
        "then": {"anyOf": [
            {"required": ["labels"], "properties": {"labels": _NODE}},
            {"properties": {"targets": {"items": {
                "type": "object", "required": ["labels"],
                "properties": {"labels": _NODE}}}}}]}})

    job_name: JobName = Field(description="the Prometheus job, e.g. vllm, node-exporter")
    targets: list[TargetEntry] = Field(min_length=1, max_length=10_000, description=(
        "'host:port' or {target, labels}, at least one"))
    labels: Labels | None = Field(None, description="labels of every target")
    owner: Owner | NoOwner | None = Field(None, description=(
        "who registered, e.g. 'ray:<session>:<job id>'; a later POST /api/v1/runs/bind "
        "names its run"))
    project: Annotated[StrictStr, StringConstraints(max_length=256)] | None = Field(
        None, description="the run's project, with experiment_name, or neither")
    experiment_name: Annotated[StrictStr, StringConstraints(max_length=256)] | None = Field(
        None, description="the run's name, with project, or neither")
    # the legacy list form of ``labels``, one entry per target (read before validation)
    per_target: SkipJsonSchema[tuple[Labels | None, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _earlier_forms(cls, body: Any) -> Any:
        if not isinstance(body, Mapping):
            return body
        body = dict(body)
        body.pop("per_target", None)
        if isinstance(body.get("targets"), str):
            body["targets"] = [body["targets"]]
        labels, targets = body.get("labels"), body.get("targets")
        if isinstance(labels, list):
            n = len(targets) if isinstance(targets, list) else 1
            if len(labels) != n:
                raise ValueError(f"labels is a list of {len(labels)} but there are {n} "
                                 "targets; give one entry (or null) per target")
            body["per_target"], body["labels"] = tuple(labels), None
        return body

    @model_validator(mode="after")
    def _run_and_nodes(self) -> Registration:
        if bool(self.project) != bool(self.experiment_name):
            raise ValueError("give both project and experiment_name, or neither")
        if self.job_name in HARDWARE_JOBS:
            for i, labels in enumerate(self.labels_of_each()):
                if not labels.get("node"):
                    raise ValueError(
                        f"targets[{i}]: a {self.job_name} target needs a `node` label "
                        "naming its node, e.g. labels: {node: gpu-node-3}")
        return self

    def labels_of_each(self) -> list[dict[str, str]]:
        """Each target's labels: those of every target, then the list form's entry, then
        its own; values as Prometheus holds them (text, booleans lower-case)."""
        out = []
        for i, item in enumerate(self.targets):
            own = item.labels if isinstance(item, TargetItem) else None
            listed = self.per_target[i] if self.per_target else None
            merged: dict[str, str] = {}
            for part in (self.labels, listed, own):
                merged.update({k: _text(v) for k, v in (part or {}).items()})
            out.append(merged)
        return out

    def to_targets(self) -> list[Target]:
        project, experiment = self.project or "", self.experiment_name or ""
        return [Target(self.job_name, item.target if isinstance(item, TargetItem) else item,
                       tuple(sorted(labels.items())), project, experiment,
                       self.owner or "")
                for item, labels in zip(self.targets, self.labels_of_each(), strict=True)]


def _text(value: LabelValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class Binding(_Body):
    """What a process says once its run is named: the run of the targets its key
    registered before."""

    owner: Owner = Field(description="the key the registrations carried, e.g. "
                                     "'ray:<session>:<job id>'")
    project: RunName
    experiment_name: RunName

    @model_validator(mode="after")
    def _owned(self) -> Binding:
        if not self.owner:
            raise ValueError("owner is required: the key the registrations carried (e.g. "
                             "'ray:<session>:<job id>')")
        return self


class RunIdentity(_Body):
    project: RunName
    experiment_name: RunName


ConfigKey = Annotated[StrictStr, StringConstraints(min_length=1,
                                                    max_length=runconfig.MAX_KEY_CHARS)]
ConfigValue = Annotated[StrictStr, StringConstraints(max_length=runconfig.MAX_VALUE_BYTES)
                        ] | StrictInt | StrictFloat | StrictBool | None


def _count(value: int | float) -> int:
    """A count: JSON Schema's integers include ``3.0``, which JSON parses as a float."""
    if value < 0 or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"a count is a whole number, 0 or more, not {value!r}")
    return int(value)


Count = Annotated[StrictInt | StrictFloat, AfterValidator(_count), WithJsonSchema(
    {"type": "integer", "minimum": 0})]


class RunConfig(_Body):
    """A run's configuration as its training process hands it over
    (rl_insight/wire/runconfig.py): flattened, secrets masked, bounded. The server masks
    and bounds it again by the same rules, and keeps the latest with the run."""

    project: RunName
    experiment_name: RunName
    values: dict[ConfigKey, ConfigValue] = Field(
        max_length=runconfig.MAX_KEYS, description="dotted key -> its value (text, number, "
                                                   "boolean or null)")
    masked: Count = Field(0, description="values masked as secrets")
    cut: dict[Annotated[StrictStr, StringConstraints(max_length=32)], Count] = Field(
        default_factory=dict, max_length=8, description="what the client's bounds left "
                                                        "out: keys, values, depth")
    source: Annotated[StrictStr, StringConstraints(
        max_length=runconfig.MAX_SOURCE_CHARS)] = Field(
        "", description="who handed it over (verl, trl, log_config, ...)")

    @model_validator(mode="before")
    @classmethod
    def _plain_values(cls, body: Any) -> Any:
        values = body.get("values") if isinstance(body, Mapping) else None
        for key, value in (values.items() if isinstance(values, Mapping) else ()):
            name = repr(key[:64] + "...") if len(str(key)) > 64 else repr(key)
            if not isinstance(value, (str, int, float, bool, type(None))):
                raise ValueError(
                    f"values[{name}]: a {type(value).__name__} is no plain value; each "
                    "key's value is text, a number, a boolean or null (nested "
                    "configurations flattened to dotted keys: rl_insight.log_config does)")
            if isinstance(value, str) and len(value) > runconfig.MAX_VALUE_BYTES:
                raise ValueError(f"values[{name}]: {len(value)} characters, over "
                                 f"{runconfig.MAX_VALUE_BYTES} (cut it short)")
            if len(str(key)) > runconfig.MAX_KEY_CHARS:
                raise ValueError(f"values[{name}]: a key of {len(str(key))} characters, "
                                 f"over {runconfig.MAX_KEY_CHARS}")
        return body


class ProfileRequest(_Body):
    """A profile of one trainer rank of a run (rl_insight/server/analyses/profiles.py)."""

    project: RunName
    experiment_name: RunName
    rank: Annotated[StrictStr, StringConstraints(pattern=r"^[0-9]{1,7}$")] = Field(
        description="the rank's number, as its lane rank_<n> names it")
    seconds: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        None, description="how long to sample (profiles.default_seconds when absent)")


class ProfileTake(_Body):
    by: Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)] = Field(
        description="the lane actor that captures it")


class ProfileResult(_Body):
    method: Annotated[StrictStr, StringConstraints(max_length=64)] = ""
    process: Annotated[StrictStr, StringConstraints(max_length=256)] = ""
    error: Annotated[StrictStr, StringConstraints(max_length=4000)] = ""
    top_frames: list[dict[str, Any]] = Field(default_factory=list, max_length=50)
    data: dict[str, Any] | None = Field(None, description="the profile, speedscope JSON")


# a batch group's grouping label: any name Prometheus takes but job (given as `job`)
GroupLabelName = Annotated[StrictStr, AfterValidator(_label_name(
    ("job",), "it is set by 'job' and cannot repeat in 'grouping'")), WithJsonSchema(
    {"type": "string", "pattern": LABEL_NAME, "not": {"const": "job"}})]


class PushGroup(_Body):
    job: Annotated[StrictStr, StringConstraints(min_length=1)] = Field(
        description="the job label's value")
    grouping: dict[GroupLabelName, StrictStr] = Field(
        default_factory=dict, description="further grouping labels, as the path's pairs")
    # any string: a text that does not parse is answered in its result
    text: StrictStr = Field(description="the Prometheus text format, as a push body; its "
                                        "result says 400 when it does not parse")
    replace: StrictBool = Field(False, description="PUT semantics (replace the group); "
                                                   "else POST (replace the pushed families)")

    def labels(self) -> dict[str, str]:
        return {"job": self.job, **self.grouping}


class PushBatch(_Body):
    groups: list[PushGroup] = Field(max_length=MAX_BATCH_GROUPS)


M = TypeVar("M", bound=BaseModel)


def read(model: type[M], body: Any, error: type[ValueError] = BodyError) -> M:
    """``body`` (parsed JSON) as ``model``, or ``error`` naming the first field that is
    wrong, what was wrong and what the field takes."""
    if not isinstance(body, Mapping):
        raise error("the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise error(_say(model, exc.errors()[0])) from None


def _say(model: type[BaseModel], e: Mapping[str, Any]) -> str:
    loc = list(e.get("loc", ()))
    if "[key]" in loc:  # a label name: the validator's message names it
        loc = loc[:loc.index("[key]") - 1]
    where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc
                    if x not in _TAGS and not str(x).startswith("function-")).lstrip(".")
    cause = (e.get("ctx") or {}).get("error")
    msg = str(cause) if isinstance(cause, ValueError) else e.get("msg", "invalid")
    if isinstance(cause, ValueError):  # the validator's own message
        named = where.split("[")[0].split(".")[-1]
        return f"{where}: {msg}" if where and not msg.startswith(named) else msg
    field = model.model_fields.get(str(loc[0])) if loc else None
    hint = f" ({field.description})" if field and field.description and len(loc) == 1 \
        else ""
    value = e.get("input")
    if where and e.get("type") != "missing" and isinstance(value, (str, int, float)):
        where = f"{where} {value!r}"  # the value, as the parsers always named it
    return f"{where}: {msg}{hint}" if where else msg


class _OpenApiSchema(GenerateJsonSchema):
    """Pydantic writes a constrained key as ``patternProperties``, which lets any other
    key through; the bodies mean every key must fit, so keys become ``propertyNames``."""

    def dict_schema(self, schema):  # noqa: ANN001, ANN201 (pydantic's signature)
        out = super().dict_schema(schema)
        patterns = out.pop("patternProperties", None)
        if patterns:
            (pattern, values), = patterns.items()
            out["propertyNames"] = {"pattern": pattern, **out.get("propertyNames", {})}
            out["additionalProperties"] = values
        return out


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema with its definitions inlined (an OpenAPI operation's body
    holds no ``$defs`` of its own)."""
    doc = model.model_json_schema(schema_generator=_OpenApiSchema)
    defs = doc.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline({**defs[ref.split("/")[-1]],
                               **{k: v for k, v in node.items() if k != "$ref"}})
            # a null default says nothing (and the OpenAPI document leaves it out)
            return {k: inline(v) for k, v in node.items()
                    if not (k == "default" and v is None)}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node
    return inline(doc)


def parse_registration(body: Any) -> list[Target]:
    """The targets of a registration body (``Registration``); TargetError says what is
    wrong."""
    return read(Registration, body, TargetError).to_targets()


def parse_binding(body: Any) -> tuple[str, str, str]:
    """``{owner, project, experiment_name}`` of a binding body (``Binding``)."""
    b = read(Binding, body, TargetError)
    return b.owner, b.project, b.experiment_name


def parse_many(bodies: Iterable[Any]) -> list[list[Target]]:
    """Validate several registrations (a YAML file's list) before applying any."""
    out = []
    for i, body in enumerate(bodies):
        try:
            out.append(parse_registration(body))
        except TargetError as exc:
            raise TargetError(f"entry {i}: {exc}") from None
    return out
