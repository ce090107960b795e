"""Player specs as ``--opponent`` and the ladder's ``--anchor`` take them, parsed and checked
(``random``, ``greedy``, ``uci:CMD[;NAME=VALUE...]``, ``usi:CMD[;NAME=VALUE...]``, ``gtp:CMD``,
``openspiel-mcts:SIMS``, ``checkpoint:PATH``): ConfigError for a malformed one, before any
engine starts."""

from __future__ import annotations

from azserve.errors import ConfigError

GO_LIMITS = ("movetime", "nodes", "depth")
USI_GO_LIMITS = ("byoyomi", "movetime", "nodes", "depth")


def _engine_spec(
    kind: str, arg: str, go_limits: tuple[str, ...], default: dict[str, int]
) -> tuple[str, dict[str, str], dict[str, int]]:
    """``CMD;NAME=VALUE;...`` of a ``kind:`` spec as (command, options, go limits)."""
    command, *settings = arg.split(";")
    if not command.strip():
        raise ConfigError(f"player '{kind}:{arg}': needs the engine's command line")
    options: dict[str, str] = {}
    limits: dict[str, int] = {}
    for item in settings:
        name, eq, value = (t.strip() for t in item.partition("="))
        if not eq or not name:
            raise ConfigError(f"player '{kind}:{arg}': {item!r} is not NAME=VALUE")
        if name in go_limits:
            try:
                limits[name] = int(value)
            except ValueError:
                raise ConfigError(
                    f"player '{kind}:{arg}': {name}={value!r} is not a whole number"
                ) from None
            if limits[name] < 1:
                raise ConfigError(f"player '{kind}:{arg}': {name} must be at least 1")
        else:
            options[name] = value
    return command.strip(), options, limits or dict(default)


def parse_uci_spec(arg: str) -> tuple[str, dict[str, str], dict[str, int]]:
    """``CMD;NAME=VALUE;...`` as (command, options, go limits: ``movetime``, ``nodes``,
    ``depth``; ``movetime=100`` when none is given); ConfigError if malformed."""
    return _engine_spec("uci", arg, GO_LIMITS, {"movetime": 100})


def parse_usi_spec(arg: str) -> tuple[str, dict[str, str], dict[str, int]]:
    """A USI engine's ``CMD;NAME=VALUE;...`` as (command, options, go limits: ``byoyomi``,
    ``movetime``, ``nodes``, ``depth``; ``byoyomi=100`` when none is given); ConfigError if
    malformed."""
    return _engine_spec("usi", arg, USI_GO_LIMITS, {"byoyomi": 100})


def parse_spec(spec: str) -> tuple[str, str]:
    """A player spec as (kind, argument): ``random``, ``greedy``, ``uci``, ``usi``, ``gtp``,
    ``openspiel-mcts`` or ``checkpoint``; ConfigError for an empty or malformed one."""
    s = spec.strip()
    if not s:
        raise ConfigError("player spec: empty; give random, gtp:CMD, openspiel-mcts:SIMS or "
                          "checkpoint:PATH")  # fmt: skip
    if s in ("random", "greedy"):
        return s, ""
    kind, sep, arg = s.partition(":")
    if sep and kind in ("uci", "usi"):
        (parse_uci_spec if kind == "uci" else parse_usi_spec)(arg)  # ConfigError if malformed
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
