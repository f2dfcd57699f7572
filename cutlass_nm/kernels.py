"""Turn (family, config, types) into a callable kernel: emit -> compile (cached) -> load -> bind."""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .build import BuildEvent, build, build_many
from .build.compiler import is_cached
from .families import KernelTypes, get_family

log = logging.getLogger("cutlass_nm")
KernelId = tuple[str, Any, KernelTypes]  # (family name, Config, KernelTypes)
_LOADED: dict[KernelId, Callable] = {}
_LOCK = threading.Lock()


def kernel_name(kid: KernelId) -> str:
    family, cfg, types = kid
    fields = "_".join(str(v) for v in cfg.to_record().values())
    return f"{family}_{types.dtype}_{types.out_dtype}{'_bias' if types.bias else ''}_{fields}"


def _source(kid: KernelId) -> tuple[str, str, str]:
    family = get_family(kid[0])
    return family.source(kid[1], kid[2]), family.arch, kernel_name(kid)


def uncompiled(kids: Iterable[KernelId]) -> list[KernelId]:
    """The ids among ``kids`` that are neither loaded nor in the kernel cache (their first use compiles)."""
    return [k for k in kids if k not in _LOADED and not is_cached(*_source(k)[:2])]


def get_kernel(kid: KernelId) -> Callable:
    """The launcher for a kernel id, compiling it on first use (minutes for a new sm90 kernel)."""
    launcher = _LOADED.get(kid)
    if launcher is None:
        family = get_family(kid[0])
        needs = family.helpers(kid[1], kid[2])
        cold = uncompiled((kid, *needs)) if needs else []
        if len(cold) > 1:  # the kernel and the helpers its launcher calls: compiled in parallel
            log.warning("cutlass_nm: compiling %s on first use", ", ".join(kernel_name(k) for k in cold))
            precompile(cold)
        helpers = [get_kernel(h) for h in needs]
        with _LOCK:
            launcher = _LOADED.get(kid)
            if launcher is None:
                source, arch, name = _source(kid)
                if not is_cached(source, arch):
                    log.warning("cutlass_nm: compiling %s on first use (about 1-2 min for sm90; "
                                "`cutlass-nm build` compiles ahead of time, in parallel)", name)
                artifact = build(source, arch, name)
                lib = ctypes.CDLL(str(artifact.path))
                launcher = family.bind(lib, kid[1], kid[2], helpers)
                _LOADED[kid] = launcher
    return launcher


def precompile(kids: Iterable[KernelId], workers: int | None = None,
               progress: Callable[[BuildEvent], None] | None = None) -> list:
    """Compile many kernels in parallel (no GPU needed), and the helper kernels their launchers call
    (``Family.helpers``) with them; returns an Artifact or BuildError per id given (a helper that fails is logged,
    and its kernel's first call reports it). ``progress`` gets a :class:`~cutlass_nm.build.BuildEvent` as each
    kernel finishes (``build.progress.build_progress``)."""
    kids = list(kids)
    given = set(kids)
    helpers = [h for h in dict.fromkeys(h for k in kids for h in get_family(k[0]).helpers(k[1], k[2]))
               if h not in given]
    results = build_many((_source(k) for k in kids + helpers), workers=workers, progress=progress)
    for kid, res in zip(helpers, results[len(kids):], strict=True):
        if isinstance(res, Exception):
            log.warning("cutlass_nm: helper kernel %s failed to compile: %s", kernel_name(kid), res)
    return results[:len(kids)]
