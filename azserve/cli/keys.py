"""``azserve keys``: CURVE key pairs, one per role."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("keys", help="write CURVE key pairs (one per role, on its own host)")
    p.add_argument("--dir", required=True, help="directory of the key files")
    p.add_argument(
        "--name",
        dest="pairs",
        action="append",
        default=[],
        metavar="NAME",
        help="write just this role's pair, e.g. server, learner, actors-cpu0 (repeatable)",
    )
    p.add_argument(
        "names",
        nargs="*",
        help="without --name: the whole set in DIR (server, learner, one pair per NAME, "
        "default actors; their public keys in DIR/authorized), for one trusted machine",
    )
    p.add_argument("--force", action="store_true", help="replace existing key files")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.errors import ConfigError
    from azserve.keys import create_keys, create_pair

    d = Path(args.dir)
    if args.pairs and args.names:
        raise ConfigError("keys: give --name NAME (one role's pair) or NAMES (a set), not both")
    if args.pairs:
        for name in args.pairs:
            public = create_pair(d, name, args.force)
            print(f"{d / (name + '.key_secret')}  secret: stays on this host")
            print(f"{public}  public: copy to the hosts that talk to {name}")
        return 0
    for path in create_keys(d, args.names or ["actors"], args.force):
        print(path)
    print(
        f"server: auth.server_secret_key={d / 'server.key_secret'} "
        f"auth.client_keys_dir={d / 'authorized'} auth.learner_public_key={d / 'learner.key'}"
    )
    print(
        f"learner: auth.learner_secret_key={d / 'learner.key_secret'} "
        f"auth.client_keys_dir={d / 'authorized'} auth.server_public_key={d / 'server.key'}"
    )
    print(
        f"actors: auth.client_secret_key={d / '<name>.key_secret'} "
        f"auth.server_public_key={d / 'server.key'} auth.learner_public_key={d / 'learner.key'}"
    )
    return 0
