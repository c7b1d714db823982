"""A sink from its ``driver: "package.module:factory"``: the module imported, the factory
called with the sink's whole configuration node, and what it returns checked. As upstream
(verl-project/rl-insight ``rl_insight/client/push/driver.py`` at 8bfafe83): the node is
an OmegaConf ``DictConfig`` (a factory written against upstream reads it with
``OmegaConf.select``; a plain dict where omegaconf is not installed), a factory may
return None to turn its sink off, and a broken driver costs its sink, never training:
one warning says what to fix."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rl_insight.client.push.shape import SinkSpec
from rl_insight.client.push.sinks.base import PushSink

log = logging.getLogger(__name__)


@dataclass
class Bound:
    """A built sink with how it is fed; ``alive`` false once it raised."""

    sink: PushSink
    spec: SinkSpec
    tags: dict[str, str]
    alive: bool = True


def load_factory(dotted: str) -> Callable[[Any], Any]:
    """``"package.module:factory"`` resolved to the callable; ValueError, ImportError or
    TypeError saying what is wrong."""
    module_name, colon, attr = str(dotted).partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not colon or not module_name or not attr:
        raise ValueError(f"driver {dotted!r} is not \"package.module:factory\"")
    module = importlib.import_module(module_name)
    factory = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no {attr!r}") from None
    if not callable(factory):
        raise TypeError(f"{dotted!r} is a {type(factory).__name__}, not a callable")
    return factory


def node_for(spec: SinkSpec) -> Any:
    """The node the factory receives: a DictConfig, as upstream hands it."""
    try:
        from omegaconf import OmegaConf
    except ImportError:
        return dict(spec.node)
    try:
        return OmegaConf.create(dict(spec.node))
    except Exception:  # a value OmegaConf refuses: the plain mapping
        return dict(spec.node)


def env_tags(rules: tuple[Mapping[str, Any], ...],
             environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``tags_from_env``: each rule's ``tag`` from the first non-empty variable of its
    ``env`` (a name or a list), else its ``default`` (no default: no tag), through its
    ``format`` (``"{value}"``) if it has one; as upstream's ``tags.py`` (99ae298f)."""
    tags: dict[str, str] = {}
    for rule in rules:
        tag = rule.get("tag")
        if tag is None:
            continue
        names = rule.get("env") or []
        names = [names] if isinstance(names, str) else list(names)
        value = next((environ[str(n)] for n in names if environ.get(str(n))), None)
        if value is None:
            value = rule.get("default")
            if value is None:
                continue
        text, fmt = str(value), rule.get("format")
        if fmt is not None:
            try:
                text = str(fmt).format(value=text)
            except (KeyError, IndexError, ValueError) as exc:
                log.warning("rl-insight: push: tags_from_env format %r of tag %r: %s; "
                            "write it with {value} only", fmt, tag, exc)
        tags[str(tag)] = text
    return tags


def build(spec: SinkSpec) -> Bound | None:
    """The sink ``spec`` names, bound to its tags; None (with one warning naming the
    sink, what failed and what to do) when its driver cannot give one. Never raises."""
    what = f"rl-insight: push sink {spec.name!r} ({spec.driver})"
    try:
        factory = load_factory(spec.driver)
    except (ValueError, ImportError, TypeError) as exc:
        log.warning("%s: %s; check the driver's module is importable in this process "
                    "(PYTHONPATH, the job's runtime env) and names its factory. This sink "
                    "receives nothing; training goes on", what, exc)
        return None
    except Exception as exc:  # the module's own import failed
        log.warning("%s: importing it raised %s: %s; fix the module. This sink receives "
                    "nothing; training goes on", what, type(exc).__name__, exc)
        return None
    try:
        sink = factory(node_for(spec))
    except Exception as exc:
        log.warning("%s: the factory raised %s: %s; fix the factory or the sink's options. "
                    "This sink receives nothing; training goes on", what,
                    type(exc).__name__, exc)
        return None
    if sink is None:
        log.info("%s: the factory returned None: the sink is off", what)
        return None
    if not isinstance(sink, PushSink):
        log.warning("%s: the factory returned a %s, not a PushSink; return an instance of "
                    "a subclass of rl_insight.client.push.sinks.base.PushSink. This sink "
                    "receives nothing", what, type(sink).__name__)
        return None
    return Bound(sink, spec, env_tags(spec.tags_from_env))
