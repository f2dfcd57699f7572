"""Tuning campaigns: the layer shapes of common models, kept as data in the repo's ``tuning/`` folder."""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "tuning" / "models.json"


def load_models(path: str | Path | None = None) -> dict[str, list[tuple[str, int, int]]]:
    """``{model: [(layer, out_features, in_features), ...]}`` from a campaign file."""
    path = Path(path) if path else DEFAULT
    if not path.exists():
        raise FileNotFoundError(f"no campaign file at {path}; pass one with --campaigns (see tuning/models.json)")
    raw = json.loads(path.read_text())
    models = {}
    for name, layers in raw.items():
        if name.startswith("_"):
            continue
        models[name] = [(str(layer), int(n), int(k)) for layer, n, k in layers]
    return models


def model_shapes(model: str, m: int, path: str | Path | None = None) -> list[tuple[int, int, int]]:
    """Distinct (m, n, k) problems of a model's linear layers at ``m`` tokens."""
    models = load_models(path)
    if model not in models:
        raise KeyError(f"unknown model {model!r}; known: {sorted(models)}")
    return sorted({(m, n, k) for _, n, k in models[model]})
