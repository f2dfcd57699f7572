"""Tuning campaigns: the layer shapes of common models, shipped as package data (``data/models.json``), and the
split of those models into the ones whose shapes feed the shipped configs and the held-out ones that never do."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from .errors import InputError

SPLITS = ("tune", "held_out")
TOKENS = (1, 16, 128, 512, 2048, 8192)  # the token counts (m) campaigns tune and measure


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


def split_models(split: str) -> list[str]:
    """The shipped models of ``split``: "tune" (their shapes feed the shipped configs) or "held_out" (never tuned;
    they only measure how the default path does on shapes nobody tuned)."""
    if split not in SPLITS:
        raise InputError(f"split must be one of {SPLITS}, got {split!r}")
    return list(json.loads(_read(None))["_split"][split])


def split_shapes(split: str, tokens: tuple[int, ...] = TOKENS) -> list[tuple[int, int, int]]:
    """Distinct (m, n, k) problems of every model of ``split`` at each token count."""
    models = load_models()
    return sorted({(m, n, k) for name in split_models(split) for _, n, k in models[name] for m in tokens})
