"""A family's config space as Optuna categorical parameters."""

from __future__ import annotations

from typing import Any

import optuna


def suggest(trial: optuna.Trial, family: Any) -> Any:
    """The config this trial proposes (every parameter categorical over the family's values)."""
    return family.Config(**{name: trial.suggest_categorical(name, list(values))
                            for name, values in family.space().items()})


def all_configs(family: Any, problem: Any) -> list[Any]:
    """Every valid config of the space for ``problem`` (the exhaustive sweep)."""
    import itertools

    space = family.space()
    out = []
    for values in itertools.product(*space.values()):
        cfg = family.Config(**dict(zip(space, values, strict=True)))
        if family.check(cfg, problem) is None:
            out.append(cfg)
    return out
