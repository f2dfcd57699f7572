"""Kernel families: one folder each (``families/<name>/family.py`` + its kernel template), all behind
:class:`base.Family`. ``FAMILIES`` is the registry; :mod:`cutlass_nm.routing` says which family runs a weight."""

from __future__ import annotations

from .base import Family, KernelTypes, Problem
from .decode24.family import FAMILY as DECODE24
from .decode24_fp8.family import FAMILY as DECODE24_FP8
from .nm_decode.family import FAMILY as NM_DECODE
from .nm_decode_fp8.family import FAMILY as NM_DECODE_FP8
from .nm_decode_simt.family import FAMILY as NM_DECODE_SIMT
from .nm_simt.family import FAMILY as NM_SIMT
from .sptc24_fp8_sm90.family import FAMILY as SPTC24_FP8_SM90
from .sptc24_sm80.family import FAMILY as SPTC24_SM80
from .sptc24_sm90.family import FAMILY as SPTC24_SM90
from .vnm_fp8_sm90.family import FAMILY as VNM_FP8_SM90
from .vnm_glu_sm90.family import FAMILY as VNM_GLU_SM90
from .vnm_sm80.family import FAMILY as VNM_SM80
from .vnm_sm90.family import FAMILY as VNM_SM90

FAMILIES: dict[str, Family] = {f.name: f for f in (SPTC24_SM90, SPTC24_SM80, NM_DECODE, NM_DECODE_SIMT, DECODE24,
                                                   VNM_SM90, VNM_SM80, NM_SIMT, VNM_GLU_SM90,
                                                   SPTC24_FP8_SM90, DECODE24_FP8, NM_DECODE_FP8, VNM_FP8_SM90)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown kernel family {name!r}; known: {sorted(FAMILIES)}") from None


__all__ = ["FAMILIES", "Family", "KernelTypes", "Problem", "get_family"]
