"""The committed CRDs and chart copies are exactly what the models generate."""

import pathlib

from switchyard.generate.files import generated_files

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_committed_files_match_the_generator():
    stale = []
    for rel, text in generated_files().items():
        path = REPO / rel
        if not path.exists() or path.read_text() != text:
            stale.append(rel)
    assert not stale, f"run `make generate` and commit: {stale}"
