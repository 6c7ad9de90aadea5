"""What ``energon-plugins convert`` shows while it runs, on stderr.

Notices (what ``--overwrite`` removes) are printed whatever stderr is. On a terminal a rich
progress display shows the records handled out of the source's total (once the background
count has it) with the rate, the rejected records and the time left, and each step that
shows no count (hashing the source, Energon's indexing) as its own status line.
"""

from typing import Any

from energon_plugins.convert.progress import ConvertProgress


class ConvertDisplay(ConvertProgress):
    """A :class:`~energon_plugins.convert.progress.ConvertProgress` drawn with rich.

    Args:
        animated: draw the progress display (stderr is a terminal and no ``--json``);
            otherwise only notices are printed.
    """

    def __init__(self, animated: bool) -> None:
        from energon_plugins.cli._output import console

        self.console = console(stderr=True)
        self.animated = animated
        self._bar: Any = None
        self._task: Any = None
        self._counting = False

    @property
    def wants_total(self) -> bool:
        """Count the source's records only for the animated display."""
        return self.animated

    def start(self) -> None:
        """Start drawing (a no-op without ``animated``)."""
        if not self.animated or self._bar is not None:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("records, {task.fields[rejected]} rejected, {task.fields[rate]} records/s"),
            TimeElapsedColumn(),
            TextColumn("elapsed,"),
            TimeRemainingColumn(),
            TextColumn("left"),
            console=self.console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task("starting", total=None, rejected=0, rate="0")

    def stop(self) -> None:
        """Stop drawing and clear the display."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def notice(self, text: str) -> None:
        """Print ``text`` (above the display, when there is one)."""
        self.console.print(text, markup=False)

    def phase(self, text: str) -> None:
        """Show ``text`` as the current step."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)
            self._counting = False

    def total(self, records: int) -> None:
        """Give the display its total (the bar and the time left appear)."""
        if self._bar is not None:
            self._bar.update(self._task, total=records)

    def advance(self, done: int, rejected: int) -> None:
        """Show the records handled, the rate and the time left (both over the last seconds;
        the first call, at the checkpoint of a resumed run, is where the count starts)."""
        if self._bar is None:
            return
        if not self._counting:
            self._bar.reset(self._task, completed=done, description="converting")
            self._counting = True
        self._bar.update(self._task, completed=done, rejected=rejected)
        speed = self._bar.tasks[0].speed
        self._bar.update(self._task, rate=f"{speed or 0:.0f}")
