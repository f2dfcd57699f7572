"""Tuned configs shipped inside the package (``cutlass_nm/configs/<gpu>.jsonl``), used with no tuning DB at all.

A shipped file is a ``cutlass-nm db export`` of measured records whose header also names, per family, the template
hash its records are valid for (``"templates": {family: hash}``). A family's records are used only while that hash
is this version's (a template change makes them stale until they are re-measured or explicitly carried over:
``tuning/ship_configs.py``). Records of the GPU they were measured on (same name, compute capability and SM count;
the toolchain and driver may differ) are used first; for a family with none, a GPU takes the records of the same
chip (same compute capability and SM count, e.g. an H200 the H100's). Files are read once; a malformed record is
skipped.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .fingerprint import ProblemKey, template_hash
from .store import validated_records
from .validate import RecordError

log = logging.getLogger("cutlass_nm.store")
MATCH = ("gpu", "compute_capability", "sm_count")  # what a shipped record's environment must share with this GPU
SAME_CHIP = ("compute_capability", "sm_count")  # the fallback for a family with no record naming this GPU


@dataclass(frozen=True)
class Tuned:
    """One tuned problem's best measured config and its median time."""

    config: Any
    p50_ms: float


def _files() -> dict[str, str]:
    folder = resources.files("cutlass_nm").joinpath("configs")
    return {f.name[: -len(".jsonl")]: f.read_text() for f in folder.iterdir() if f.name.endswith(".jsonl")}


def header(text: str) -> dict:
    """A shipped file's header line (format, records, templates, ...)."""
    import json

    return json.loads(text.split("\n", 1)[0])


@functools.cache
def shipped_records() -> dict[str, list[dict]]:
    """``{gpu: [validated record, ...]}`` of every shipped file, ok measurements only (a bad line is skipped)."""
    out: dict[str, list[dict]] = {}
    for gpu, text in _files().items():
        rows = []
        for line, r in validated_records(text.splitlines(), f"shipped configs {gpu}"):
            if isinstance(r, RecordError):
                log.warning("cutlass_nm: shipped configs %s line %d skipped: %s", gpu, line, r)
                continue
            if r["status"] == "ok":
                rows.append({**r, **r["key"].to_dict(), "m": r["m"]})
        out[gpu] = rows
    return out


@functools.cache
def valid_templates() -> dict[str, dict[str, str]]:
    """``{gpu: {family: template hash its shipped records are valid for}}`` from the files' headers."""
    return {gpu: dict(header(text).get("templates") or {}) for gpu, text in _files().items()}


def stale_families() -> dict[str, list[str]]:
    """``{gpu: [family whose templates changed since its shipped configs were measured or carried over]}``."""
    return {gpu: sorted(f for f, h in fams.items() if h != template_hash(f))
            for gpu, fams in valid_templates().items()}


def shipped_table(machine: dict[str, Any]) -> dict[ProblemKey, Tuned]:
    """The best shipped config per problem for the GPU described by ``machine`` (``fingerprint._machine``'s
    fields), families whose templates are unchanged only: this GPU's own records, and for the families it has
    none of, those of the same chip."""
    own = _table(machine, MATCH)
    covered = {key.family for key in own}
    chip = {key: t for key, t in _table(machine, SAME_CHIP).items() if key.family not in covered}
    if chip:
        log.info("cutlass_nm: shipped configs of the same chip (cc %s, %s SMs) for %s on %s",
                 machine.get("compute_capability"), machine.get("sm_count"),
                 ", ".join(sorted({key.family for key in chip})), machine.get("gpu"))
    return {**chip, **own}


def _table(machine: dict[str, Any], fields: tuple[str, ...]) -> dict[ProblemKey, Tuned]:
    table: dict[ProblemKey, Tuned] = {}
    for gpu, rows in shipped_records().items():
        valid = valid_templates()[gpu]
        for r in rows:
            env = r["environment"]
            if any(getattr(env, f) != machine.get(f) for f in fields):
                continue
            key: ProblemKey = r["key"]
            if valid.get(key.family) != template_hash(key.family):  # re-measure or carry over first
                continue
            best = table.get(key)
            if best is None or r["p50_ms"] < best.p50_ms:
                table[key] = Tuned(r["config"], r["p50_ms"])
    return table
