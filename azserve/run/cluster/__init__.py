"""``azserve launch --cluster``: servers, learner and actor groups across hosts, placed by Ray,
Slurm or ssh, supervised like ``azserve train``. ZeroMQ carries all traffic; the engines only
place, start and restart processes.

Modules: ``spec`` (the cluster file), ``plan`` (processes, endpoints, per-role configs),
``engines`` (ssh / command prefix / Slurm), ``slurm`` (allocation nodes), ``ray_engine``,
``keys`` (per-role CURVE files), ``remote`` (the watchdog on each host, standard library only),
``run`` (the launch under the train supervisor)."""

from azserve.lazy import lazy_getattr

_LAZY = {
    "ClusterSpec": "azserve.run.cluster.spec",
    "load_cluster": "azserve.run.cluster.spec",
    "ClusterRun": "azserve.run.cluster.run",
    "dry_run": "azserve.run.cluster.run",
}
__all__ = sorted(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
