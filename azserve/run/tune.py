"""``azserve tune``: a search over a config's knobs, run by Ray Tune, judged by one ladder.

Every point of the search (``--search KEY=V1,V2,...``, the grid of all of them or ``--trials``
drawn from it) is a trial: a real ``azserve train`` of the base config with the point's values,
in a run directory of its own under ``RUN_DIR/trials/``, for the same wall time as every other
trial (``--hours`` shared out). At a quarter, a half and all of that time the trial's newest
checkpoint is rated on the tune's one shared ladder (``RUN_DIR/ladder``: the trials' rated
checkpoints and the anchors, random play at 0 Elo) and the rating is reported to Ray Tune,
whose ASHA scheduler stops a trial that is below the median of those reported at the same
rung so far. At the end (``azserve.run.tune_report``) the ladder is fitted once more over
every game, and the best trial that ran its whole time is written out as ``best.toml`` with
the evidence: ``tune.json``, a table (``tune.md``) and ``tune.png``, rating against hours.

This module is the driver, the Ray side of it; the tune's settings and run directory are
``azserve.run.tune_setup``, the ``--search`` flags ``azserve.run.tune_search``, a trial
``azserve.run.tune_trial`` and the outputs ``azserve.run.tune_report``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError
from azserve.run.tune_search import trial_label
from azserve.run.tune_setup import (
    EXPERIMENT,
    QUARTERS,
    RAY_DIR,
    REDUCTION,
    RUNGS,
    TuneSetup,
    saved_setup,
    start_setup,
)


def run_trials(
    setup: TuneSetup,
    out: Path,
    resume: bool,
    address: str | None,
    resources: dict[str, float],
) -> dict[str, dict[str, Any]]:
    """Run (or with ``resume``, continue) the trials under Ray Tune with ASHA; each trial's
    end as ``trial_statuses`` gives it. Ray is started here (``address``: join that cluster
    instead) and shut down before this returns."""
    try:
        import ray
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler
    except ImportError:
        raise AzserveError(
            "azserve tune needs Ray Tune: pip install 'azserve[tune]' (or 'ray[tune]')"
        ) from None
    from azserve.run.tune_trial import Progress, Trial, trial_name

    # No usage statistics sent from a tune unless asked for; Ray's own progress tables off:
    # Progress prints one line per event.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address:
        kwargs["address"] = address
    else:  # a Ray of its own, never one that happens to run here
        kwargs.update(address="local", include_dashboard=False)
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise AzserveError(f"--address {address}: cannot join the Ray cluster: {e}") from None
    except Exception as e:  # Ray's own start-up failure is a bare Exception (a raylet too slow)
        raise AzserveError(f"Ray did not start: {e}") from None
    path = out / RAY_DIR / EXPERIMENT
    try:
        trainable = tune.with_resources(
            tune.with_parameters(Trial, tune_setup=setup.to_json(), out=str(out)), resources
        )
        if resume and tune.Tuner.can_restore(str(path)):
            tuner = tune.Tuner.restore(str(path), trainable)
        else:
            scheduler = ASHAScheduler(
                time_attr="quarters",
                metric="rating",
                mode="max",
                max_t=QUARTERS,
                grace_period=RUNGS[0],
                reduction_factor=REDUCTION,
            )
            tuner = tune.Tuner(
                trainable,
                param_space={"trial": tune.grid_search(list(range(len(setup.points))))},
                tune_config=tune.TuneConfig(
                    scheduler=scheduler,
                    max_concurrent_trials=setup.concurrent,
                    trial_name_creator=trial_name,
                    trial_dirname_creator=trial_name,
                ),
                run_config=tune.RunConfig(
                    name=EXPERIMENT,
                    storage_path=str(out / RAY_DIR),
                    verbose=0,
                    callbacks=[Progress(setup.to_json())],
                    # A trial interrupted mid-run trains afresh (tune_trial): nothing to save.
                    checkpoint_config=tune.CheckpointConfig(
                        checkpoint_frequency=0, checkpoint_at_end=False
                    ),
                ),
            )
        tuner.fit()
        return trial_statuses(tune.ExperimentAnalysis(str(path)).trials)
    finally:
        ray.shutdown()


def trial_statuses(trials: list[Any]) -> dict[str, dict[str, Any]]:
    """Trial label -> its ``status`` (``finished``, ``stopped`` by ASHA, ``failed``, or ``not
    run`` to an end: an interrupted tune), its last ``quarters`` and its ``error`` (the last
    line), from Ray Tune's trials."""
    out: dict[str, dict[str, Any]] = {}
    for t in trials:
        quarters = (t.last_result or {}).get("quarters")
        error = None
        if t.status == "ERROR":
            status = "failed"
            raw = t.get_error()
            error = str(raw).strip().splitlines()[-1] if raw is not None else "(no message)"
        elif t.status == "TERMINATED":
            status = "finished" if quarters == QUARTERS else "stopped"
        else:
            status = "not run"
        label = trial_label(int(t.config["trial"]))
        out[label] = {"status": status, "quarters": quarters, "error": error}
    return out


def run_tune_command(args: argparse.Namespace) -> int:
    """The ``azserve tune`` main."""
    from azserve.run.tune_report import write_outputs

    out = Path(args.run_dir).resolve()
    setup = saved_setup(args, out) if args.resume else start_setup(args, out)
    print(
        f"tune: {len(setup.points)} trials of {setup.game}, {setup.trial_minutes:g} min each "
        f"({setup.hours:g} h in all, {setup.concurrent} at a time), rated at "
        f"{', '.join(f'{q}/{QUARTERS}' for q in RUNGS[:-1])} and the end of their time on one "
        f"ladder ({setup.ladder_games} games a rung, {setup.ladder_sims} simulations a move, "
        f"anchors {', '.join(setup.ladder_anchors)}); ASHA stops those below the median; "
        f"in {out}" + (" (resumed)" if args.resume else ""),
        flush=True,
    )
    resources = {"cpu": float(args.trial_cpus), "gpu": float(args.trial_gpus)}
    statuses = run_trials(setup, out, args.resume, args.address, resources)
    summary = write_outputs(setup, out, statuses)
    print(summary.table, flush=True)
    print(summary.verdict, flush=True)
    unfinished = [label for label, s in statuses.items() if s["status"] == "not run"]
    if unfinished:
        print(
            f"tune: {len(unfinished)} trial(s) did not run to an end ({', '.join(unfinished)}): "
            f"continue with azserve tune --run-dir {args.run_dir} --resume",
            file=sys.stderr,
        )
        return 130
    return 0 if summary.best is not None else 1


__all__ = ["run_tune_command", "run_trials", "trial_statuses"]
