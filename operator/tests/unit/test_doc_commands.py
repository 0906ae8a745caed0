"""Every command the docs tell a reader to run is run by a test, or listed with why not.

The commands are the lines of the fenced `sh`, `bash`, `shell` and `console` blocks of README.md,
docs/*.md and the chart's and dashboards' READMEs. `switchyard plan` commands are run here, against
the repository's files. Every other command has an entry in doc_commands.yaml: `run_by` names the
test (or make target) that runs it and `as` how that file spells it, checked to be there; `not_run`
says why no test runs it (the admin's own cluster, registry or shell). A `helm` command is also
rendered here with `helm template` and its values, so the values it sets exist and pass the schema.
A command with no entry, or an entry no document holds any more, fails.
"""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
ALLOWED = pathlib.Path(__file__).with_name("doc_commands.yaml")
SHELLS = {"sh", "bash", "shell", "console"}
COMPOUND = re.compile(r"^(for|while|until|if)\b")


def documents() -> list[pathlib.Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts/switchyard/README.md",
            REPO / "dashboards/README.md"]


def strip_comment(line: str) -> str:
    """The line without a shell comment: a `#` at its start or after a blank, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def block_commands(lines: list[str], console: bool) -> list[str]:
    """One string per command of a block: continuation lines joined, a for/while/if through its end."""
    out: list[str] = []
    pending = ""
    depth = 0
    for raw in lines:
        line = raw.strip()
        if console:
            if not line.startswith("$ ") and not pending:
                continue  # output
            line = line.removeprefix("$ ")
        line = strip_comment(line).strip()
        if not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        pending += line
        depth += bool(COMPOUND.match(line)) - (line in ("done", "fi"))
        if depth > 0:
            pending += "; " if not pending.endswith((" do", " then")) else " "
            continue
        out.append(" ".join(pending.split()))
        pending = ""
    assert not pending, f"unfinished command: {pending}"
    return out


def doc_commands() -> dict[str, list[str]]:
    """Command -> the documents that show it."""
    found: dict[str, list[str]] = {}
    for path in documents():
        fence, lines = None, []
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if fence is None and stripped.startswith("```"):
                fence, lines = stripped[3:].strip(), []
            elif fence is not None and stripped.startswith("```"):
                if fence in SHELLS:
                    for command in block_commands(lines, fence == "console"):
                        found.setdefault(command, []).append(str(path.relative_to(REPO)))
                fence = None
            elif fence is not None:
                lines.append(line)
    return found


def allowed() -> list[dict]:
    return yaml.safe_load(ALLOWED.read_text())["commands"]


def run_here(command: str) -> bool:
    return command.startswith("switchyard plan ")


def test_the_extraction_reads_blocks_as_a_shell_would():
    commands = block_commands(["make a   # why", "helm x \\", "  --set 'a={b,c}' \\", "  --set d=e   # f",
                               "# only a comment", "for u in $(y); do", "  z \"$u\" && break", "done"], console=False)
    assert commands == ["make a", "helm x --set 'a={b,c}' --set d=e", 'for u in $(y); do z "$u" && break; done']
    console = block_commands(["$ kubectl get af", "NAME  READY", "$ echo '#1'"], console=True)
    assert console == ["kubectl get af", "echo '#1'"]


def test_every_command_in_the_docs_is_run_by_a_test_or_listed_with_why_not():
    found = doc_commands()
    assert len(found) >= 15, found  # the README's and the guides' blocks were read
    entries = {entry["command"]: entry for entry in allowed()}
    unlisted = sorted(c for c in found if not run_here(c) and c not in entries)
    assert not unlisted, f"run these in a test, or list them in {ALLOWED.name} with why not: {unlisted}"
    stale = sorted(c for c in entries if c not in found)
    assert not stale, f"no document shows these any more; drop them from {ALLOWED.name}: {stale}"
    for command, entry in entries.items():
        assert ("run_by" in entry) != ("not_run" in entry), f"{command}: either run_by (with as) or not_run"
        if "run_by" in entry:
            runner = REPO / entry["run_by"]
            assert runner.is_file(), f"{command}: {entry['run_by']} is not a file"
            assert entry["as"] in runner.read_text(), f"{command}: {entry['run_by']} no longer holds {entry['as']!r}"
        else:
            assert len(entry["not_run"].split()) >= 6, f"{command}: say why no test runs it"
    assert sum("not_run" in e for e in entries.values()) <= 17, "keep the list of commands no test runs short"


@pytest.mark.parametrize("command", sorted(c for c in doc_commands() if run_here(c)))
def test_the_docs_switchyard_plan_commands_run_against_the_repositorys_files(command, capsys):
    from switchyard.cli import main

    args = shlex.split(command)[1:]
    files = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-f", "--topology")]
    assert files and all((REPO / f).is_file() for f in files), command
    assert main([str(REPO / a) if a in files else a for a in args]) == 0
    assert capsys.readouterr().out


def helm_values(command: str) -> list[str]:
    """`helm install|upgrade` as `helm template` arguments: the chart and every value it sets."""
    words = shlex.split(command)
    chart = next(w for w in words if w.startswith("charts/"))
    out = [str(REPO / chart)]
    for i, word in enumerate(words):
        if word == "--set":
            out += ["--set", words[i + 1]]
    return out


@pytest.mark.parametrize("command", sorted(c for c in doc_commands() if c.startswith("helm ") and "charts/" in c))
def test_the_docs_helm_commands_values_render(command):
    from test_chart import KUBE_VERSION, MONITORING, helm

    helm("template", "rel", *helm_values(command), "--kube-version", KUBE_VERSION, *MONITORING)
