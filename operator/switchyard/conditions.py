"""Conditions as a pure function of what a reconcile found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .api import reasons


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0)]}
_CONTROL.update({ord("\n"): "; ", ord("\t"): " ", 0x2028: "; ", 0x2029: "; "})
MESSAGE_MAX = 2048


def printable(text: str) -> str:
    """One line of printable text: user input echoed in a message must not forge log lines or events.

    Line breaks become '; ', other control characters are shown escaped, and
    the text is cut to MESSAGE_MAX characters.
    """
    out = text.translate(_CONTROL)
    return out if len(out) <= MESSAGE_MAX else out[: MESSAGE_MAX - 1] + "…"


@dataclass(frozen=True)
class State:
    """One condition's verdict."""

    status: bool | None  # None: Unknown
    reason: str
    message: str = ""


def _word(status: bool | None) -> str:
    return "Unknown" if status is None else ("True" if status else "False")


def merge(previous: Sequence[Mapping], generation: int, now: str, **states: State) -> list[dict]:
    """New conditions; lastTransitionTime moves only when a status changes."""
    old = {c.get("type"): c for c in previous or ()}
    out = []
    for ctype in ("Ready", "Progressing", "Degraded"):
        state = states[ctype]
        status = _word(state.status)
        before = old.get(ctype, {})
        changed = before.get("status") != status
        out.append({
            "type": ctype,
            "status": status,
            "reason": state.reason,
            "message": printable(state.message),
            "observedGeneration": generation,
            "lastTransitionTime": now if changed or not before.get("lastTransitionTime") else before["lastTransitionTime"],
        })
    return out


def ready(message: str = "") -> dict[str, State]:
    return {"Ready": State(True, reasons.READY, message), "Progressing": State(False, reasons.CONVERGED),
            "Degraded": State(False, reasons.HEALTHY)}


def progressing(reason: str, message: str) -> dict[str, State]:
    return {"Ready": State(False, reason, message), "Progressing": State(True, reason, message),
            "Degraded": State(False, reasons.HEALTHY)}


def failed(reason: str, message: str, degraded: bool = False) -> dict[str, State]:
    """Input or situation that will not work until someone changes something."""
    return {"Ready": State(False, reason, message), "Progressing": State(False, reason, message),
            "Degraded": State(degraded, reason if degraded else reasons.HEALTHY, message if degraded else "")}


def condition(conditions: Sequence[Mapping] | None, ctype: str) -> Mapping | None:
    return next((c for c in conditions or () if c.get("type") == ctype), None)


def is_true(conditions: Sequence[Mapping] | None, ctype: str) -> bool:
    c = condition(conditions, ctype)
    return bool(c and c.get("status") == "True")
