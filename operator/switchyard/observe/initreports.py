"""What an init container last reported, read from its pods' status (pure).

Init containers that judge their node or image (the cache pod's `prepare`,
cacheprepare.py; a worker's `routing-check`, routing/check.py) say what they
found in their termination message. The kubelet keeps a finished run's
`terminated` state (exit code, reason, message) in the container's status:
as its current state once it ran, or in `lastState` while a failed run's
successor waits out its back-off. The handlers list a kind's pods only while
they need an answer, and these functions find it there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def init_container(pod: dict, name: str) -> dict | None:
    """The pod's spec of init container `name` (None: it has none)."""
    return next((c for c in (pod.get("spec") or {}).get("initContainers") or () if c.get("name") == name), None)


def last_runs(pods: Iterable[dict], name: str) -> Iterator[tuple[dict, dict]]:
    """(pod, its init container `name`'s last finished run: a `terminated` state) for each pod where it
    has finished at least once."""
    for pod in pods:
        for status in (pod.get("status") or {}).get("initContainerStatuses") or ():
            if status.get("name") != name:
                continue
            finished = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
            if finished:
                yield pod, finished
