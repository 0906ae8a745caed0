"""The cluster options an analyst picks in `Gateway().new_cluster(...)`, as dask-gateway `Options`.

Pure: the choices come from the gateway's configuration (the images the
facility's allowlist admits, the fleet templates the admin offers, the largest
worker), and the handler turns a choice into `SwitchyardClusterConfig` fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dask_gateway_server.options import Float, Integer, Options, Select

GIB = 2**30


def config_overrides(options: Mapping) -> dict:
    """Chosen options → ClusterConfig fields (memory in bytes, as the gateway's limits count it)."""
    return {"worker_cores": int(options["worker_cores"]),
            "worker_memory": int(round(float(options["worker_memory"]) * GIB)),
            "image": options["image"], "template": options["template"]}


def cluster_options(images: Sequence[str], templates: Sequence[str], *, max_cores: int = 16,
                    max_memory_gib: float = 64, default_cores: int = 1, default_memory_gib: float = 4) -> Options:
    """Options with the image limited to `images` (the first is the default) and the template to `templates`.

    The defaults are held to the bounds: dask-gateway validates a field's default when the field is
    made, so a default above an admin's smaller bound (maxWorkerMemoryGib: 2) refused every cluster."""
    if not images:
        raise ValueError("the gateway needs at least one worker image (c.SwitchyardBackend.images)")
    return Options(
        Integer("worker_cores", default=min(default_cores, max_cores), min=1, max=max_cores, label="Worker cores"),
        Float("worker_memory", default=min(float(default_memory_gib), float(max_memory_gib)), min=0.0625,
              max=float(max_memory_gib), label="Worker memory (GiB)"),
        Select("image", list(images), label="Image"),
        Select("template", list(templates) or ["default"], label="Fleet template"),
        handler=config_overrides,
    )
