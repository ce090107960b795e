"""`azserve bench selfplay` for several override sets, interleaved round by round in one run,
so that a noisy shared machine's drift hits every variant alike; prints each run's key figures
and the ratios of the medians to the first variant.

    python scripts/selfplay_ab.py --config configs/connect4.toml --rounds 2 --duration 30 \\
        --variant "default=" \\
        --variant "eager=backend.torch.compile=none backend.dtype=float32 actors.cache_mb=0" \\
        --out runs/selfplay-ab.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KEYS = (
    "positions_per_s",
    "evaluations_per_s",
    "actor_evaluations_per_s",
    "mean_batch",
    "inference_busy_fraction",
    "model_positions_per_s",
    "bottleneck",
)


def run(config: str, overrides: list[str], duration: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        argv = [
            sys.executable,
            "-m",
            "azserve.cli.main",
            "bench",
            "selfplay",
            "--config",
            config,
            "--duration",
            str(duration),
            "--json",
            str(out),
            *extra,
        ]
        for o in overrides:
            argv += ["--set", o]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/connect4.toml")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--variant", action="append", required=True, help="NAME=key=v key=v ...")
    ap.add_argument("--learner", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    variants = []
    for v in args.variant:
        name, _, rest = v.partition("=")
        variants.append((name, rest.split()))
    runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
    extra = ["--learner"] if args.learner else []
    for r in range(args.rounds):
        for name, overrides in variants:
            res = run(args.config, overrides, args.duration, extra)
            runs[name].append(res)
            brief = {k: res.get(k) for k in KEYS}
            brief["cache"] = res.get("cache")
            print(f"round {r} {name}: {json.dumps(brief)}", flush=True)
    base = variants[0][0]
    summary = {}
    for name, _ in variants:
        med = {
            k: statistics.median(x[k] for x in runs[name])
            for k in ("positions_per_s", "evaluations_per_s", "actor_evaluations_per_s")
        }
        summary[name] = {
            "median": med,
            "ratio_to_" + base: {
                k: round(v / statistics.median(x[k] for x in runs[base]), 2) for k, v in med.items()
            },
        }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
