"""The opening lines of every headline report in bench/results: what it measures, the command that
writes it, and its last run (when, and at which commit).

Experiments and one-off analyses live in bench/notes (index: bench/notes/README.md).
"""

from __future__ import annotations

import datetime as dt
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def commit() -> str:
    """HEAD's short hash, saying so when the operator's code differed from it during the run."""
    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=False)
        return done.stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes under operator/" if git("status", "--porcelain", "operator") else "")


def about(measures: str, command: str, last_run: str | None = None) -> list[str]:
    """The three lines (and a blank one) under a report's title. last_run defaults to now, at commit()."""
    if last_run is None:
        last_run = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}"
    return [f"**Measures:** {measures}  ", f"**Command:** {command}  ", f"**Last run:** {last_run}", ""]
