"""``azserve serve``: a standalone model-serving endpoint."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import common
from azserve.config.argtypes import int_in
from azserve.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="standalone model-serving endpoint",
        description="Serve a model on server.bind (loopback by default) until SIGINT/SIGTERM. "
        "A learner checkpoint carries its config: --checkpoint alone is enough.",
    )
    common(p, config_required=False)
    p.add_argument(
        "--checkpoint",
        help="safetensors weights or learner checkpoint to serve; a run or checkpoint "
        "directory means its newest checkpoint",
    )
    p.add_argument(
        "--weights-version",
        type=int_in(0, 2**62),
        help="serve the weights as this version (default: the version the checkpoint was "
        "saved at; 0 for plain weights)",
    )
    p.add_argument(
        "--checkpoint-dir",
        help="serve the newest readable learner checkpoint here, as its version (none: version 0)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvloop

    from azserve.run.serve import serve, serve_config

    if not (args.config or args.checkpoint):
        raise ConfigError("pass --checkpoint F (it carries its config) or --config")
    cfg = serve_config(args.config, args.overrides, args.checkpoint)
    uvloop.run(serve(cfg, args.checkpoint, args.weights_version, args.checkpoint_dir))
    return 0
