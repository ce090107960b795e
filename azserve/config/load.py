"""Configuration: frozen dataclasses loaded from TOML, with ``--set section.key=value`` overrides.

Each component's section dataclass lives next to the component; this module only composes them,
checks types (a bad value raises ``ConfigError`` naming ``section.key`` and the reason) and writes
the resolved config back out as TOML. A key that has moved (``MOVED``) is still read at its old
place, in a file, a ``--set`` override or a checkpoint's config, with one notice per config.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from azserve.backends.base import FLAT_KEYS
from azserve.config.ranges import check_value
from azserve.errors import ConfigError

T = TypeVar("T")

log = logging.getLogger("azserve.config")

MOVED: dict[str, str] = {**FLAT_KEYS}
"""Keys that have moved, old ``section.key`` -> new: configs written before still load."""


def from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from ``data``, checking every key and value type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
    if any(_parent(old) == where and _leaf(old) in data for old in MOVED):
        data = _deepcopy(data)  # data read without apply_overrides (which moves keys first)
        _notice(_move_in(data, where))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    _check_tables(data, where, hints)
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


def _check_tables(data: dict[str, Any], where: str, hints: dict[str, Any]) -> None:
    """``ConfigError`` for a key written in the wrong one of section ``where`` and its tables
    (``backend.torch.url``: it belongs in ``[backend.triton]``), naming the key, its value
    and the table it belongs in. The top level is left out: its sections share key names."""
    tables = [n for n, tp in hints.items() if dataclasses.is_dataclass(tp)]
    if not where or not tables:
        return
    home = {k: where for k in hints if k not in tables}
    for name in tables:
        home.update({f.name: _join(where, name) for f in dataclasses.fields(hints[name])})
    places = [(where, data)] + [(_join(where, n), data[n]) for n in tables if n in data]
    for table, keys in places:
        for key, value in keys.items() if isinstance(keys, dict) else ():
            if home.get(key, table) != table:
                raise ConfigError(
                    f"{_join(table, key)}={value!r}: unknown key in [{table}]; it belongs in "
                    f"[{home[key]}] ({_join(home[key], key)})"
                )


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
    """Apply ``--set`` overrides to a raw config dict (a copy is returned). Moved keys are
    taken to their new place first, in ``data`` and in the overrides, so that a later value
    wins whichever place each is written at."""
    out = _deepcopy(data)
    moved = _move_all(out)
    for text in overrides:
        keys, value = parse_override(text)
        new = MOVED.get(".".join(keys))
        if new is not None:
            moved.append((".".join(keys), new))
            keys = new.split(".")
        node = out
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {text!r}: {k} is not a table")
            node = nxt
        node[keys[-1]] = value
    moved += _move_all(out)  # a section given whole by --set
    _notice(moved)
    return out


def _parent(key: str) -> str:
    return key.rpartition(".")[0]


def _leaf(key: str) -> str:
    return key.rpartition(".")[2]


def _move_all(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Move every old key of ``MOVED`` in config ``data`` to its new place, in place."""
    moved = []
    for where in sorted({_parent(old) for old in MOVED}):
        node: Any = data
        for k in where.split("."):
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            moved += _move_in(node, where)
    return moved


def _move_in(section: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """Move the old keys of section ``where`` (a dict, changed in place) to their new place
    inside it; ``ConfigError`` when the new place is set as well."""
    moved = []
    for old, new in MOVED.items():
        if _parent(old) != where or _leaf(old) not in section:
            continue
        *tables, leaf = new[len(where) + 1 :].split(".")
        node = section
        for i, t in enumerate(tables):
            node = node.setdefault(t, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{_join(where, '.'.join(tables[: i + 1]))}: expected a table")
        if leaf in node:
            raise ConfigError(
                f"{old} and {new} are both set: {old} is the old place of {new}; keep {new}"
            )
        node[leaf] = section.pop(_leaf(old))
        moved.append((old, new))
    return moved


def _notice(moved: list[tuple[str, str]]) -> None:
    """One log line for the moved keys of one config."""
    if moved:
        pairs = ", ".join(f"{old} -> {new}" for old, new in dict.fromkeys(moved))
        log.warning("config: keys read at their new place (write them there): %s", pairs)


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
