"""Stand-ins for a compiled kernel library, so launchers can be tested on a CPU."""

from __future__ import annotations

import pytest

from cutlass_nm.families import launch


class Recorder:
    """Stands in for one C entry of a compiled library: takes ctypes attributes, records its calls."""

    def __init__(self, result: int) -> None:
        self.result, self.calls = result, []

    def __call__(self, *args) -> int:
        self.calls.append(args)
        return self.result


def entries_by_name(monkeypatch: pytest.MonkeyPatch, module) -> None:
    """Make ``gil_holding`` in ``module`` and in the shared launch helpers return the library's attribute itself,
    so a namespace of recorders stands in for the library."""
    for target in (module, launch):
        monkeypatch.setattr(target, "gil_holding", lambda lib, name, *types: getattr(lib, name), raising=False)


def resolve_every_problem_to(monkeypatch: pytest.MonkeyPatch, kernel):
    """Make ``matmul`` resolve every problem to ``kernel`` (a loaded kernel's stand-in), its input checks off."""
    from cutlass_nm import dispatch

    monkeypatch.setattr(dispatch, "check_inputs", lambda *args, **kwargs: None)
    monkeypatch.setattr(dispatch, "_resolve", lambda key: kernel)
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    return kernel
