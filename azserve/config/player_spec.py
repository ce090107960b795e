"""Player specs as ``--opponent`` and the ladder's ``--anchor`` take them, parsed and checked
(``random``, ``greedy``, ``uci:CMD[;NAME=VALUE...]``, ``gtp:CMD``, ``openspiel-mcts:SIMS``,
``checkpoint:PATH``): ConfigError for a malformed one, before any engine starts."""

from __future__ import annotations

from azserve.errors import ConfigError

GO_LIMITS = ("movetime", "nodes", "depth")


def parse_uci_spec(arg: str) -> tuple[str, dict[str, str], dict[str, int]]:
    """``CMD;NAME=VALUE;...`` as (command, options, go limits); ConfigError if malformed."""
    command, *settings = arg.split(";")
    if not command.strip():
        raise ConfigError(f"player 'uci:{arg}': needs the engine's command line")
    options: dict[str, str] = {}
    limits: dict[str, int] = {}
    for item in settings:
        name, eq, value = (t.strip() for t in item.partition("="))
        if not eq or not name:
            raise ConfigError(f"player 'uci:{arg}': {item!r} is not NAME=VALUE")
        if name in GO_LIMITS:
            try:
                limits[name] = int(value)
            except ValueError:
                raise ConfigError(
                    f"player 'uci:{arg}': {name}={value!r} is not a whole number"
                ) from None
            if limits[name] < 1:
                raise ConfigError(f"player 'uci:{arg}': {name} must be at least 1")
        else:
            options[name] = value
    return command.strip(), options, limits or {"movetime": 100}


def parse_spec(spec: str) -> tuple[str, str]:
    """A player spec as (kind, argument): ``random``, ``greedy``, ``uci``, ``gtp``,
    ``openspiel-mcts`` or ``checkpoint``; ConfigError for an empty or malformed one."""
    s = spec.strip()
    if not s:
        raise ConfigError("player spec: empty; give random, gtp:CMD, openspiel-mcts:SIMS or "
                          "checkpoint:PATH")  # fmt: skip
    if s in ("random", "greedy"):
        return s, ""
    kind, sep, arg = s.partition(":")
    if sep and kind == "uci":
        parse_uci_spec(arg)  # ConfigError for a malformed one
        return kind, arg.strip()
    if sep and kind in ("gtp", "openspiel-mcts", "checkpoint"):
        if kind == "openspiel-mcts":
            try:
                n = int(arg or "1000")
            except ValueError:
                raise ConfigError(f"player {spec!r}: expected openspiel-mcts:SIMS") from None
            if n < 1:
                raise ConfigError(f"player {spec!r}: SIMS must be at least 1")
            return kind, str(n)
        if not arg.strip():
            raise ConfigError(
                f"player {spec!r}: {kind}: needs a {'command' if kind == 'gtp' else 'path'}"
            )
        return kind, arg.strip()
    if s == "openspiel-mcts":
        return "openspiel-mcts", "1000"
    return "gtp", s  # a bare command line, as ``azserve match`` has always taken
