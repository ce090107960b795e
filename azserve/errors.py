"""Typed errors. Across the wire an error is data (``type`` + ``message``); in the caller it is
one of these exceptions, chosen by ``type``."""

from __future__ import annotations


class AzserveError(Exception):
    """Base of every azserve error."""


class ConfigError(AzserveError, ValueError):
    """A configuration key has a bad value; the message names the key and the reason."""


class ProtocolError(AzserveError, ValueError):
    """A message does not follow the wire protocol (frames, header, sizes)."""


class WeightsError(AzserveError):
    """Weights could not be parsed, checked or loaded."""


class RemoteError(AzserveError):
    """The server answered with an error. ``type`` is the wire error type."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


class VersionUnavailable(RemoteError):
    """The requested weights version is not (or no longer) resident on the server."""


class VersionRetired(VersionUnavailable):
    """The server held the version and retired it while no lease pinned it (evicted, or
    unloaded): it will not come back there, so a game pinned to it cannot go on. A server that
    never held it (restarted) answers ``VersionUnavailable``: the learner may restore it."""


class Overloaded(RemoteError):
    """The server refused work: queue full or memory budget exceeded."""


class ServerClosed(AzserveError):
    """The server (or the local client) is shut down; the request was not served."""


class ComponentFailed(AzserveError):
    """An owner task of a long-lived component died; the component no longer works (its
    pending calls fail with this, and the process exits non-zero)."""


class RequestTimeout(AzserveError, TimeoutError):
    """No reply arrived in time, after the configured retries."""


# Wire error types (the ``type`` field of an error reply) -> caller exception.
_BY_TYPE: dict[str, type[RemoteError]] = {
    "VersionUnavailable": VersionUnavailable,
    "VersionRetired": VersionRetired,
    "Overloaded": Overloaded,
}


def remote_error(type_: str, message: str) -> Exception:
    """The exception a client raises for an error reply."""
    if type_ == "ServerClosed":
        return ServerClosed(message)
    return _BY_TYPE.get(type_, RemoteError)(type_, message)
