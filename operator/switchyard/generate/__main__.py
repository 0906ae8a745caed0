"""`python -m switchyard.generate ROOT`: write every generated file under ROOT (make generate)."""

import pathlib
import sys

from .files import write

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
for rel in write(root):
    print(f"wrote {rel}")
