"""The kernel cache's contents: list, clear and prune compiled kernels.

A kernel is ``<key>.so`` with its sidecars ``<key>.cu`` (first line ``// <name>``, then the source), ``<key>.log``
(ptxas warnings) and ``<key>.lock``; a failed compile leaves ``<name>-<key>.log``, and a killed one a
``.<key>-*`` folder.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .compiler import cache_dir

SIDECARS = (".cu", ".log", ".lock")
DAY = 86400.0


@dataclass(frozen=True)
class Entry:
    """One compiled kernel of the cache."""

    key: str
    name: str  # from the source sidecar; '?' without one
    path: Path  # the .so
    size: int  # bytes of the .so and its sidecars
    mtime: float  # when it was built
    last_used: float  # the later of its build and its last load (file access time, where the filesystem keeps it)


def _name(cu: Path) -> str:
    try:
        with cu.open() as f:
            first = f.readline()
    except OSError:
        return "?"
    return first[3:].strip() if first.startswith("// ") else "?"


def entries(folder: Path | None = None) -> list[Entry]:
    """Every compiled kernel, oldest build first."""
    folder = folder or cache_dir()
    out = []
    for lib in folder.glob("*.so"):
        try:
            st = lib.stat()
        except FileNotFoundError:  # deleted meanwhile
            continue
        key = lib.stem
        size = st.st_size + sum(p.stat().st_size for p in (lib.with_suffix(s) for s in SIDECARS) if p.exists())
        out.append(Entry(key, _name(lib.with_suffix(".cu")), lib, size, st.st_mtime, max(st.st_mtime, st.st_atime)))
    return sorted(out, key=lambda e: (e.mtime, e.key))


def _remove_kernel(lib: Path) -> None:
    for path in (lib, *(lib.with_suffix(s) for s in SIDECARS)):
        path.unlink(missing_ok=True)


def _leftovers(folder: Path) -> list[Path]:
    """Failure logs, orphaned sidecars and the folders of interrupted compiles."""
    keys = {p.stem for p in folder.glob("*.so")}
    out = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(".")]
    out += [p for p in folder.iterdir() if p.is_file() and p.suffix in SIDECARS and p.stem not in keys]
    return out


def _delete(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clear(folder: Path | None = None) -> tuple[int, int]:
    """Delete every compiled kernel, its sidecars and failure logs; return (kernels, bytes) deleted."""
    folder = folder or cache_dir()
    gone = entries(folder)
    for e in gone:
        _remove_kernel(e.path)
    for path in _leftovers(folder):
        _delete(path)
    return len(gone), sum(e.size for e in gone)


def prune(days: float, folder: Path | None = None, dry_run: bool = False, now: float | None = None) -> list[Entry]:
    """Delete kernels neither built nor loaded in the last ``days`` days (and leftovers older than that);
    return the kernels deleted (or, with ``dry_run``, that would be)."""
    folder = folder or cache_dir()
    cutoff = (now or time.time()) - days * DAY
    old = [e for e in entries(folder) if e.last_used < cutoff]
    if not dry_run:
        for e in old:
            _remove_kernel(e.path)
        for path in _leftovers(folder):
            try:
                stale = path.stat().st_mtime < cutoff
            except FileNotFoundError:
                continue
            if stale:
                _delete(path)
    return old
