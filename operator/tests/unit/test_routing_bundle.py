"""The routing client in any image: `switchyard copy-routing` and the image check, run as the pods run them.

Each Python here is started with -S (no site-packages): switchyard, fsspec-xrootd or the XRootD
bindings are importable only from the directories a test puts on PYTHONPATH.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from switchyard.planner import hashing
from switchyard.routing import check
from switchyard.routing.bundle import copy_routing, files


def bare_python(code: str, *path: Path, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`code` (or `-m module` when args are given) in a Python without site-packages, PYTHONPATH = `path`."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    argv = [sys.executable, "-S", *args] if args else [sys.executable, "-S", "-c", code]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def copied(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("routing-client")
    from switchyard.cli import main

    assert main(["copy-routing", str(dest)]) == 0
    return dest


def test_the_copy_is_the_routing_package_and_the_rule_file_only(copied):
    written = sorted(str(p.relative_to(copied)) for p in copied.rglob("*") if p.is_file())
    assert written == sorted(["switchyard/__init__.py", *(relative for _, relative in files())])
    assert "switchyard/planner/hashing.py" in written and "switchyard/planner/__init__.py" not in written
    assert all(p.startswith(("switchyard/routing/", "switchyard/planner/hashing.py", "switchyard/__init__"))
               for p in written)
    # readable by the worker's user, which is not the copy's
    assert all(p.stat().st_mode & 0o004 for p in copied.rglob("*"))


def test_a_python_without_switchyard_routes_with_the_copy_by_the_planners_rule(copied):
    assert bare_python("import switchyard").returncode != 0  # the bare Python really has none
    ring = {"sw1-c-0": 1.0, "sw2-c-0": 2.0, "sw3-c-0": 0.5}
    code = ("import json, switchyard, switchyard.routing as r, switchyard.routing.hooks, switchyard.routing.rule as rule\n"
            f"h = rule.hashing()\n"
            f"print(json.dumps([switchyard.__file__, r.__file__, h.__file__, "
            f"[h.home(f'/store/f{{i}}.root', {ring!r}) for i in range(20)]]))")
    ran = bare_python(code, copied)
    assert ran.returncode == 0, ran.stderr
    import json

    init, package, rule_file, homes = json.loads(ran.stdout)
    assert all(Path(p).is_relative_to(copied) for p in (init, package, rule_file))
    assert homes == [hashing.home(f"/store/f{i}.root", ring) for i in range(20)]


def test_an_installed_switchyard_keeps_its_other_modules_but_routes_with_the_operators_copy(copied, tmp_path):
    site = tmp_path / "site"
    (site / "switchyard" / "routing").mkdir(parents=True)
    (site / "switchyard" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (site / "switchyard" / "cli.py").write_text("WHO = 'the image'\n")
    (site / "switchyard" / "routing" / "__init__.py").write_text("STALE = True\n")
    code = ("import switchyard.cli, switchyard.routing as r\n"
            "print(switchyard.cli.WHO, hasattr(r, 'STALE'), hasattr(r, 'Router'))")
    ran = bare_python(code, copied, site)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["the", "image", "False", "True"]


def test_the_copy_parses_on_the_oldest_python_an_analysis_image_may_have():
    for source, relative in files():
        ast.parse(source.read_text(), relative, feature_version=(3, 9))


# ------------------------------------------------------------------ the image check
def stub(root: Path, module: str, body: str = "") -> None:
    """A stand-in package for `module` (dotted: its parents too) under root."""
    path = root
    for part in module.split("."):
        path = path / part
        path.mkdir(exist_ok=True)
        (path / "__init__.py").touch()
    (path / "__init__.py").write_text(body)


def run_check(copied: Path, stubs: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "termination-log"
    ran = bare_python("", copied, stubs, args=("-m", "switchyard.routing.check", "--termination-log", str(log)))
    return ran, log.read_text()


@pytest.mark.parametrize("present, routes, lacks", [
    ((), False, ["the XRootD Python bindings (XRootD.client)", "fsspec-xrootd"]),
    (("XRootD.client",), False, ["fsspec-xrootd"]),
    (("fsspec_xrootd",), False, ["the XRootD Python bindings (XRootD.client)"]),
    (("XRootD.client", "fsspec_xrootd"), True, []),
    (("XRootD.client", "fsspec_xrootd", "uproot"), True, []),
], ids=["nothing", "bindings-only", "fsspec-xrootd-only", "both", "both-and-uproot"])
def test_the_check_names_what_the_image_lacks_and_always_exits_0(copied, tmp_path, present, routes, lacks):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for module in present:
        stub(stubs, module)
    ran, message = run_check(copied, stubs, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert message == ran.stdout.strip() and "\n" not in message
    verdict = check.parse(message)
    assert verdict is not None and verdict.routes is routes, message
    for what in lacks:
        assert what in verdict.detail
    if routes:
        assert message.startswith("RoutingReady: Python 3.") and ("uproot" in message) == ("uproot" in present)
    else:
        assert message.startswith("RoutingUnavailable: ") and message.endswith("reads go to the origin")
        assert "No module named" in message


def test_a_binding_that_fails_to_load_is_named_with_its_error(copied, tmp_path):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    stub(stubs, "XRootD.client", "raise OSError('libXrdCl.so.3: cannot open shared object file')")
    stub(stubs, "fsspec_xrootd")
    ran, message = run_check(copied, stubs, tmp_path)
    assert ran.returncode == 0 and check.parse(message).routes is False
    assert "OSError: libXrdCl.so.3: cannot open shared object file" in message


def test_other_messages_are_no_verdict():
    assert check.parse("") is None and check.parse("Traceback (most recent call last):") is None
    assert check.parse("DiskNotMounted /srv: no") is None
    assert check.parse("RoutingReady: Python 3.12 reads") == check.Verdict(True, "Python 3.12 reads")


def pythons() -> list[Path]:
    """This interpreter, and those of other versions on this machine (pyenv's), as analysis images carry them.
    Each runs the copy with -S (no site-packages: the standard library only, as the bundle promises)."""
    found = {sys.version_info[:2]: Path(sys.executable)}
    for path in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3")):
        minor = tuple(int(p) for p in path.parent.parent.name.split(".")[:2])
        if minor >= (3, 9):  # the oldest docs/admin-guide.md admits
            found[minor] = path
    return [found[minor] for minor in sorted(found)]


def version_of(python: Path) -> str:
    return subprocess.run([str(python), "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.parametrize("python", pythons(), ids=version_of)
def test_the_copy_routes_by_the_planners_rule_on_every_python_here(copied, python):
    ring = "a@root://10.0.0.1:1094=1,b@root://10.0.0.2:1094=2,c@root://10.0.0.3:1094=0.5"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(copied), "SWITCHYARD_ROUTING": "hashed",
           "SWITCHYARD_HASH_RULE": "rendezvous-sha256-v1", "SWITCHYARD_CACHE_RING": ring}
    urls = [f"root://origin//store/f{i}.root" for i in range(12)]
    ran = subprocess.run([str(python), "-S", "-m", "switchyard.routing.cli", *urls], env=env, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    homes = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
    expected = [f"root://{homes[hashing.home(f'/store/f{i}.root', {'a': 1, 'b': 2, 'c': 0.5})]}:1094//store/f{i}.root"
                for i in range(12)]
    assert ran.stdout.split() == expected
    checked = subprocess.run([str(python), "-S", "-m", "switchyard.routing.check", "--termination-log", os.devnull],
                             env=env, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "a switchyard.routing that runs on it" not in checked.stdout, checked.stdout
