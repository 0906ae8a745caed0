"""XRootD for XCache pools: the config renderer and the monitoring decoder."""

from .config import (
    config_checksum,
    directories_to_create,
    meta_space_path,
    namespace_path,
    render_config,
    render_scitokens_config,
)

__all__ = [
    "config_checksum", "directories_to_create", "meta_space_path", "namespace_path",
    "render_config", "render_scitokens_config",
]
