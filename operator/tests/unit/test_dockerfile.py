"""The Dockerfile's install steps, run for real in a clean virtual environment.

No Docker engine runs on the development machines, so this test plays the
Dockerfile itself: every stage gets its own empty directory standing in for
its filesystem, COPY copies from the build context or from an earlier stage,
RUN runs the command (container paths mapped into that directory), ENV and
USER are applied, and then the image's ENTRYPOINT is started the way the
chart starts it: `switchyard --help` and `switchyard run --help`. The final
stage sees nothing of the build stage but what it copies, so a missing COPY
or a dependency left out of pyproject.toml fails here.

It installs the operator's dependencies from PyPI (about a minute on a warm
pip cache).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "*.pyc")


@dataclass
class Instruction:
    op: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        op, _, args = line.partition(" ")
        out.append(Instruction(op.upper(), args.strip()))
    return out


@dataclass
class Stage:
    name: str
    base: str
    root: pathlib.Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    user: str = "0"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    exposed: list[int] = field(default_factory=list)

    def host(self, path: str) -> pathlib.Path:
        """A container path of this stage as a host path."""
        absolute = path if path.startswith("/") else os.path.join(self.workdir, path)
        return self.root / os.path.normpath(absolute).lstrip("/")

    def map_command(self, command: str) -> str:
        """Container paths in a RUN command, mapped into this stage's directory."""
        return re.sub(r"(?<![\w.])/(opt|src|usr/local/switchyard|app)\b", lambda m: str(self.root) + m.group(0), command)

    def host_env(self, shim: pathlib.Path) -> dict[str, str]:
        env = {"HOME": str(self.root / "root"), "LANG": "C.UTF-8", "PATH": f"{shim}:/usr/local/bin:/usr/bin:/bin"}
        for key, value in self.env.items():
            env[key] = self.map_command(value.replace("$PATH", env["PATH"]))
        return env


def _json_or_shell(args: str) -> list[str]:
    return json.loads(args) if args.startswith("[") else ["/bin/sh", "-c", args]


def _env_pairs(args: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in shlex.split(args))


def _copy(source: pathlib.Path, destination: pathlib.Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True, ignore=IGNORED, symlinks=True)
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _arg(args: str) -> tuple[str, str]:
    """ARG NAME[=default] as (name, default), the default unquoted."""
    name, _, default = args.partition("=")
    return name.strip(), (shlex.split(default)[0] if shlex.split(default) else "")


def global_args(steps: list[Instruction]) -> dict[str, str]:
    """The ARGs before the first FROM with their defaults (what FROM lines may use)."""
    out = {}
    for step in steps:
        if step.op == "FROM":
            break
        if step.op == "ARG":
            out.update([_arg(step.args)])
    return out


def substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), ""), text)


def play(dockerfile: pathlib.Path, context: pathlib.Path, work: pathlib.Path, shim: pathlib.Path) -> Stage:
    """Run the Dockerfile's stages with the build arguments' defaults; return the final one."""
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    steps = parse(dockerfile.read_text())
    defaults = global_args(steps)
    for number, step in enumerate(steps):
        if step.op == "ARG" and stage is None:
            continue
        if step.op == "FROM":
            words = substitute(step.args, defaults).split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            # Every stage sees the same paths, as in Docker (a venv's scripts name its
            # interpreter by absolute path): the stage before moves aside.
            rootfs = work / "rootfs"
            if stage is not None:
                stage.root = rootfs.rename(work / f"stage-{stage.name}")
            stage = Stage(name, words[0], rootfs)
            stage.root.mkdir(parents=True)
            stages[name] = stage
            continue
        assert stage is not None, "instruction before FROM"
        if step.op == "WORKDIR":
            stage.workdir = step.args
            stage.host(step.args).mkdir(parents=True, exist_ok=True)
        elif step.op == "COPY":
            words = shlex.split(step.args)
            source_stage = None
            if words[0].startswith("--from="):
                source_stage = stages[words.pop(0).split("=", 1)[1]]
            *sources, destination = words
            for source in sources:
                origin = source_stage.host(source) if source_stage else context / source
                _copy(origin, stage.host(destination))
        elif step.op == "RUN":
            # A pip cache between runs only saves downloads; what is installed is the same.
            command = stage.map_command(step.args).replace(" --no-cache-dir", "")
            result = subprocess.run(["/bin/bash", "-euo", "pipefail", "-c", command], cwd=stage.host(stage.workdir),
                                    env=stage.host_env(shim), capture_output=True, text=True, timeout=1200)
            assert result.returncode == 0, f"step {number} RUN {step.args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        elif step.op == "ARG":
            # A build argument is in the environment of the stage's RUN steps.
            stage.env.update([_arg(step.args)])
        elif step.op == "ENV":
            stage.env.update(_env_pairs(step.args))
        elif step.op == "USER":
            stage.user = step.args
        elif step.op == "EXPOSE":
            stage.exposed += [int(p.split("/")[0]) for p in step.args.split()]
        elif step.op == "ENTRYPOINT":
            stage.entrypoint = _json_or_shell(step.args)
        elif step.op == "CMD":
            stage.cmd = _json_or_shell(step.args)
        else:
            raise AssertionError(f"this test does not know Dockerfile instruction {step.op}")
    assert stage is not None
    return stage


def _world_traversable(path: pathlib.Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Stage:
    work = tmp_path_factory.mktemp("docker")
    work.chmod(0o755)
    context = work / "context"
    context.mkdir()
    shutil.copytree(REPO / "operator", context / "operator", ignore=IGNORED)
    # The base image's `python`, played by this interpreter (same minor version, checked below).
    shim = work / "shim"
    shim.mkdir()
    (shim / "python").symlink_to(sys.executable)
    stages = work / "stages"
    stages.mkdir()
    final = play(DOCKERFILE, context, stages, shim)
    # The final stage's filesystem is all the image has: remove every other stage.
    for other in stages.iterdir():
        if other != final.root:
            shutil.rmtree(other)
    shutil.rmtree(context)
    return final


def _run_entrypoint(final: Stage, *args: str) -> subprocess.CompletedProcess:
    command = [*final.entrypoint, *args]
    env = final.host_env(final.root / "no-shim")
    executable = shutil.which(command[0], path=env["PATH"])
    assert executable and executable.startswith(str(final.root)), f"{command[0]} is not in the image: {executable}"
    kwargs = {}
    uid, _, gid = final.user.partition(":")
    if os.geteuid() == 0 and uid.isdigit() and _world_traversable(pathlib.Path(sys.base_prefix)):
        kwargs = {"user": int(uid), "group": int(gid or uid), "extra_groups": []}
    return subprocess.run([executable, *command[1:]], cwd=final.root, env=env, capture_output=True, text=True,
                          timeout=120, **kwargs)


def test_dockerfile_is_pinned_and_non_root():
    steps = parse(DOCKERFILE.read_text())
    bases = [substitute(s.args, global_args(steps)).split()[0] for s in steps if s.op == "FROM"]
    assert bases and all(re.search(r":\d+\.\d+\.\d+", b) or "@sha256:" in b for b in bases), bases
    minor = re.search(r"python:(\d+\.\d+)", bases[-1]).group(1)
    assert minor == f"{sys.version_info.major}.{sys.version_info.minor}", \
        f"the test plays the base image's Python {minor} with {sys.version}"
    users = [s.args for s in steps if s.op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_entrypoint_runs_from_the_installed_image(image):
    assert image.entrypoint == ["switchyard"]
    assert image.cmd == ["run"]
    assert {8080, 8081} <= set(image.exposed)
    assert not (image.root / "src").exists(), "the final stage must not carry the build context"
    top = _run_entrypoint(image, "--help")
    assert top.returncode == 0, top.stderr
    for command in ("run", "plan", "render", "exporter"):
        assert command in top.stdout
    run = _run_entrypoint(image, "run", "--help")
    assert run.returncode == 0, run.stderr
    for flag in ("--metrics-port", "--health-port", "--namespace", "--kubeconfig"):
        assert flag in run.stdout
    exporter = _run_entrypoint(image, "exporter", "--help")
    assert exporter.returncode == 0 and "--pool" in exporter.stdout, exporter.stderr


def test_the_image_holds_no_test_tooling(image):
    """Only what runs: the test extras (pytest, the dashboard SDK) stay out of the image."""
    site = next(image.root.glob("opt/*/lib/python3*/site-packages"))
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert "switchyard" in installed and "kopf" in installed
    assert not installed & {"pytest", "hypothesis", "grafana_foundation_sdk"}
