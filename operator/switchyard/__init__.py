"""switchyard: a Kubernetes operator for caching HEP analysis facilities."""

__version__ = "0.1.0"
