"""bench/results holds one headline report per bench, each opening with what it measures, the command that
writes it and its last run; bench/notes holds the experiments, every one named in its index (issue #28)."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
RESULTS = REPO / "bench" / "results"
NOTES = REPO / "bench" / "notes"


@pytest.mark.parametrize("report", sorted(p.name for p in RESULTS.glob("*.md")))
def test_a_headline_report_opens_with_what_it_measures_its_command_and_last_run(report):
    lines = (RESULTS / report).read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    assert lines[2].startswith("**Measures:** ")
    assert re.match(r"\*\*Command:\*\* .*`(make bench-[a-z-]+|python3? bench/[a-z_]+\.py)", lines[3]), lines[3]
    assert re.match(r"\*\*Last run:\*\* .*2\d{3}-\d\d-\d\d", lines[4]), lines[4]


def test_every_result_file_belongs_to_a_headline_report():
    """A .json or .png in bench/results is the data or picture of a report beside it, not an experiment."""
    reports = {p.stem for p in RESULTS.glob("*.md")}
    assert {p.stem for p in RESULTS.iterdir()} <= reports


def test_the_notes_index_names_every_experiment_and_script():
    index = (NOTES / "README.md").read_text()
    kept = {p.name for p in NOTES.iterdir() if p.is_file() and p.name != "README.md"}
    kept |= {f"scripts/{p.name}" for p in (NOTES / "scripts").glob("*.py")}
    # an experiment is named by its stem (fabric.cubic for .md/.json/.png), a script by its path
    missing = {name for name in kept if pathlib.PurePath(name).stem not in index and name not in index}
    assert not missing, f"not in bench/notes/README.md: {sorted(missing)}"


def test_the_notes_index_links_only_files_that_are_there():
    index = (NOTES / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", index)
    assert links
    assert [link for link in links if not (NOTES / link).exists()] == []
