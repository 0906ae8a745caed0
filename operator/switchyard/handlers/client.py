"""The one API client the handlers share (the apply module's Kube), made on first use from the settings."""

from __future__ import annotations

from ..apply import Kube
from ..policy.settings import current

_kube: Kube | None = None


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube.from_environment(current().kubeconfig)
    return _kube
