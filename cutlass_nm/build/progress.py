"""Progress of parallel compiles for people: a live bar in a terminal, one line per finished kernel when piped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .compiler import BuildEvent


def event_line(event: BuildEvent) -> str:
    """``[3/12] 41 s sptc24_sm90_f16_f16_... built`` (built, cached or FAILED)."""
    return f"[{event.done}/{event.total}] {event.elapsed:.0f} s {event.name} {event.verdict}"


@contextmanager
def build_progress(total: int, console: Console | None = None, label: str = "compiling"
                   ) -> Iterator[Callable[[BuildEvent], None]]:
    """A ``build_many``/``precompile`` progress callback for ``total`` kernels: a bar with done/total and the
    elapsed time when ``console`` is a terminal, else one :func:`event_line` per finished kernel."""
    console = console or Console()
    if not console.is_terminal:
        def line(event: BuildEvent) -> None:
            console.print(event_line(event), markup=False, highlight=False, soft_wrap=True)

        yield line
        return
    with _bar(console) as bar:
        task = bar.add_task(label, total=total, last="")

        def advance(event: BuildEvent) -> None:
            if event.verdict == "FAILED":
                bar.console.print(f"[red]FAILED[/] {event.name}", highlight=False)
            bar.update(task, completed=event.done, last=f"{event.name} {event.verdict}")

        yield advance


@contextmanager
def step_progress(total: int, label: str, console: Console | None = None) -> Iterator[Callable[[str], None]]:
    """A counted bar for ``total`` steps of any long loop, on stderr; the callback takes a note on the step just
    done. Off a terminal, one line per step: ``label [3/7] note``."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        done = 0

        def line(note: str) -> None:
            nonlocal done
            done += 1
            console.print(f"{label} [{done}/{total}] {note}", markup=False, highlight=False, soft_wrap=True)

        yield line
        return
    with _bar(console) as bar:
        task = bar.add_task(label, total=total, last="")
        yield lambda note: bar.update(task, advance=1, last=note)


def _bar(console: Console) -> Progress:
    """The live bar both progress views draw: label, bar, done/total, elapsed time, the last step's note."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[last]}", style="dim"), console=console)
