"""Every condition and event reason comes from the registry, switchyard.api.reasons.

The reasons are found with `ast` where the code writes them: the first argument
of `conditions.failed`/`progressing`, `Unsatisfiable` and `Blocked`, the second
of `State`, `refused_fleet_plan`'s third, any `reason=` keyword, a dict's
"reason" key, the side compared with something's `.reason` / `["reason"]` /
`.get("reason")`, an event tuple ("Warning"/"Normal", reason, message), a
(reason, message) pair and an assignment to a name with REASON in it. A string
written in one of those places fails, registered or not: the registry is the one
place that spells a reason. So does a `reasons.NAME` the registry lacks (it would
raise only when its line runs), a registered reason written as a literal anywhere
else, and a registered reason nothing uses.
"""

from __future__ import annotations

import ast
import pathlib
import re

from switchyard.api import KINDS_BY_NAME, reasons

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "switchyard"
REGISTRY_FILE = PACKAGE / "api" / "reasons.py"
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+$")
# callee name -> the index of its reason argument
REASON_ARGUMENT = {"failed": 0, "progressing": 0, "Unsatisfiable": 0, "Blocked": 0, "State": 1,
                   "refused_fleet_plan": 2}
CONDITION_TYPES = {"Ready", "Progressing", "Degraded"}
# (module, literal): the same word as a reason, and why it is not one
NOT_REASONS = {
    ("cacheprepare.py", "DiskNotMounted"): "the marker the cache's prepare init container writes in its termination "
                                           "message (standard library only: it cannot import the registry)",
    ("routing/check.py", "RoutingUnavailable"): "the routing-check verdict's marker (routing/ runs in worker images, "
                                                "alone)",
    ("s3/client.py", "AccessDenied"): "an S3 error code",
    ("s3/__init__.py", "S3Error"): "the exception class, in __all__",
}
CONSTANTS = {name: value for name, value in vars(reasons).items() if name.isupper() and isinstance(value, str)}


def _callee(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _is_reason_of_something(node: ast.expr) -> bool:
    """x.reason, x["reason"], x.get("reason")."""
    if isinstance(node, ast.Attribute):
        return node.attr == "reason"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "reason"
    return isinstance(node, ast.Call) and _callee(node.func) == "get" and bool(node.args) \
        and isinstance(node.args[0], ast.Constant) and node.args[0].value == "reason"


def _is_word(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(CAMEL.match(node.value))


def _branches(node: ast.expr):
    """`a if c else b` and `a or b` write a or b."""
    if isinstance(node, ast.IfExp):
        yield from (*_branches(node.body), *_branches(node.orelse))
    elif isinstance(node, ast.BoolOp):
        yield from (b for value in node.values for b in _branches(value))
    else:
        yield node


def reason_positions(tree: ast.AST):
    """Every expression the code writes as a condition's or an event's reason."""
    for position in _positions(tree):
        yield from _branches(position)


def _positions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            index = REASON_ARGUMENT.get(_callee(node.func))
            if index is not None and len(node.args) > index:
                yield node.args[index]
            yield from (k.value for k in node.keywords if k.arg == "reason")
        elif isinstance(node, ast.Dict):
            yield from (v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "reason")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_reason_of_something(s) for s in sides):
                yield from (s for s in sides if not _is_reason_of_something(s))
        elif isinstance(node, ast.Tuple):
            elts = node.elts
            if len(elts) == 3 and isinstance(elts[0], ast.Constant) and elts[0].value in ("Warning", "Normal"):
                yield elts[1]
            # (reason, message); a pair of words (taint effects) or a (kind, name) key is not one
            if len(elts) == 2 and _is_word(elts[0]) and not _is_word(elts[1]) and elts[0].value not in KINDS_BY_NAME:
                yield elts[0]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and "REASON" in t.id for t in targets):
                yield from (node.value.values if isinstance(node.value, ast.Dict) else [node.value])


def _written(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def sources() -> dict[str, ast.AST]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))
            if p != REGISTRY_FILE}


def literal_reasons(trees: dict[str, ast.AST]) -> list[str]:
    return [f"{path}:{node.lineno} {ast.unparse(node)}" for path, tree in trees.items()
            for node in reason_positions(tree) if _written(node)]


def test_no_reason_is_written_as_a_string():
    assert literal_reasons(sources()) == [], "use (or add) a constant of switchyard/api/reasons.py"


def test_every_reason_the_code_names_is_registered():
    unknown = [f"{path}:{node.lineno} reasons.{node.attr}" for path, tree in sources().items()
               for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "reasons"
               and node.attr not in CONSTANTS and node.attr != "REGISTRY"]
    assert unknown == []


def test_a_registered_reason_is_not_spelled_out_elsewhere():
    # Catches a reason written in a place the positions above do not know.
    registered = set(reasons.REGISTRY) - CONDITION_TYPES
    spelled = []
    for path, tree in sources().items():
        docs = _docstrings(tree)
        spelled += [f"{path}:{n.lineno} {n.value}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and n.value in registered and id(n) not in docs
                    and (path, n.value) not in NOT_REASONS]
    assert spelled == []


def test_every_registered_reason_is_used():
    used = {node.attr for tree in sources().values() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "reasons"}
    assert sorted(set(CONSTANTS) - used) == []


def test_the_registry_holds_words_with_a_meaning():
    assert set(CONSTANTS.values()) == set(reasons.REGISTRY)
    for reason in reasons.REGISTRY.values():
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", reason.value) and len(reason.value) <= 64, reason
        assert reason.meaning.endswith(".") and "\n" not in reason.meaning, reason
        assert reason.kinds and set(reason.kinds) <= set("FPWSCL"), reason
        assert reason.condition or reason.event, reason


def test_the_checker_finds_a_reason_written_as_a_string():
    planted = ast.parse('''
cond.failed("Oops", "message")
cond.State(True, "Oops", message)
problems.append(("OopsAgain", f"{n} things"))
refused[name] = ("OopsAgain", message)
cond.State(degraded, reason if degraded else "Oops", message)
events.info(message, reason="Oops")
events = (("Warning", "Oops", message),)
if degraded.get("reason") != "Oops": pass
if states["Ready"].reason == f"Oo{ps}": pass
kube.create({"kind": "Event", "reason": "Oops"})
REASON = "Oops"
REASONS = {"kind": "Oops"}
raise Unsatisfiable("Oops", message)
''')
    found = literal_reasons({"planted.py": planted})
    assert len(found) == 13, found
    clean = ast.parse('REPELLING = ("NoSchedule", "NoExecute")\nkey = ("S3Staging", name)\n'
                      'cond.failed(reasons.INVALID_SPEC, error)\n')
    assert literal_reasons({"clean.py": clean}) == []
