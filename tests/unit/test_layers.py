"""The package's layers, written down once, and an AST walk that holds every module to them: an import of a
higher layer, or of Dagster below the Dagster layer, fails here in milliseconds (no module is imported).

Every import counts, the ones inside functions and under ``TYPE_CHECKING`` too: they are dependencies all
the same."""

import ast
from pathlib import Path

import marin_pipelines

PACKAGE = "marin_pipelines"
# low to high: a module may import its own layer and the ones below it
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "cpu_limit", "lease", "config_errors", "orphans"),
    ("engine", "store", "documents", "launch_config", "stdlib_material"),
    # the core library
    ("crawl", "text", "quality", "tokenize", "train", "inference", "serving", "evals", "scaling", "sweeps"),
    ("steps", "step_runner", "experiment", "execution_record"),
    ("stages",),
    ("experiments", "process_crawl", "forecast"),
    ("resources", "defs", "definitions"),  # Dagster
    ("summary", "cli"),
)
LAYER = {name: level for level, names in enumerate(LAYERS) for name in names}
DAGSTER_FROM = LAYER["defs"]  # the layers below never import Dagster (dagster, dagster_pipes, ...)


def from_module(module: str, node: ast.ImportFrom) -> str:
    """The absolute name a ``from`` import in ``module`` reads from (a package's module is ``X.__init__``)."""
    if not node.level:
        return node.module or ""
    anchor = module.split(".")[: -node.level]
    return ".".join([*anchor, node.module] if node.module else anchor)


def imported(module: str, source: str) -> list[str]:
    """The absolute names ``module``'s source imports, in line order."""
    nodes = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import | ast.ImportFrom)]
    names = []
    for node in sorted(nodes, key=lambda node: node.lineno):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        else:
            base = from_module(module, node)
            # `from marin_pipelines import steps` imports the module marin_pipelines.steps
            names += [f"{base}.{alias.name}" for alias in node.names] if base == PACKAGE else [base]
    return names


def layer_of(module: str) -> int:
    """The layer of ``marin_pipelines.X...``, by X; a module in no layer is an error asking for one."""
    part = module.split(".")[1] if "." in module else "__init__"  # `import marin_pipelines`: its __init__
    if part not in LAYER:
        raise AssertionError(f"{module} is in no layer: add {part!r} to LAYERS in {__file__}")
    return LAYER[part]


def violations(module: str, source: str) -> list[str]:
    """What ``module`` imports against the layers, one line each."""
    level, found = layer_of(module), []
    for name in imported(module, source):
        top = name.split(".")[0]
        if (top == "dagster" or top.startswith("dagster_")) and level < DAGSTER_FROM:
            found.append(f"{module} imports {name}: Dagster, below the Dagster layer")
        elif top == PACKAGE and name != PACKAGE and layer_of(name) > level:
            found.append(f"{module} (layer {level}) imports {name} (layer {layer_of(name)})")
    return found


def tree_violations(root: Path) -> list[str]:
    """Every module under the package folder ``root``, checked."""
    return [line for module, source in sorted(modules(root).items()) for line in violations(module, source)]


def modules(root: Path) -> dict[str, str]:
    """Module name -> source, for every module under the package folder ``root``."""
    return {
        ".".join(p.relative_to(root.parent).with_suffix("").parts): p.read_text() for p in root.rglob("*.py")
    }


def mutual_imports(root: Path) -> list[tuple[str, str]]:
    """Pairs of modules that import each other (``from A import b`` counts module A.b when there is one)."""
    sources = modules(root)

    def module(name: str) -> str | None:
        return next((m for m in (name, f"{name}.__init__") if m in sources), None)

    edges = {}
    for name, source in sources.items():
        targets = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                base = from_module(name, node)
                targets |= {module(base), *(module(f"{base}.{alias.name}") for alias in node.names)}
            elif isinstance(node, ast.Import):
                targets |= {module(alias.name) for alias in node.names}
        edges[name] = targets - {None, name}
    return sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))


def test_every_module_keeps_to_its_layer():
    root = Path(marin_pipelines.__file__).parent
    assert len(list(root.rglob("*.py"))) > 100  # the walk sees the package
    assert tree_violations(root) == []


def test_the_core_library_importing_dagster_or_a_higher_layer_fails(tmp_path):
    root = tmp_path / PACKAGE
    (root / "train").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "store.py").write_text("from marin_pipelines.steps import Step\n")
    (root / "train" / "__init__.py").write_text("")
    (root / "train" / "trainer.py").write_text(
        "import jax\nfrom marin_pipelines.tokenize import tokenizer\n"  # allowed: third party, same layer
        "def run():\n    from dagster import asset\n"
        "from .. import cli\nfrom ..resources.launcher import LauncherResource\n"
        "import marin_pipelines.stages\n"
    )
    assert tree_violations(root) == [
        "marin_pipelines.store (layer 1) imports marin_pipelines.steps (layer 3)",
        "marin_pipelines.train.trainer imports dagster: Dagster, below the Dagster layer",
        "marin_pipelines.train.trainer (layer 2) imports marin_pipelines.cli (layer 7)",
        "marin_pipelines.train.trainer (layer 2) imports marin_pipelines.resources.launcher (layer 6)",
        "marin_pipelines.train.trainer (layer 2) imports marin_pipelines.stages (layer 4)",
    ]
    (root / "train" / "__init__.py").write_text("from ..defs import step_assets\n")  # a package's own
    assert (
        "marin_pipelines.train.__init__ (layer 2) imports marin_pipelines.defs (layer 6)"
        in tree_violations(root)
    )


def test_the_layers_above_may_import_the_ones_below():
    source = "import dagster\nfrom marin_pipelines.train.trainer import train\nfrom . import step_assets\n"
    assert violations("marin_pipelines.defs.resources", source) == []
    assert violations("marin_pipelines.cli.train", "from marin_pipelines.defs import local_run\n") == []
    assert violations("marin_pipelines.stages.train", "import dagster_pipes\n") == [
        "marin_pipelines.stages.train imports dagster_pipes: Dagster, below the Dagster layer"
    ]


def test_no_two_modules_import_each_other(tmp_path):
    assert mutual_imports(Path(marin_pipelines.__file__).parent) == []
    root = tmp_path / PACKAGE / "cli"
    root.mkdir(parents=True)
    (root / "demo.py").write_text(
        "def run():\n    from marin_pipelines.cli.experiment import run_experiments\n"
    )
    (root / "experiment.py").write_text("from marin_pipelines.cli import demo\n")
    assert mutual_imports(root.parent) == [("marin_pipelines.cli.demo", "marin_pipelines.cli.experiment")]


def test_tokenize_reads_no_crawl_module():
    """Within the core library, data flows crawl -> text -> tokenize: what both need lives below them."""
    root = Path(marin_pipelines.__file__).parent
    found = [
        f"{module} imports {name}"
        for module, source in modules(root).items()
        if module.startswith(f"{PACKAGE}.tokenize.")
        for name in imported(module, source)
        if name.startswith(f"{PACKAGE}.crawl")
    ]
    assert found == []
    assert imported("marin_pipelines.tokenize.x", "from marin_pipelines.crawl import demo_crawl\n") == [
        "marin_pipelines.crawl"
    ]
