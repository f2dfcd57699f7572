"""What the bench suite times: a case (one family at one shape, pattern and config), and its baselines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from . import shapes as shp

ENGINES = {"24": "tensor", "vnm": "tensor", "nm": "simt"}  # pattern kind -> the engine its ideal time uses
BASELINES = ("cublas", "cublas_sgemm", "cusparselt_search")
CSLT_MODE = "cusparselt_search"


@dataclass(frozen=True)
class Case:
    """One family timed at one shape and pattern with one config, and where that config came from
    (``config_source``: user, shipped, model or heuristic, as dispatch would choose)."""

    shape: shp.Shape
    family: str
    kind: str
    pattern: str
    config: Any
    source: str = "heuristic"

    @property
    def tuned(self) -> bool:
        return self.source != "heuristic"

    @property
    def impl(self) -> str:
        return f"{self.family}_{'tuned' if self.tuned else 'heuristic'}"


def clone_weight(w: Any) -> Any:
    """A copy of a compressed weight in new memory (its kernel-layout cache is not copied)."""
    import torch

    fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}
    return dataclasses.replace(w, **{k: v.clone() for k, v in fields.items() if isinstance(v, torch.Tensor)})


