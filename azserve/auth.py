"""Socket security: loopback by default, CURVE (ZeroMQ's public-key encryption and client
authentication) for anything that crosses hosts. ``azserve keys`` writes the certificates."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from azserve.errors import ConfigError


@dataclass(frozen=True)
class AuthConfig:
    """CURVE keys. Empty paths mean no encryption, which is allowed only on loopback and ipc."""

    server_secret_key: str = ""
    """Server: its secret certificate (``*.key_secret``) written by ``azserve keys``."""
    client_keys_dir: str = ""
    """Server: directory of the public certificates (``*.key``) of the clients allowed in."""
    client_secret_key: str = ""
    """Client: its own secret certificate."""
    server_public_key: str = ""
    """Client: the server's public certificate (``server.key``)."""
    allow_insecure_remote: bool = False
    """Permit binding a non-loopback address without CURVE (trusted private networks only)."""


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


def server_auth(
    ctx: zmq.Context, sock: zmq.Socket, cfg: AuthConfig, endpoint: str
) -> ThreadAuthenticator | None:
    """Make ``sock`` a CURVE server when keys are configured; refuse an unauthenticated
    non-loopback bind. Returns the authenticator to stop on close (or None)."""
    if not cfg.server_secret_key:
        if not is_local(endpoint) and not cfg.allow_insecure_remote:
            raise ConfigError(
                f"bind={endpoint!r} reaches the network but auth.server_secret_key is empty: "
                "create keys with `azserve keys --dir DIR` and set auth.server_secret_key and "
                "auth.client_keys_dir (or auth.allow_insecure_remote=true on a trusted network)"
            )
        return None
    if not cfg.client_keys_dir or not Path(cfg.client_keys_dir).is_dir():
        raise ConfigError(f"auth.client_keys_dir={cfg.client_keys_dir!r}: not a directory")
    public, secret = _load(cfg.server_secret_key, "auth.server_secret_key", need_secret=True)
    authenticator = ThreadAuthenticator(ctx)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=cfg.client_keys_dir)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    return authenticator


def client_auth(sock: zmq.Socket, cfg: AuthConfig) -> None:
    """Make ``sock`` a CURVE client when a server key is configured."""
    if not cfg.server_public_key:
        return
    server_public, _ = _load(cfg.server_public_key, "auth.server_public_key", need_secret=False)
    public, secret = _load(cfg.client_secret_key, "auth.client_secret_key", need_secret=True)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


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
        client_auth(sock, cfg)
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


def create_keys(directory: str | os.PathLike[str], names: list[str]) -> list[Path]:
    """Write ``server`` plus one certificate pair per client name; clients' public keys also go
    to ``DIR/authorized`` (the server's ``client_keys_dir``)."""
    d = Path(directory)
    authorized = d / "authorized"
    authorized.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in ["server", *names]:
        pub, sec = zmq.auth.create_certificates(d, name)
        os.chmod(sec, 0o600)
        written += [Path(pub), Path(sec)]
        if name != "server":
            (authorized / Path(pub).name).write_bytes(Path(pub).read_bytes())
    return written
