"""Tuning campaigns: the layer shapes of common models, shipped as package data (``data/models.json``)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from .errors import InputError


def _read(path: str | Path | None) -> str:
    if path is None:
        return resources.files(__package__).joinpath("data", "models.json").read_text()
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no campaign file at {path}; pass a JSON file of {{model: [[layer, n, k], ...]}}")
    return path.read_text()


def load_models(path: str | Path | None = None) -> dict[str, list[tuple[str, int, int]]]:
    """``{model: [(layer, out_features, in_features), ...]}`` from a campaign file (default: the shipped one)."""
    text = _read(path)
    try:
        raw = json.loads(text)
        models = {}
        for name, layers in raw.items():
            if name.startswith("_"):
                continue
            models[name] = [(str(layer), int(n), int(k)) for layer, n, k in layers]
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"campaign file {path} is not {{model: [[layer, n, k], ...]}}: {exc}") from None
    return models


def model_shapes(model: str, m: int, path: str | Path | None = None) -> list[tuple[int, int, int]]:
    """Distinct (m, n, k) problems of a model's linear layers at ``m`` tokens."""
    models = load_models(path)
    if model not in models:
        raise InputError(f"unknown model {model!r}; known: {', '.join(sorted(models))}")
    return sorted({(m, n, k) for _, n, k in models[model]})
