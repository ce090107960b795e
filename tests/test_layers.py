"""The floors of the package tree, checked on the source: every import edge of every module.

Top to bottom: ``azserve.cli`` (one module per command) > ``azserve.perf``, ``azserve.run``,
``azserve.engines``, ``azserve.web`` (one floor: perf starts processes through run's
supervisor; web reads what runs write) >
``azserve.arena`` > ``azserve.config`` > ``learner`` > ``actors`` > the library (the rest of
``azserve``). A module imports its own floor and the floors below, never above; ``learner``
uses only ``actors.games`` of the actors. No module reaches itself through its imports, in any
package. torch is imported only by the model group, the torch-running backends, the learner's
training modules and the modules that run a net in-process. An actor process never loads torch.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("azserve", "actors", "learner")

TORCH_ALLOWED = (
    "azserve.model.network",
    "azserve.model.weights",
    "azserve.model.device",
    "azserve.model.fold",
    "azserve.backends.torch_backend",
    "azserve.backends.torch_program",
    "azserve.backends.triton_repo",
    "azserve.backends.triton_model.model",
    "learner.trainer",
    "learner.distributed",  # the data-parallel group (torch.distributed)
    "learner.loss",
    "learner.checkpoint",
    "learner.learn",
    "learner.runlog",
    "azserve.arena.agent",
    "azserve.engines.analyze",
    "azserve.engines.terminal",
    "azserve.engines.loading",  # one torch thread for the engines' agent (gtp, uci), as play
    "azserve.arena.match",  # the same
    "azserve.arena.ladder.schedule",  # the same
    "azserve.arena.pool",  # one torch thread per worker process of match and ladder
    "azserve.run.train",
    "azserve.run.evaluations",  # scores checkpoints in-process, one torch thread
    "azserve.run.compare",  # scores checkpoints in-process, as train does
    "azserve.perf",
)
"""Modules (or packages) that may import torch."""


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every module ``path`` imports (absolute names, relative ones resolved), with lines."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((name, node.lineno))
            # ``from pkg import mod`` imports the submodule pkg.mod too.
            found += [(f"{name}.{a.name}", node.lineno) for a in node.names]
    return found


FLOORS = (
    ("azserve.cli", 6),
    ("azserve.perf", 5),
    ("azserve.run", 5),
    ("azserve.engines", 5),
    ("azserve.web", 5),  # reads what runs write (run's display and ladder helpers)
    ("azserve.arena", 4),
    ("azserve.config", 3),
    ("learner", 2),
    ("actors", 1),
    ("azserve", 0),
)
"""Each package and its height; the first that names a module (or a parent of it) is its own."""


def floor(name: str) -> tuple[str, int]:
    """The package a module sits in (``azserve.cli``, ..., ``azserve`` for the library) and its
    floor's height."""
    for package, height in FLOORS:
        if name == package or name.startswith(package + "."):
            return package, height
    return name.split(".")[0], -1


def allowed(src: str, target: str) -> bool:
    """Whether module ``src`` may import ``target``: a floor no higher than its own, and of the
    actors only ``actors.games`` for the learner."""
    (src_pkg, src_h), (dst_pkg, dst_h) = floor(src), floor(target)
    if dst_h < 0:
        return True  # third-party or stdlib
    if src_pkg == "learner" and dst_pkg == "actors":
        return target == "actors.games" or target.startswith("actors.games.")
    return dst_h <= src_h


def test_every_import_edge_respects_the_floors() -> None:
    names = modules()
    assert len(names) > 50, "the walk found too few modules"
    bad = []
    for mod, path in names.items():
        for target, line in imports(path, mod):
            if target.split(".")[0] in PACKAGES and not allowed(mod, target):
                bad.append(f"{path.relative_to(REPO)}:{line}: {mod} imports {target}")
    assert not bad, "imports across floors:\n" + "\n".join(bad)


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of the project's modules, function-level ones included. A package's
    ``__init__`` re-exports its parts, so an edge to a package counts as an edge to the names it
    re-exports only through the import of the part itself: ``__init__`` modules are left out."""
    names = modules()
    return {
        mod: {t for t, _ in imports(path, mod) if t in names and t != mod}
        for mod, path in names.items()
        if path.name != "__init__.py"
    }


def circles(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            mod, trail = stack.pop()
            for target in graph.get(mod, ()):
                if target == start:
                    found.append(" -> ".join([*trail, start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, (*trail, target)))
    return sorted(found)


def test_no_import_circle_in_any_package() -> None:
    """No module reaches itself through its imports, function-level ones included."""
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(found)


def test_the_circle_finder_finds_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        "a -> b -> c -> a",
        "b -> c -> a -> b",
        "c -> a -> b -> c",
    ]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_search_interface_imports_no_search() -> None:
    """The search interface (``actors.search``) imports no implementation, the registry
    (``actors.searches``) imports them all, and the Python searches share their nodes through
    ``actors.nodes``, not each other's privates."""
    graph = import_graph()
    assert "actors.mcts" not in graph["actors.gumbel"]
    assert graph["actors.search"].isdisjoint(
        {"actors.mcts", "actors.gumbel", "actors.compiled_mcts", "actors.searches"}
    )


def test_torch_is_imported_only_where_it_runs() -> None:
    bad = []
    for mod, path in modules().items():
        if any(mod == a or mod.startswith(a + ".") for a in TORCH_ALLOWED):
            continue
        for target, line in imports(path, mod):
            if target == "torch" or target.startswith(("torch.", "safetensors.torch")):
                bad.append(f"{path.relative_to(REPO)}:{line}: {mod} imports {target}")
    assert not bad, "torch outside the model group, backends, learner and app:\n" + "\n".join(bad)


def test_the_checker_sees_a_forbidden_edge(tmp_path: Path) -> None:
    """The walk is not vacuous: a library module importing the app is an error."""
    fake = tmp_path / "probe.py"
    fake.write_text("from azserve.config.schema import Config\nimport learner.learn\n")
    edges = [t for t, _ in imports(fake, "azserve.probe")]
    assert not allowed("azserve.probe", edges[0]) and not allowed("azserve.probe", "learner.learn")
    assert allowed("learner.learn", "actors.games") and not allowed("learner.x", "actors.mcts")
    assert not allowed("azserve.arena.match", "azserve.engines.gtp.engine")
    assert not allowed("azserve.config.schema", "azserve.arena.players")
    assert allowed("azserve.cli.gtp", "azserve.engines.gtp.engine")
    assert allowed("azserve.perf.common", "azserve.run.supervisor")


@pytest.mark.timeout(60)
def test_actor_entry_point_never_loads_torch() -> None:
    """What ``azserve actors`` imports, up to its main, in a fresh interpreter."""
    code = textwrap.dedent(
        """
        import sys
        from azserve.cli.main import build_parser
        from azserve.config.schema import actors_config, client_config, load_config
        import actors.main
        import azserve
        azserve.EvalClient, azserve.SyncClient, azserve.InferenceServer
        cfg = load_config("configs/connect4.toml")
        build_parser().parse_args(["actors", "--config", "configs/connect4.toml"])
        actors_config(cfg), client_config(cfg)
        print("torch" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("package", ["azserve", "azserve.model", "actors", "learner"])
def test_every_public_name_of_a_package_face_resolves(package: str) -> None:
    """The faces are lazy: each name in ``__all__`` imports its module on first use. Each
    must exist, and each lazily imported module must stay on the package's floor."""
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"
    for target in getattr(mod, "_LAZY", {}).values():
        assert allowed(package + ".__init__", target), f"{package} lazily imports {target}"
