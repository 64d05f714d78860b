"""The package's imports, parsed (``ast``): no cycle, and every import points down the layers below, so config
is a leaf and the folder tree is the architecture. ``data_tools`` and ``xpt_ds`` never import each other (their
contract is docs/shard_format.md). Imports inside functions and ``TYPE_CHECKING`` blocks count too."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

# Lowest first. A module may import modules of its own layer or a lower one, never a higher one.
LAYERS = [
    ["xpt_ds.errors"],
    ["xpt_ds.io"],  # files read and written safely: imports nothing of xpt_ds but errors
    ["xpt_ds.config"],
    ["xpt_ds.runtime"],
    ["xpt_ds.data", "xpt_ds.metrics"],
    ["xpt_ds.embedding_init"],
    ["xpt_ds.trelm"],
    ["xpt_ds.model"],
    ["xpt_ds.checkpoint"],
    ["xpt_ds.export"],
    ["xpt_ds.training"],
    ["xpt_ds.evaluation", "xpt_ds.finetuning"],
    ["xpt_ds.sweeps"],
    ["xpt_ds.cli", "xpt_ds.__main__", "xpt_ds"],
]
DATA_TOOLS_LAYERS = [
    ["data_tools.errors"],
    ["data_tools.typed_options", "data_tools.piece_tokenizers"],
    ["data_tools.pipeline"],
    ["data_tools.pairs", "data_tools.embeddings", "data_tools.corpora", "data_tools.vocab_merge"],
    ["data_tools.cli", "data_tools.__main__", "data_tools"],
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path, package: str) -> set[str]:
    """The modules of ``package`` that ``path`` imports, resolved to files: ``from a.b import c`` is ``a.b.c``
    when that is a module, else ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] != package:
                continue
            file = root / name.replace(".", "/")
            if file.with_suffix(".py").is_file() or (file / "__init__.py").is_file():
                found.add(name)
    return found


def import_graph(package: str, root: Path = REPO) -> dict[str, set[str]]:
    graph = {}
    for path in sorted((root / package).rglob("*.py")):
        me = module_name(path, root)
        graph[me] = {m for m in imports_of(path, root, package) if m != me}
    # ``from a.b import c`` where c is a module also imports a.b (its __init__); a submodule does not need that
    # edge to its own package, which would make every package a cycle with its members.
    for me, deps in graph.items():
        deps -= {d for d in deps if me.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer_of(module: str, layers: list[list[str]] = LAYERS) -> int:
    best = None
    for i, prefixes in enumerate(layers):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    assert best is not None, f"{module} is in no layer: add its package to LAYERS"
    return best[0]


def upward(graph: dict[str, set[str]], layers: list[list[str]] = LAYERS) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if layer_of(b, layers) > layer_of(a, layers))


def test_no_import_cycle_and_every_import_points_down():
    graph = import_graph("xpt_ds")
    assert len(graph) > 40
    assert cycles(graph) == []
    assert upward(graph) == []


def test_config_is_a_leaf():
    graph = import_graph("xpt_ds")
    for module, deps in graph.items():
        if module.startswith("xpt_ds.config"):
            # and the whole-file writes of io.paths (the standard library's alone): no builder
            assert all(d.startswith(("xpt_ds.config", "xpt_ds.errors")) or d == "xpt_ds.io.paths" for d in deps), \
                (module, deps)


def test_the_checks_catch_a_back_import():
    """The checker itself: one import from config back into the trainer is both a cycle and an upward edge."""
    graph = import_graph("xpt_ds")
    graph["xpt_ds.config.validate"].add("xpt_ds.training.trainer")
    assert any("xpt_ds.config.validate" in c and "xpt_ds.training.trainer" in c for c in cycles(graph))
    assert upward(graph) == ["xpt_ds.config.validate -> xpt_ds.training.trainer"]


@pytest.mark.parametrize("package, other", [("xpt_ds", "data_tools"), ("data_tools", "xpt_ds")])
def test_xpt_ds_and_data_tools_never_import_each_other(package, other):
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == other for n in names), path


def test_the_library_never_imports_a_study():
    """experiments/ (the studies) imports xpt_ds, never the reverse: the library knows no experiment."""
    def packages(root: str) -> set[str]:
        found = set()
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
        return found

    assert "experiments" not in packages("xpt_ds") | packages("data_tools")
    assert "xpt_ds" in packages("experiments")  # the parse sees the imports it checks


def test_data_tools_has_no_import_cycle():
    assert cycles(import_graph("data_tools")) == []


def test_data_tools_imports_point_down_the_layers():
    """Shared leaves, then the pipeline, then pairs/embeddings/corpora (which never import one another), then the
    commands: the folder tree is data_tools' architecture too."""
    graph = import_graph("data_tools")
    assert len(graph) > 40
    assert upward(graph, DATA_TOOLS_LAYERS) == []
    peers = ("data_tools.pairs", "data_tools.embeddings", "data_tools.corpora")
    side = lambda m: next((p for p in peers if m == p or m.startswith(p + ".")), None)
    across = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if side(a) and side(b) not in (None, side(a)))
    assert across == []
    graph["data_tools.pipeline.options"].add("data_tools.pairs.build")  # the checker catches a back import
    assert upward(graph, DATA_TOOLS_LAYERS) == ["data_tools.pipeline.options -> data_tools.pairs.build"]


def test_the_generic_model_code_knows_no_method_package():
    """TreLM's parts reach the model code through the method table (``Method.extension``,
    xpt_ds.model.methods.extensions), so that nothing in ``xpt_ds.model`` imports ``xpt_ds.trelm``."""
    graph = import_graph("xpt_ds")
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("xpt_ds.model")
                   for d in deps if d.startswith("xpt_ds.trelm"))
    assert not wrong, wrong


def test_readers_of_checkpoints_never_load_the_training_loop():
    """Export, evaluation, fine-tuning, the probe and sweeps read checkpoints through ``xpt_ds.checkpoint``; none of
    them imports ``xpt_ds.training``, directly or through another module."""
    graph = import_graph("xpt_ds")
    packages = ("xpt_ds.checkpoint", "xpt_ds.export", "xpt_ds.evaluation", "xpt_ds.finetuning", "xpt_ds.sweeps")
    commands = ("xpt_ds.cli.export", "xpt_ds.cli.evaluate", "xpt_ds.cli.probe", "xpt_ds.cli.status")
    readers = [m for m in graph if m.startswith(packages) or m in commands]
    assert len(readers) > 20
    wrong = []
    for reader in readers:
        seen, todo = set(), [reader]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        wrong += [f"{reader} -> {d}" for d in sorted(seen) if d.startswith("xpt_ds.training")]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("package", ["xpt_ds", "data_tools"])
def test_commands_live_in_cli_and_the_top_level_is_folders(package):
    """Each command is a module of ``cli/`` that its dispatcher lists, and the package's top level holds folders
    and a few leaves, so that no command file sits beside a subpackage of a similar name (``export.py`` beside
    ``export/``, ``sweep.py`` beside ``sweeps/``)."""
    import importlib
    root = REPO / package
    top = sorted(p.name for p in root.glob("*.py"))
    leaves = {"xpt_ds": ["__init__.py", "__main__.py", "errors.py"],
              "data_tools": ["__init__.py", "__main__.py", "errors.py", "piece_tokenizers.py", "typed_options.py"]}
    assert top == leaves[package]
    files = sorted(p.stem for p in (root / "cli").glob("*.py") if p.stem != "__init__")
    listed = sorted(m.rsplit(".", 1)[1] for m, _ in importlib.import_module(f"{package}.cli").COMMANDS.values())
    assert files == listed and len(files) >= 7
