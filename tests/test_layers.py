"""The floors of the package tree, checked on the source: every import edge of every module.

Library floor ``azserve`` (everything but ``azserve.app``) imports neither ``actors``, ``learner``
nor ``azserve.app``; ``actors`` and ``learner`` stand on the library floor (``learner`` may use
``actors.games``) and never import ``azserve.app``; ``azserve.app`` may import everything.
torch is imported only by the model group, the torch-running backends, the learner's training
modules and the app's in-process agent and benchmarks. An actor process never loads torch.
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
    "azserve.app.agent",
    "azserve.app.analyze",
    "azserve.app.play",
    "azserve.app.gtp",  # one torch thread for its in-process agent, as play
    "azserve.app.uci",  # the same, for chess
    "azserve.app.match",  # the same
    "azserve.app.ladder",  # the same
    "azserve.app.jobs",  # one torch thread per worker process of match and ladder
    "azserve.app.train",
    "azserve.app.compare",  # scores checkpoints in-process, as train does
    "azserve.app.bench",
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


def floor(name: str) -> str:
    if name == "azserve.app" or name.startswith("azserve.app."):
        return "app"
    return name.split(".")[0]


ALLOWED = {
    "azserve": {"azserve"},
    "actors": {"azserve", "actors"},
    "learner": {"azserve", "learner", "actors.games"},
    "app": {"azserve", "actors", "learner", "app"},
}


def allowed(src: str, target: str) -> bool:
    f = floor(target)
    rules = ALLOWED[floor(src)]
    if f == "actors" and "actors.games" in rules and "actors" not in rules:
        return target == "actors.games" or target.startswith("actors.games.")
    return f in rules


def test_every_import_edge_respects_the_floors() -> None:
    names = modules()
    assert len(names) > 50, "the walk found too few modules"
    bad = []
    for mod, path in names.items():
        for target, line in imports(path, mod):
            if floor(target) not in ("azserve", "actors", "learner", "app"):
                continue  # third-party or stdlib
            if target.split(".")[0] not in PACKAGES:
                continue
            if not allowed(mod, target):
                bad.append(f"{path.relative_to(REPO)}:{line}: {mod} imports {target}")
    assert not bad, "imports across floors:\n" + "\n".join(bad)


def test_no_import_circle_among_the_searches() -> None:
    """No module of ``actors`` reaches itself through its imports, function-level ones
    included: the search interface (``actors.search``) imports no implementation, the registry
    (``actors.searches``) imports them all, and the Python searches share their nodes through
    ``actors.nodes``, not each other's privates."""
    names = modules()
    graph = {
        mod: {t for t, _ in imports(path, mod) if t in names and t != mod}
        for mod, path in names.items()
        if mod.startswith("actors.") and path.name != "__init__.py"
    }
    circles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            mod, trail = stack.pop()
            for target in graph.get(mod, ()):
                if target == start:
                    circles.append(" -> ".join([*trail, start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, (*trail, target)))
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))
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
    fake.write_text("from azserve.app.schema import Config\nimport learner.learn\n")
    edges = [t for t, _ in imports(fake, "azserve.probe")]
    assert not allowed("azserve.probe", edges[0]) and not allowed("azserve.probe", "learner.learn")
    assert allowed("learner.learn", "actors.games") and not allowed("learner.x", "actors.mcts")


@pytest.mark.timeout(60)
def test_actor_entry_point_never_loads_torch() -> None:
    """What ``azserve actors`` imports, up to its main, in a fresh interpreter."""
    code = textwrap.dedent(
        """
        import sys
        from azserve.app.cli import build_parser
        from azserve.app.schema import actors_config, client_config, load_config
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
