"""The house rules of the code, checked on its imports and calls (docs/architecture.md).

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

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "switchyard"
PURE = ["api", "topology.py", "planner", "builders", "xrootd", "desired", "conditions.py", "hostpaths.py",
        "imagepolicy.py", "settings.py", "exporterspec.py", "cachedisk.py", "initreports.py", "drift.py", "rampup.py",
        "render.py", "gateway/manifests.py", "gateway/options.py"]
FORBIDDEN_IN_PURE = ("kopf", "kubernetes", "switchyard.apply", "switchyard.handlers", "urllib3")


def modules(*parts: str) -> list[pathlib.Path]:
    out = []
    for part in parts:
        path = PACKAGE / part
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def imported(path: pathlib.Path) -> set[str]:
    """Absolute names of every module `path` imports (relative imports resolved)."""
    package = ["switchyard", *path.relative_to(PACKAGE).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
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


@pytest.mark.parametrize("path", modules("builders", "metrics.py"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_builders_and_metrics_do_not_import_the_exporter_runtime(path):
    assert not any(n == "switchyard.exporter" or n.startswith("switchyard.exporter.") for n in imported(path))


def test_only_the_gateway_backend_uses_the_async_client():
    # The dask-gateway backend runs inside dask-gateway-server (an asyncio server), not the
    # operator: it talks to the API server with the gateway's own async client, alone.
    users = [str(p.relative_to(PACKAGE)) for p in modules(".")
             if any(n == "kubernetes_asyncio" or n.startswith("kubernetes_asyncio.") for n in imported(p))]
    assert users == ["gateway/backend.py"]
