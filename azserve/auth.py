"""Socket security: loopback by default, CURVE (ZeroMQ's public-key encryption and client
authentication) for anything that crosses hosts, with keys per role: a server admits only listed
client keys and counts the peers it refuses (``Gate``); each message's sender is known by its
public key (``peer_key``), so that weight loads are taken from the learner's key only.
``azserve keys`` (``azserve/keys.py``) writes the certificates."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import parse_monitor_message

from azserve.errors import ConfigError


@dataclass(frozen=True)
class AuthConfig:
    """CURVE keys, named by role: each host sets only the fields of the roles it runs (see
    docs/security.md). Empty paths mean no encryption, allowed only on loopback and ipc."""

    server_secret_key: str = ""
    """Inference server: its own secret certificate (``server.key_secret``); never copied."""
    client_keys_dir: str = ""
    """Inference server and learner: directory of the public certificates (``*.key``) of the
    clients let in (actor hosts; the learner's key is let into a server on its own)."""
    learner_public_key: str = ""
    """Inference server: the learner's public certificate, the only key whose ``load`` is
    accepted (required with CURVE). Actor host: the key of the learner's trajectory socket."""
    learner_secret_key: str = ""
    """Learner: its own secret certificate (``learner.key_secret``): the trajectory socket's
    server key and the learner's identity to the inference servers. Never copied."""
    client_secret_key: str = ""
    """Actor host (or any other client): its own secret certificate. Never copied."""
    server_public_key: str = ""
    """Clients of an inference server: the server's public certificate (``server.key``)."""
    server_public_keys: tuple[str, ...] = ()
    """Clients of several servers with their own keys: ``ENDPOINT=CERT`` entries, each
    server's public certificate by its endpoint (``server_public_key`` for the others)."""
    allow_insecure_remote: bool = False
    """Permit binding, or connecting to, a non-loopback address without CURVE (trusted private
    networks only)."""

    def as_learner(self) -> AuthConfig:
        """This config with the learner's pair as the client identity (its publisher)."""
        if not self.learner_secret_key:
            return self
        return replace(self, client_secret_key=self.learner_secret_key)

    def server_key_for(self, endpoint: str) -> tuple[str, str]:
        """(config key, certificate path) of the server at ``endpoint``: its
        ``server_public_keys`` entry, else ``server_public_key``."""
        for i, entry in enumerate(self.server_public_keys):
            where, sep, path = entry.partition("=")
            if not sep or not where or not path:
                raise ConfigError(
                    f"auth.server_public_keys[{i}]={entry!r}: expected ENDPOINT=CERTIFICATE"
                )
            if where == endpoint:
                return f"auth.server_public_keys[{i}]", path
        return "auth.server_public_key", self.server_public_key


def is_local(endpoint: str) -> bool:
    """True for ipc/inproc endpoints and tcp on a loopback address."""
    if not endpoint.startswith("tcp://"):
        return True
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname or interface name: assume it reaches the network


_ROLE_KEYS = {"server": "server_secret_key", "learner": "learner_secret_key"}

REFUSAL_REASONS = ("bad_handshake", "unknown_key")
"""Why a handshake was refused: the peer's handshake failed (it speaks no CURVE, or holds
another server's public key: which of the two depends on which side hangs up first), or its
public key is not listed."""

_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_MAX_REFUSED_KEYS = 16


class Gate:
    """Admission to one CURVE server socket: a ZAP handler (pyzmq's ``ThreadAuthenticator``)
    that lets in the listed client keys, counts of refused handshakes by reason (from the
    socket's monitor, since peers without CURVE or with a wrong server key never reach ZAP),
    and the refused public keys. Reading the monitor is ``watch``'s job (a task of the owner's
    loop); ``stop`` before terminating the context."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        sock: zmq.Socket[Any],
        allowed: set[bytes],
        learner: bytes,
        monitor: bool,
        on_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.learner = learner.decode()
        """The learner's public key, z85 (the ZAP User-Id of its messages); "" when unset."""
        self.refused = dict.fromkeys(REFUSAL_REASONS, 0)
        """Handshakes refused, by reason (a refused peer that retries is counted each time)."""
        self._allowed = allowed | ({learner} if learner else set())
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._refused_keys: dict[str, int] = {}
        # An asyncio socket when ``sock`` is one (``watch`` awaits it).
        self._monitor: Any = sock.get_monitor_socket(_HANDSHAKE_FAILED) if monitor else None
        self._zap = ThreadAuthenticator(ctx)
        self._zap.start()
        # Keys checked by our callback (on the ZAP thread), so that refused keys are recorded.
        self._zap.configure_curve_callback(domain="*", credentials_provider=self)

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP: admit ``key`` (z85) when listed; remember the first refused keys."""
        if key in self._allowed:
            return True
        with self._lock:
            name = key.decode("ascii", "replace")
            if name in self._refused_keys or len(self._refused_keys) < _MAX_REFUSED_KEYS:
                self._refused_keys[name] = self._refused_keys.get(name, 0) + 1
        return False

    async def watch(self) -> None:
        """Count refused handshakes from the socket monitor, for ever (cancel to stop)."""
        if self._monitor is None:
            return
        while True:
            event = parse_monitor_message(await self._monitor.recv_multipart())
            auth = event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
            reason = "unknown_key" if auth else "bad_handshake"
            self.refused[reason] += 1
            self._on_refused(reason)

    def status(self) -> dict[str, Any]:
        """Refusals by reason and the refused public keys (z85) with their counts."""
        with self._lock:
            keys = dict(self._refused_keys)
        return {"auth_refused": dict(self.refused), "auth_refused_keys": keys}

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None
        self._zap.stop()


def server_auth(
    ctx: zmq.Context[Any],
    sock: zmq.Socket[Any],
    cfg: AuthConfig,
    endpoint: str,
    role: str = "server",
    monitor: bool = False,
    on_refused: Callable[[str], None] = lambda reason: None,
) -> Gate | None:
    """Make ``sock`` a CURVE server with the secret key of ``role`` (``server``: the inference
    server, ``server_secret_key``; ``learner``: its trajectory socket, ``learner_secret_key``)
    when it is configured; refuse an unauthenticated non-loopback bind. The inference server
    also needs ``learner_public_key`` (the only key that may load weights). ``monitor``: count
    refused handshakes (run ``Gate.watch``; ``on_refused(reason)`` is called for each).
    Returns the gate to stop on close (or None without CURVE)."""
    key = _ROLE_KEYS[role]
    secret_path = getattr(cfg, key)
    if not secret_path:
        if not is_local(endpoint) and not cfg.allow_insecure_remote:
            raise ConfigError(
                f"bind={endpoint!r} reaches the network but auth.{key} is empty: "
                f"create the {role}'s keys with `azserve keys --dir DIR --name {role}` on this "
                f"host and set auth.{key} and auth.client_keys_dir (or "
                "auth.allow_insecure_remote=true on a trusted network)"
            )
        return None
    if not cfg.client_keys_dir or not Path(cfg.client_keys_dir).is_dir():
        raise ConfigError(f"auth.client_keys_dir={cfg.client_keys_dir!r}: not a directory")
    public, secret = _load(secret_path, f"auth.{key}", need_secret=True)
    learner = b""
    if role == "server":
        if not cfg.learner_public_key:
            raise ConfigError(
                "auth.learner_public_key is empty: with CURVE a server loads weights only from "
                "the learner's key; set it to the learner's public certificate (learner.key)"
            )
        learner, _ = _load(cfg.learner_public_key, "auth.learner_public_key", need_secret=False)
    allowed = set(zmq.auth.load_certificates(cfg.client_keys_dir))
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    return Gate(ctx, sock, allowed, learner, monitor, on_refused)


def peer_key(frame: zmq.Frame) -> str:
    """The z85 public key of the CURVE peer that sent ``frame`` (its ZAP User-Id)."""
    return str(frame.get("User-Id"))


def client_keys(
    cfg: AuthConfig, endpoint: str, server_key: tuple[str, str] | None = None
) -> tuple[bytes, bytes, bytes] | None:
    """(server public, own public, own secret) for a CURVE client of the server at
    ``endpoint`` whose certificate is ``server_key`` (config key, path; default
    ``cfg.server_key_for(endpoint)``); None without one, which is refused (``ConfigError``)
    when the endpoint reaches the network, unless ``allow_insecure_remote``."""
    name, path = server_key or cfg.server_key_for(endpoint)
    if not path:
        if not is_local(endpoint) and not cfg.allow_insecure_remote:
            raise ConfigError(
                f"{endpoint!r} reaches the network but {name} is empty: set it to that "
                "server's public certificate (docs/security.md), or "
                "auth.allow_insecure_remote=true on a trusted network"
            )
        return None
    server_public, _ = _load(path, name, need_secret=False)
    public, secret = _load(cfg.client_secret_key, "auth.client_secret_key", need_secret=True)
    return server_public, public, secret


def client_auth(
    sock: zmq.Socket[Any],
    cfg: AuthConfig,
    endpoint: str,
    server_key: tuple[str, str] | None = None,
) -> None:
    """Make ``sock`` a CURVE client as ``client_keys`` says (nothing without keys)."""
    keys = client_keys(cfg, endpoint, server_key)
    if keys is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys


CLIENT_MAX_MESSAGE_BYTES = 1 << 30
"""Largest reply a client accepts (a status or a 65,536-row result is far smaller): a broken
or hostile peer cannot make a client allocate more."""


def connect_dealer(ctx: zmq.Context[Any], endpoint: str, cfg: AuthConfig, **options: int) -> Any:
    """A DEALER of ``ctx`` connected to ``endpoint`` (CURVE client when configured), with
    ``LINGER`` 0, inbound messages capped at ``CLIENT_MAX_MESSAGE_BYTES`` and the given socket
    ``options`` (names of ``zmq`` constants). On any error the socket is closed and the error
    (``ConfigError``, ``zmq.ZMQError``) raised."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, CLIENT_MAX_MESSAGE_BYTES)
    try:
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        client_auth(sock, cfg, endpoint)
        sock.connect(endpoint)
    except (ConfigError, zmq.ZMQError):
        sock.close()
        raise
    return sock


def _load(path: str, key: str, need_secret: bool) -> tuple[bytes, bytes]:
    if not path or not Path(path).is_file():
        raise ConfigError(f"{key}={path!r}: certificate file not found")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{key}={path!r}: not a ZeroMQ certificate: {exc}") from exc
    if need_secret and not secret:
        raise ConfigError(f"{key}={path!r}: holds no secret key (use the *.key_secret file)")
    return public, secret or b""
