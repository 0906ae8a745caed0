"""The observing side: what the exporters and the operator measure, and what is judged from it."""
