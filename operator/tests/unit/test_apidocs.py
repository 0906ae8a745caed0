"""docs/api.md lists every field of every kind, with what the CRD enforces on it."""

from switchyard.api import KINDS
from switchyard.generate.apidocs import api_markdown
from switchyard.generate.crds import crd


def crd_paths(schema: dict, path: str) -> set[str]:
    """Every field path under `path` in a CRD's schema, as the reference writes them."""
    out = set()
    for name, sub in schema.get("properties", {}).items():
        out |= {f"{path}.{name}"} | crd_paths(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out |= crd_paths(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out |= crd_paths(schema["additionalProperties"], f"{path}.<key>")
    return out


def rows(text: str) -> dict[str, list[str]]:
    """Field path -> the other cells of its row (unescaped enough to compare)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| `spec") or line.startswith("| `status"):
            cells = [c.strip() for c in line.replace("\\|", "\x00").strip("|").split("|")]
            out[cells[0].strip("`")] = [c.replace("\x00", "|") for c in cells[1:]]
    return out


def test_every_field_of_every_crd_has_a_row():
    table = rows(api_markdown())
    for kind in KINDS:
        root = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        missing = (crd_paths(root["spec"], "spec") | crd_paths(root["status"], "status")) - set(table)
        assert not missing, (kind.kind, sorted(missing))
    assert len(table) > 100


def test_a_row_says_what_the_api_server_enforces():
    text = api_markdown()
    table = rows(text)
    kind, default, validation, description = table["spec.cachePools[].serveHeadroom"]
    assert (kind, default, validation) == ("number", "`0.0`", "≥ 0; ≤ 0.5")
    assert description.startswith("Share of serveGbps the planner keeps free")
    assert table["spec.network.switches"][2] == "required; 1–1000 items; unique by `name`"
    # a CEL rule, by its message
    assert "origin.host is required when mode is 'fixed'" in table["spec.cachePools[].origin"][2]
    assert "one of `local`, `hashed`, `auto`" in table["spec.routing"][2]
    assert '`""`' in table["spec.cachePools[].tolerations[].effect"][2]  # the empty value, shown
    assert all(f"## {kind.kind}\n" in text for kind in KINDS)
