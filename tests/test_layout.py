"""The house rules, read from the source with `ast`: imports run one way between the packages, the torch-free
packages import no torch, Ray or Horovod at module level, and each shared constant is defined once."""

import ast
import tomllib
from pathlib import Path

import pytest

from runtime.logs import PROJECT_LOGGERS
from tests.helpers import REPO

MAY_IMPORT = {
    "contract": set(),
    "runtime": {"contract"},
    "analysis": {"contract", "runtime"},
    "workload": {"contract", "runtime"},
    "native_ddp": {"contract", "runtime", "workload"},
    "horovod_ddp": {"contract", "runtime", "workload"},
    "cluster": {"contract", "runtime", "workload"},
    "launchers": {"contract", "runtime", "workload", "native_ddp", "horovod_ddp", "cluster"},
    "experiments": {"contract", "runtime", "workload", "native_ddp", "horovod_ddp", "cluster", "launchers",
                    "analysis"},
    "ray_jobs": {"contract", "runtime", "workload", "native_ddp", "horovod_ddp", "cluster", "launchers", "analysis",
                 "experiments"},
}
"""The packages each package may import besides itself: the torch-free contract ← what every process runs by ←
workload ← the backends ← the cluster parts and launchers ← the experiments ← the commands; the analysis imports
the contract and the runtime alone."""
TORCH_FREE = ("contract", "runtime", "analysis")
HEAVY = ("torch", "torchvision", "ray", "horovod")


WITHIN_EXPERIMENTS = {"simulated_cluster": set(), "elastic": {"simulated_cluster"}, "gpu_model": set()}
"""experiments/' packages, one a question, and which of the others each may import: losing a node happens on the
simulated cluster; the GPU model stands alone."""


def modules() -> list[Path]:
    return sorted(path for package in MAY_IMPORT for path in (REPO / package).rglob("*.py"))


def side(path: Path) -> str:
    """The package a module belongs to: its top-level folder."""
    return path.relative_to(REPO).parts[0]


def imported(node: ast.AST) -> list[str]:
    """The top-level names an import statement imports from (relative imports are not used here)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module.split(".")[0]]
    return []


def module_level(tree: ast.Module) -> list[ast.AST]:
    """Statements that run when the module is imported: the body, and inside if/try/with at that level, not inside
    functions or classes' methods."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    return out


def test_every_package_is_known_to_the_rules_the_logging_and_the_packaging():
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")} - {"tests", "tools"}
    assert packages == set(MAY_IMPORT)
    assert packages <= set(PROJECT_LOGGERS)
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {name.rstrip("*") for name in include} == packages


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(REPO)))
def test_imports_run_one_way(path):
    package = side(path)
    allowed = MAY_IMPORT[package] | {package}
    tree = ast.parse(path.read_text())
    wrong = sorted({name for node in ast.walk(tree) for name in imported(node)
                    if name in MAY_IMPORT and name not in allowed})
    assert not wrong, f"{path.relative_to(REPO)} imports {', '.join(wrong)}, which {package} may not import"


def test_experiments_holds_one_package_a_question_and_they_import_one_way():
    found = {path.parent.name for path in (REPO / "experiments").glob("*/__init__.py")}
    assert found == set(WITHIN_EXPERIMENTS) and not [p for p in (REPO / "experiments").glob("*.py")
                                                      if p.name != "__init__.py"]
    wrong = []
    for package, allowed in WITHIN_EXPERIMENTS.items():
        for path in (REPO / "experiments" / package).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("experiments."):
                    other = node.module.split(".")[1]
                    if other not in allowed | {package}:
                        wrong.append(f"{path.relative_to(REPO)} imports experiments.{other}")
    assert not wrong, wrong


@pytest.mark.parametrize("path", [p for p in modules() if side(p) in TORCH_FREE],
                         ids=lambda path: str(path.relative_to(REPO)))
def test_torch_free_packages_import_no_framework_at_module_level(path):
    tree = ast.parse(path.read_text())
    heavy = sorted({name for node in module_level(tree) for name in imported(node) if name in HEAVY})
    assert not heavy, f"{path.relative_to(REPO)} imports {', '.join(heavy)} when it is imported"


def test_the_backend_names_are_defined_once():
    backends = ("native", "horovod")
    where = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts) and \
                    tuple(e.value for e in node.elts) == backends:
                where.append(f"{path.relative_to(REPO)}:{node.lineno}")
    defined = next(node.lineno for node in ast.parse((REPO / "contract/config.py").read_text()).body
                   if isinstance(node, ast.Assign) and node.targets[0].id == "BACKENDS")
    assert where == [f"contract/config.py:{defined}"], where


def test_no_two_modules_define_the_same_collection():
    """A tuple, list, set or dict of literals assigned at module level stands in one module; others import it."""
    seen: dict[str, str] = {}
    twice = []
    for path in modules():
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(
                    node.value, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                continue
            try:
                value = repr(ast.literal_eval(node.value))
            except ValueError:
                continue  # built from other names
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if value in seen and len(ast.literal_eval(node.value)) > 1:
                twice.append(f"{value} at {seen[value]} and {where}")
            seen.setdefault(value, where)
    assert not twice, twice


MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_sixty_lines():
    """Every function of the project, tools included, reads on one screen."""
    paths = modules() + sorted((REPO / "tools").glob("*.py"))
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in paths for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


def test_no_module_imports_a_private_module_of_ray_but_the_two_the_readme_counts():
    """Ray through its public interface: the places where Ray has none are named in docs/architecture.md."""
    private = [f"{path.relative_to(REPO)}:{node.lineno}" for path in modules()
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.Import, ast.ImportFrom))
               and any(part.startswith("_") for name in ([node.module or ""] if isinstance(node, ast.ImportFrom)
                                                         else [a.name for a in node.names])
                       if name.startswith("ray.") for part in name.split("."))]
    assert [where.split(":")[0] for where in private] == ["cluster/ray_address.py", "cluster/worker_output.py",
                                                          "cluster/worker_output.py"], private
