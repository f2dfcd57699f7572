"""Kernel families. Each module exports ``FAMILY`` implementing :class:`base.Family`."""

from __future__ import annotations

from . import nm_decode, nm_simt, sptc24_sm80, sptc24_sm90, vnm_glu_sm90, vnm_sm80, vnm_sm90
from .base import Family, KernelTypes, Problem

FAMILIES: dict[str, Family] = {f.name: f for f in (sptc24_sm90.FAMILY, sptc24_sm80.FAMILY, nm_decode.FAMILY,
                                                   vnm_sm90.FAMILY, vnm_sm80.FAMILY, nm_simt.FAMILY,
                                                   vnm_glu_sm90.FAMILY)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown kernel family {name!r}; known: {sorted(FAMILIES)}") from None


__all__ = ["FAMILIES", "Family", "KernelTypes", "Problem", "get_family"]
