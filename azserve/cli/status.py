"""``azserve status``: a running server's status as JSON."""

from __future__ import annotations

import argparse
import os
from typing import Any

from azserve.config.argtypes import float_in
from azserve.errors import AzserveError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="print a running server's status (JSON)",
        description="Ask a running inference server for its status: limits, model shapes, "
        "versions, queues and counters, as one JSON object.",
    )
    p.add_argument(
        "endpoint",
        nargs="?",
        default=os.environ.get("AZSERVE_SERVER", "tcp://127.0.0.1:5555"),
        help="the server's endpoint (default: $AZSERVE_SERVER, else %(default)s)",
    )
    p.add_argument("--timeout", type=float_in(0.01), default=5.0, help="seconds to wait")
    p.add_argument(
        "--server-key",
        default="",
        help="a CURVE server's public certificate (its server.key; auth.server_public_key)",
    )
    p.add_argument(
        "--client-key",
        default="",
        help="this host's secret certificate, one the server lets in (auth.client_secret_key)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from azserve.auth import AuthConfig
    from azserve.errors import RequestTimeout
    from azserve.sync_client import SyncClient

    auth = AuthConfig(server_public_key=args.server_key, client_secret_key=args.client_key)
    try:
        with SyncClient(args.endpoint, timeout_s=args.timeout, auth=auth) as c:
            print(json.dumps(c.status(), indent=1))
    except RequestTimeout:
        curve = "" if args.server_key else "; a CURVE server answers only with --server-key"
        raise AzserveError(
            f"no reply from {args.endpoint} in {args.timeout:g} s: is a server running there "
            f"(azserve serve, azserve train)? Check the host and port{curve}"
        ) from None
    return 0
