"""What `make generate` writes from the models: CRDs, dashboards, the chart's values and schema, docs.

Not imported by the operator at run time; `python -m switchyard.generate ROOT` writes them.
"""
