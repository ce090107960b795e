"""Configuration: frozen dataclasses loaded from TOML, with ``--set section.key=value`` overrides.

Each component's section dataclass lives next to the component; this module only composes them,
checks types (a bad value raises ``ConfigError`` naming ``section.key`` and the reason) and writes
the resolved config back out as TOML.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from azserve.config.ranges import check_value
from azserve.errors import ConfigError

T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from ``data``, checking every key and value type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{_join(where, unknown[0])}: unknown key{suggest(unknown[0], fields)} "
            f"(known keys: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, _join(where, name))
        # Ranges first: a section's own cross-key checks then see only values in range.
        check_value(_join(where, name), kwargs[name])
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from exc
    return obj


def suggest(word: str, known: typing.Iterable[str]) -> str:
    """``"; did you mean 'max_batch_size'?"`` for the closest known name, or ``""``."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: must be one of {list(allowed)}, got {value!r}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (elem,) = typing.get_args(tp)[:1] or (Any,)
        items = [_coerce(elem, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)  # type: ignore[arg-type]
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=3"`` -> (["a", "b"], 3). The value is read as a TOML value, else as a string."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    path, raw = text.split("=", 1)
    keys = path.strip().split(".")
    if not all(keys):
        raise ConfigError(f"--set {text!r}: empty key in {path!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return keys, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides to a raw config dict (a copy is returned)."""
    out = _deepcopy(data)
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {text!r}: {k} is not a table")
            node = nxt
        node[keys[-1]] = value
    return out


def _deepcopy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


def read_toml(path: str | os.PathLike[str], what: str = "config file") -> dict[str, Any]:
    """A TOML file as a dict; ``ConfigError`` saying what is wrong with the path otherwise
    (``what`` names the file in the message: ``config file``, ``cluster file``)."""
    p = Path(path)
    check_file(p, what)
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from exc


def check_file(p: Path, what: str = "config file") -> None:
    """``ConfigError`` unless ``p`` is a regular file: not found, a directory, or something
    else (``/dev/null``, a pipe), each said as it is."""
    if p.is_file():
        return
    if p.is_dir():
        raise ConfigError(f"{what} {p}: is a directory, not a TOML file")
    if p.exists():
        raise ConfigError(f"{what} {p}: not a regular file (give a TOML file)")
    raise ConfigError(f"{what} not found: {p}")


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain dicts/lists (for TOML and JSON output)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def dump_toml(data: dict[str, Any]) -> str:
    """Minimal TOML writer for the resolved config (tables of scalars and lists)."""
    lines: list[str] = []
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for k, v in scalars.items():
        if v is not None:
            lines.append(f"{k} = {_toml_value(v)}")
    for name, table in tables.items():
        _dump_table(lines, name, table)
    return "\n".join(lines) + "\n"


def _dump_table(lines: list[str], name: str, table: dict[str, Any]) -> None:
    lines.append(f"\n[{name}]")
    subtables = {}
    for k, v in table.items():
        if isinstance(v, dict):
            subtables[k] = v
        elif v is not None:  # TOML has no null: an absent key means the default (None)
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in subtables.items():
        _dump_table(lines, f"{name}.{k}", v)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise ConfigError(f"cannot write {v!r} as TOML")
