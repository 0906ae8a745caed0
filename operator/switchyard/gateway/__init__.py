"""switchyard as a dask-gateway backend: gateway clusters become WorkerFleets (backend.py; pure parts in manifests.py, options.py)."""
