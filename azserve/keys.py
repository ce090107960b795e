"""CURVE certificate files: one key pair per role, written on the role's own host.

A pair is ``NAME.key`` (public: the only file that is ever copied to another host) and
``NAME.key_secret`` (public and secret, mode 0600: it never leaves its host). ``azserve keys``
is the command line over these functions; docs/security.md says which file lives where.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import zmq.auth

from azserve.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

SERVER, LEARNER = "server", "learner"
"""Names of the server's and the learner's pairs in a one-directory set (``create_keys``)."""


def create_pair(directory: str | os.PathLike[str], name: str, force: bool = False) -> Path:
    """Write ``DIR/NAME.key`` and ``DIR/NAME.key_secret`` (0600); return the public one.
    Raises ``ConfigError`` for a bad name, or when either file exists and ``force`` is off."""
    if not _NAME.match(name):
        raise ConfigError(f"key name {name!r}: use letters, digits, '.', '_' and '-'")
    d = Path(directory)
    public, secret = d / f"{name}.key", d / f"{name}.key_secret"
    existing = [str(p) for p in (public, secret) if p.exists()]
    if existing and not force:
        raise ConfigError(
            f"{', '.join(existing)}: already exists; keep it, or pass --force to replace it "
            "(every host that holds the old public key must then get the new one)"
        )
    d.mkdir(parents=True, exist_ok=True)
    for p in (public, secret):  # create_certificates would write through a stale file's mode
        p.unlink(missing_ok=True)
    zmq.auth.create_certificates(d, name)
    os.chmod(secret, 0o600)
    return public


def create_keys(
    directory: str | os.PathLike[str], names: list[str], force: bool = False
) -> list[Path]:
    """Every pair in one directory, for a set made on one trusted machine: ``server``,
    ``learner`` and one pair per client name; the clients' public keys also go to
    ``DIR/authorized`` (a server's ``auth.client_keys_dir``). Nothing is written when any file
    exists and ``force`` is off. Returns the files written."""
    d = Path(directory)
    pairs = [SERVER, LEARNER, *names]
    if len(set(pairs)) != len(pairs):
        raise ConfigError(f"key names {names}: repeated, or 'server' / 'learner' (always made)")
    if not force:
        existing = [str(d / f"{n}{s}") for n in pairs for s in (".key", ".key_secret")]
        existing = [p for p in existing if Path(p).exists()]
        if existing:
            raise ConfigError(f"{', '.join(existing)}: already exists; pass --force to replace")
    written: list[Path] = []
    for name in pairs:
        public = create_pair(d, name, force=True)
        written += [public, d / f"{name}.key_secret"]
        if name not in (SERVER, LEARNER):
            written.append(authorize(public, d / "authorized"))
    return written


def public_certificate(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a public certificate file, checked: ``ConfigError`` when it is not a
    ZeroMQ certificate or when it holds a secret key (which must never be copied)."""
    p = Path(path)
    try:
        public, secret = zmq.auth.load_certificate(p)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{p}: not a ZeroMQ certificate: {exc}") from exc
    if secret:
        raise ConfigError(f"{p}: holds a secret key; copy only the public NAME.key file")
    if not public:
        raise ConfigError(f"{p}: holds no public key")
    return p.read_bytes()


def authorize(public: str | os.PathLike[str], keys_dir: str | os.PathLike[str]) -> Path:
    """Copy the public certificate ``public`` into ``keys_dir`` (a server's
    ``auth.client_keys_dir``), refusing a file that holds a secret key."""
    public_certificate(public)
    dest = Path(keys_dir)
    dest.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(public, dest / Path(public).name))
