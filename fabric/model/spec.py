"""Topology spec grammar, as Mininet's ``--topo``: ``name,arg,key=val``.

Positional arguments fill the builder's parameters in order; keywords name
them. Values are converted to the type of the builder parameter's default
(int, float or bool), so ``servers=8`` becomes the integer 8.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from fabric.model.graph import TopologyError


class SpecError(TopologyError):
    """A topology spec that does not parse or names unknown parameters."""


@dataclass(frozen=True)
class Spec:
    """A parsed spec: builder name, positional and keyword strings."""

    name: str
    args: tuple[str, ...] = ()
    kwargs: dict[str, str] = field(default_factory=dict)


def parse_spec(text: str) -> Spec:
    """Split ``text`` into a :class:`Spec`; raise :class:`SpecError` if malformed."""
    parts = [p.strip() for p in text.split(",")]
    if not parts[0]:
        raise SpecError(f"empty topology name in spec {text!r}")
    args: list[str] = []
    kwargs: dict[str, str] = {}
    for part in parts[1:]:
        if not part:
            raise SpecError(f"empty field in spec {text!r}")
        if "=" in part:
            key, _, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if not key or not value.strip():
                raise SpecError(f"malformed field {part!r} in spec {text!r}")
            if key in kwargs:
                raise SpecError(f"{key} given twice in spec {text!r}")
            kwargs[key] = value.strip()
        elif kwargs:
            raise SpecError(f"positional value {part!r} after a keyword in spec {text!r}")
        else:
            args.append(part)
    return Spec(parts[0], tuple(args), kwargs)


def bind_spec(spec: Spec, builder: Callable[..., Any]) -> dict[str, Any]:
    """Match ``spec``'s values to ``builder``'s parameters and convert them.

    Raises
    ------
    SpecError
        On an unknown key, too many positional values, a value given twice,
        or a value that does not convert to the parameter's type.
    """
    params = [p for p in inspect.signature(builder).parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    by_name = {p.name: p for p in params}
    if len(spec.args) > len(params):
        raise SpecError(f"{spec.name} takes at most {len(params)} values, got {len(spec.args)}")
    raw = dict(zip((p.name for p in params), spec.args))
    for key, value in spec.kwargs.items():
        if key not in by_name:
            known = ", ".join(by_name)
            raise SpecError(f"{spec.name} has no parameter {key!r} (known: {known})")
        if key in raw:
            raise SpecError(f"{spec.name}: {key} given twice")
        raw[key] = value
    return {key: _convert(spec.name, by_name[key], value) for key, value in raw.items()}


def _convert(topo: str, param: inspect.Parameter, value: str) -> Any:
    default = param.default
    kind = type(default) if default not in (inspect.Parameter.empty, None) else int
    try:
        if kind is bool:
            lowered = value.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return lowered in ("true", "1", "yes")
        if kind is int:
            return int(value)
        if kind is float:
            return float(value)
        return kind(value)
    except ValueError:
        raise SpecError(f"{topo}: {param.name} must be {kind.__name__}, got {value!r}") from None
