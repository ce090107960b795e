"""``docs/config.md``, generated from the config dataclasses: one table per section with each
key's type, default, allowed range and docstring (the string under each field).

``python -m azserve.config.docs > docs/config.md`` (``make docs``) rewrites it;
``tests/test_first_hour_docs.py`` fails when the file is out of date.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from typing import Any

from azserve.config.ranges import RANGES, _fmt
from azserve.config.schema import Config

HEADER = """\
# Configuration reference

Generated from the config dataclasses' docstrings by `python -m azserve.config.docs`
(`make docs`); `tests/test_first_hour_docs.py` checks that it is current. Do not edit by hand.

A config is a TOML file (`configs/tictactoe.toml`, `configs/connect4.toml`, or any path), one
table per section; `--set section.key=value` overrides one key (the value is read as TOML, else
as a string), and `AZSERVE_SET="a.b=1 c.d=2"` adds overrides from the environment. Unknown keys
and values out of range are refused with the key, the value and the reason. The resolved config
is saved beside a run's outputs (`RUN/config.toml`) and inside every checkpoint.

A table inside a section is a TOML table of its own (`[backend.torch]`) and its keys are
written `--set backend.torch.compile=none`. The backend keys that only one backend reads moved
from `[backend]` to `[backend.torch]` and `[backend.triton]`; a config, an override or a
checkpoint that writes them the old way (`backend.compile`, `backend.triton_model_name`) still
loads, read at the new place with one warning naming the old and the new key.
"""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (read from its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return docs


def _type_name(tp: Any) -> str:
    text = tp.__name__ if isinstance(tp, type) else str(tp)
    return text.replace("typing.", "").replace("NoneType", "None")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`" if value is not None else "unset"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole reference as Markdown."""
    lines = [HEADER]
    top = field_docs(Config)
    hints = typing.get_type_hints(Config)
    scalars = [f for f in dataclasses.fields(Config) if not dataclasses.is_dataclass(hints[f.name])]
    lines += ["## Top level", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for f in scalars:
        lines.append(
            f"| `{f.name}` | {_type_name(hints[f.name])} | {_default(f)} | {_cell(top[f.name])} |"
        )
    for f in dataclasses.fields(Config):
        if dataclasses.is_dataclass(hints[f.name]):
            _section(lines, f.name, hints[f.name])
    return "\n".join(lines) + "\n"


def _section(lines: list[str], name: str, cls: Any) -> None:
    """The table of section ``name``, then one per table inside it (``[backend.torch]``)."""
    lines += ["", f"## [{name}]", "", inspect.cleandoc(cls.__doc__ or ""), ""]
    lines += ["| key | type | default | range | meaning |", "|---|---|---|---|---|"]
    docs = field_docs(cls)
    sub = typing.get_type_hints(cls)
    tables = [g for g in dataclasses.fields(cls) if dataclasses.is_dataclass(sub[g.name])]
    for g in dataclasses.fields(cls):
        if g in tables:
            continue
        rng = RANGES.get(f"{name}.{g.name}")
        allowed = f"{_fmt(rng[0])} to {_fmt(rng[1])}" if rng else ""
        meaning = docs.get(g.name, "(undocumented)")
        lines.append(
            f"| `{g.name}` | {_cell(_type_name(sub[g.name]))} | {_cell(_default(g))} | "
            f"{allowed} | {_cell(meaning)} |"
        )
    for g in tables:
        _section(lines, f"{name}.{g.name}", sub[g.name])


if __name__ == "__main__":
    print(render(), end="")
