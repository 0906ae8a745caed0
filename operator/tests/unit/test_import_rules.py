"""The house rules of the code, checked on its imports and calls (docs/architecture.md).

- Every module of switchyard imports only what its row of the table allows
  (switchyard/generate/layout.py, from which `make generate` writes the table in
  docs/architecture.md), or one of the exemptions listed there with its reason.
- The pure core (api, topology, planner, builders, xrootd rendering, desired
  state, and the small pure modules beside them) imports neither kopf nor the
  kubernetes client, nor the apply module, nor a handler: it runs without a
  cluster, and its tests need none.
- No module uses the kubernetes client library (switchyard.kubeconfig finds the
  API server; only apply.py opens connections to it), and only apply.py sends a
  writing request (POST, PUT, PATCH, DELETE) to the API server.
- The builders and metrics.py do not import the exporter's runtime.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from switchyard.generate.layout import ANY, EXEMPTIONS, RULES, Rule

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "switchyard"
PURE = ["api", "topology.py", "planner", "builders", "xrootd", "desired", "conditions.py", "rampup.py",
        "policy/hostpaths.py", "policy/imagepolicy.py", "policy/settings.py", "observe/exporterspec.py",
        "observe/cachedisk.py", "observe/initreports.py", "observe/drift.py", "observe/fileload.py", "cli/render.py",
        "gateway/manifests.py", "gateway/options.py"]
FORBIDDEN_IN_PURE = ("kopf", "kubernetes", "switchyard.apply", "switchyard.handlers", "urllib3")


def modules(*parts: str) -> list[pathlib.Path]:
    out = []
    for part in parts:
        path = PACKAGE / part
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def _imports(path: pathlib.Path):
    """(module, the names imported from it; none for `import module`) of every import in `path`,
    relative imports resolved."""
    package = ["switchyard", *path.relative_to(PACKAGE).parent.parts]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            yield ".".join([*base, node.module] if node.module else base), tuple(a.name for a in node.names)


def imported(path: pathlib.Path) -> set[str]:
    """Absolute names of every module `path` imports (relative imports resolved)."""
    names = set()
    for module, aliases in _imports(path):
        names.add(module)
        names.update(f"{module}.{alias}" for alias in aliases)
    return names


@pytest.mark.parametrize("path", modules(*PURE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_pure_core_never_imports_the_client_kopf_apply_or_a_handler(path):
    bad = sorted(name for name in imported(path) for prefix in FORBIDDEN_IN_PURE
                 if name == prefix or name.startswith(prefix + "."))
    assert bad == [], f"{path.name} imports {bad}"


def test_no_module_uses_the_kubernetes_library_and_only_apply_opens_connections():
    def users(library: str) -> list[str]:
        return [str(p.relative_to(PACKAGE)) for p in modules(".")
                if any(n == library or n.startswith(library + ".") for n in imported(p))]
    assert users("kubernetes") == []
    assert users("switchyard.kubeconfig") == ["apply.py"]


WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def _writing_requests(path: pathlib.Path) -> list[int]:
    """Lines where `path` calls something.request(<a writing verb>, ...)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "request" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in WRITES:
            lines.append(node.lineno)
    return lines


def test_only_apply_sends_writing_requests():
    writers = {str(p.relative_to(PACKAGE)): lines for p in modules(".") if (lines := _writing_requests(p))}
    assert list(writers) == ["apply.py"], writers


def test_the_rule_checkers_see_what_they_look_for():
    # The checks above must be able to fail: they find the connection in apply.py, and the
    # writing calls there, and a forbidden import when one is written.
    assert _writing_requests(PACKAGE / "apply.py")
    assert "switchyard.kubeconfig" in imported(PACKAGE / "apply.py")
    assert "kubernetes_asyncio" in imported(PACKAGE / "gateway" / "backend.py")
    assert "switchyard.apply.Kube" in imported(PACKAGE / "handlers" / "client.py")


@pytest.mark.parametrize("path", modules("builders", "observe/metrics.py"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_builders_and_metrics_do_not_import_the_exporter_runtime(path):
    exporter = "switchyard.observe.exporter"
    assert not any(n == exporter or n.startswith(exporter + ".") for n in imported(path))


def test_only_the_gateway_backend_uses_the_async_client():
    # The dask-gateway backend runs inside dask-gateway-server (an asyncio server), not the
    # operator: it talks to the API server with the gateway's own async client, alone.
    users = [str(p.relative_to(PACKAGE)) for p in modules(".")
             if any(n == "kubernetes_asyncio" or n.startswith("kubernetes_asyncio.") for n in imported(p))]
    assert users == ["gateway/backend.py"]


def _module_file(dotted: str) -> str | None:
    """switchyard.a.b -> "a/b.py" or "a/b/__init__.py"; None for a name that is not a module."""
    path = PACKAGE.joinpath(*dotted.split(".")[1:])
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if path != PACKAGE and candidate.is_file():
            return str(candidate.relative_to(PACKAGE))
    return None


def imported_modules(path: pathlib.Path) -> set[str]:
    """The modules of switchyard `path` imports, as paths; `from pkg import module` imports that module."""
    out = set()
    for module, aliases in _imports(path):
        if module == "switchyard" or module.startswith("switchyard."):
            submodules = {_module_file(f"{module}.{alias}") for alias in aliases} - {None}
            out.update(submodules if len(submodules) == len(aliases) > 0 else {*submodules, _module_file(module)})
    return out - {None, str(path.relative_to(PACKAGE))}


def _covers(unit: str, module: str) -> bool:
    return module.startswith(unit) if unit.endswith("/") else module == unit


def row_of(module: str) -> Rule:
    rows = [rule for rule in RULES if any(_covers(u, module) for u in rule.units)]
    assert len(rows) == 1, f"{module}: {len(rows)} rows of the table name it (switchyard/generate/layout.py)"
    return rows[0]


def table_breaks(edges) -> list[tuple[str, str]]:
    """(importer, imported) pairs the table does not allow; the package's own __init__ is neutral."""
    out = []
    for importer, imported in edges:
        rule = row_of(importer)
        allowed = (*rule.units, *rule.may_import)
        if imported != "__init__.py" and ANY not in allowed and not any(_covers(u, imported) for u in allowed):
            out.append((importer, imported))
    return out


def package_imports() -> list[tuple[str, str]]:
    return sorted((str(p.relative_to(PACKAGE)), m) for p in modules(".") for m in imported_modules(p)
                  if p != PACKAGE / "__init__.py")


EXEMPT = {(e.importer, e.imported) for e in EXEMPTIONS}


def test_every_module_has_one_row_of_the_table():
    for path in modules("."):
        if path != PACKAGE / "__init__.py":
            row_of(str(path.relative_to(PACKAGE)))


def test_every_import_follows_the_table():
    breaks = [edge for edge in table_breaks(package_imports()) if edge not in EXEMPT]
    assert breaks == [], "allow it in switchyard/generate/layout.py (then make generate), or move the code"


def test_every_exemption_is_still_needed():
    assert sorted(EXEMPT - set(table_breaks(package_imports()))) == []


def test_the_table_check_finds_a_planted_break():
    assert "planner/__init__.py" in imported_modules(PACKAGE / "desired" / "facility.py")
    assert "conditions.py" in imported_modules(PACKAGE / "policy/hostpaths.py")  # from .. import conditions as cond
    planted = [("builders/facility.py", "planner/__init__.py"), ("api/base.py", "topology.py"),
               ("gateway/manifests.py", "builders/workerfleet.py"), ("routing/rule.py", "planner/solver.py")]
    kept = [("desired/facility.py", "planner/__init__.py"), ("gateway/manifests.py", "builders/common.py"),
            ("routing/rule.py", "planner/hashing.py"), ("cli/__init__.py", "handlers/__init__.py")]
    assert table_breaks(planted + kept) == planted
