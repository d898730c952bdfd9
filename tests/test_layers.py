"""The floors of the layout: a module imports only the floors below its own (and its own).

core (shared contracts) < data_pipeline (data, and the pretrained encoders the env and the router
share) < rewards < envs < router < generator < evaluation. There are no exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {"core": 0, "data_pipeline": 1, "rewards": 2, "envs": 3, "router": 4, "generator": 5, "evaluation": 6}


def upward_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    """``(file, imported module)`` for every import, lazy ones inside functions too, of a higher floor."""
    found = set()
    for pkg, floor in FLOORS.items():
        for path in (root / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
                for name in names:
                    top = name.split(".")[0]
                    if FLOORS.get(top, -1) > floor:
                        found.add((path.relative_to(root).as_posix(), name))
    return found


def test_no_module_imports_a_floor_above_it() -> None:
    assert upward_imports() == set()


def test_the_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "feat.py").write_text("def f():\n    from router.model import RouterModel\n    import generator\n")
    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "ok.py").write_text("import envs\nfrom core.schema import Schema\n")
    assert upward_imports(tmp_path) == {("envs/feat.py", "router.model"), ("envs/feat.py", "generator")}
