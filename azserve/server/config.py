"""The inference server's config section."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerConfig:
    """The inference server's socket, batching, versions and metrics."""

    bind: str = "tcp://127.0.0.1:5555"
    """ZeroMQ endpoint of the ROUTER socket (``tcp://HOST:PORT`` or ``ipc://PATH``); loopback by
    default. The truth for ``client.server`` and ``learner.servers``, which follow it unless set."""
    model: str = "default"
    """Model name clients must send."""
    max_batch_size: int = 256
    """Most rows in one batch; also the most rows one request may carry."""
    max_queue_delay_us: int = 2000
    """How long the oldest queued request may wait for the batch to fill."""
    max_queued_rows: int = 1 << 16
    """Rows queued over all versions before new requests get an ``Overloaded`` error."""
    max_versions: int = 8
    """Weight versions resident at once."""
    memory_budget_mb: float = 2048.0
    """Memory all resident versions may use; a load past it (nothing evictable) fails."""
    version_grace_s: float = 10.0
    """An unpinned old version stays this long after its last request."""
    max_lease_s: float = 600.0
    """Longest lease a client may ask for: a dead client cannot pin a version for longer."""
    max_leases: int = 10_000
    """Clients that may hold leases at once; a new client past it gets ``Overloaded``."""
    max_message_mb: float = 256.0
    """Largest inbound message: ZeroMQ drops the connection of a peer that sends more, before
    allocating it. Weight loads are the largest messages; an eval request of
    ``max_batch_size`` float32 rows must fit (checked at start)."""
    max_queued_replies: int = 10_000
    """Replies queued to one peer that does not read them; past it ZeroMQ drops replies to
    that peer (it resends after ``client.retry_after_s``), so memory stays bounded."""
    cache_mb: float = 0.0
    """Evaluation cache shared by every client (``azserve/server/rowcache.py``): rows already
    computed on the same version are answered without the network, and a position several
    requests of one batch carry is computed once. Bounded by this many MB (0 = off, the
    default: the actors cache for themselves, ``actors.cache_mb``)."""
    metrics_port: int = 0
    """Prometheus text endpoint port on ``metrics_host`` (0 = off)."""
    metrics_host: str = "127.0.0.1"
    """Address of the metrics endpoint."""
    status_interval_s: float = 5.0
    """Seconds between status lines (0 = none)."""
