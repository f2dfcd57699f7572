"""A family's config space as Optuna categorical parameters, optionally with some parameters fixed."""

from __future__ import annotations

import itertools
from typing import Any

import optuna

from ..errors import ConfigError


def space_of(family: Any, fixed: dict[str, Any] | None = None) -> dict[str, tuple]:
    """The family's space with ``fixed`` parameters pinned to a value, or narrowed to a tuple of values."""
    space = dict(family.space())
    for name, value in (fixed or {}).items():
        values = value if isinstance(value, tuple) else (value,)
        if name not in space or not values or any(v not in space[name] for v in values):
            raise ConfigError(f"cannot fix {name}={value!r}: not (a subset of) {family.name}'s space")
        space[name] = values
    return space


def suggest(trial: optuna.Trial, family: Any, fixed: dict[str, Any] | None = None) -> Any:
    """The config this trial proposes (every parameter categorical over the family's values)."""
    return family.Config(**{name: trial.suggest_categorical(name, list(values))
                            for name, values in space_of(family, fixed).items()})


def all_configs(family: Any, problem: Any, fixed: dict[str, Any] | None = None) -> list[Any]:
    """Every valid config of the (possibly pinned) space for ``problem``: the exhaustive sweep."""
    space = space_of(family, fixed)
    out = []
    for values in itertools.product(*space.values()):
        cfg = family.Config(**dict(zip(space, values, strict=True)))
        if family.check(cfg, problem) is None:
            out.append(cfg)
    return out
