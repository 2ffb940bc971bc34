"""The layers of docs/architecture.md, checked on the imports: a module imports only its own
layer or the layers below it, and the three estimators -- memory, cost and the time model
(compute and comm, composed by timing) -- never import one another (shapes.py is the shared,
non-estimator module they may all import)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"

# module path prefix (relative to src/gpuplan, without .py) -> layer
LAYERS = {
    "units": 0, "errors": 0,
    "spec": 1, "rules": 1,
    "catalog": 2, "workload": 2, "prices": 2, "userfile": 2,
    "estimators": 3,
    "search": 4, "api": 4,
    "report": 5, "export": 5, "validation": 5, "validation_finetune": 5,
    "validation_memory": 5, "calibrate": 5,
    "cli": 6, "web": 6, "__main__": 6,
}
ESTIMATORS = {"memory": "memory", "activations": "memory", "memory_one": "memory", "cost": "cost",
              "compute": "time",
              "comm": "time", "dp_comm": "time", "timing": "time", "timing_one": "time",
              "shapes_one": "time"}


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise AssertionError(f"module {module} has no layer in tests/test_layers.py")


def _modules():
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            yield ".".join(parts), path, path.name == "__init__.py"


def _imports(module: str, path: Path, is_pkg: bool):
    """Internal imports of a module (absolute names relative to gpuplan)."""
    package = module.split(".") if is_pkg else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}".strip(".")
                                                        for a in node.names]
            elif (node.module or "").startswith("gpuplan"):
                names = [node.module.removeprefix("gpuplan").lstrip(".")]
            else:
                continue
            yield from (n for n in names if n)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gpuplan."):
                    yield a.name.removeprefix("gpuplan.")


def test_every_import_goes_down_the_layers():
    bad = []
    for module, path, is_pkg in _modules():
        if module in ("", "__init__"):
            continue
        for target in _imports(module, path, is_pkg):
            if target.split(".")[0] in ("", "__init__", "__version__"):
                continue
            if _layer(target) > _layer(module):
                bad.append(f"{module} (L{_layer(module)}) imports {target} (L{_layer(target)})")
    assert bad == []


def test_estimators_never_import_one_another():
    bad = []
    for module, path, is_pkg in _modules():
        parts = module.split(".")
        if parts[0] != "estimators" or len(parts) < 2 or parts[1] not in ESTIMATORS:
            continue
        for target in _imports(module, path, is_pkg):
            t = target.split(".")
            if (t[0] == "estimators" and len(t) > 1 and t[1] in ESTIMATORS
                    and ESTIMATORS[t[1]] != ESTIMATORS[parts[1]]):
                bad.append(f"{module} imports {target}")
    assert bad == []
