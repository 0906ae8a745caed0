"""XRootD for XCache pools: the config renderer and the monitoring decoder."""

from .config import config_checksum, render_config, render_scitokens_config

__all__ = ["config_checksum", "render_config", "render_scitokens_config"]
