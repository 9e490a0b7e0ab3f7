"""What the terminal shows during a long benchmark: a rich progress bar and one line per finished run.

The bar needs rich, from the ``controller`` extra; where it is missing, ``auto`` prints the lines.

Off a terminal (CI, Ansible) it prints only the per-run lines, to stderr; ``quiet`` prints nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from npudure import extras


class Progress:
    def __init__(self, mode: str = "auto") -> None:
        """``mode``: "auto" (bar on a terminal, lines otherwise), "bar", "lines" or "quiet"."""
        if mode == "auto":  # a bar needs rich (the controller extra); without it, lines
            mode = "bar" if sys.stderr.isatty() and importlib.util.find_spec("rich") else "lines"
        self.mode = mode
        self._bar: Any = None
        self._task: Any = None
        self._run_task: Any = None
        if mode == "bar":
            console = extras.require("rich.console", "the progress bar")
            progress = extras.require("rich.progress", "the progress bar")
            Console, RichProgress = console.Console, progress.Progress
            BarColumn, MofNCompleteColumn = progress.BarColumn, progress.MofNCompleteColumn
            TextColumn, TimeElapsedColumn = progress.TextColumn, progress.TimeElapsedColumn
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()

    def experiment(self, name: str, runs: int) -> None:
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(f"{name}: {runs} runs", total=runs)
        elif self.mode == "lines":
            print(f"== {name}: {runs} runs", file=sys.stderr, flush=True)

    def run_started(self, run_id: str, expected_s: float) -> None:
        if self._bar is not None:
            if self._run_task is not None:
                self._bar.remove_task(self._run_task)
            self._run_task = self._bar.add_task(f"  {run_id}", total=max(expected_s, 0.1))

    def tick(self, elapsed_s: float) -> None:
        if self._bar is not None and self._run_task is not None:
            self._bar.update(self._run_task, completed=elapsed_s)

    def run_done(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, highlight=False)
            if self._task is not None:
                self._bar.advance(self._task)
        elif self.mode == "lines":
            print(line, file=sys.stderr, flush=True)

    def note(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, highlight=False)
        elif self.mode != "quiet":
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
