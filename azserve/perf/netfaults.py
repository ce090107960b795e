"""The chaos fleet's network faults on one namespaced host (``azserve bench chaos``): a
partition or packet loss as an nftables table of its own inside the host's namespace, a rate
limit as a ``tc`` ``tbf`` qdisc on its link; ``clear_fault`` heals either. Root only, as the
namespaces are."""

from __future__ import annotations

import shutil

from azserve.errors import AzserveError
from azserve.perf.netns import NetnsHost

_TABLE = "azchaos"


def partition_rules(way: str, peer: str | None) -> str:
    """An nftables script dropping the host's traffic (loopback spared) ``way`` (``both``,
    ``in``, ``out``), with every other host or only with ``peer``'s address."""
    lines = [f"table inet {_TABLE} {{"]
    if way in ("both", "in"):
        match = f"ip saddr {peer} " if peer else ""
        lines += ["  chain in {", "    type filter hook input priority 0; policy accept;",
                  '    iifname "lo" accept', f"    {match}drop", "  }"]  # fmt: skip
    if way in ("both", "out"):
        match = f"ip daddr {peer} " if peer else ""
        lines += ["  chain out {", "    type filter hook output priority 0; policy accept;",
                  '    oifname "lo" accept', f"    {match}drop", "  }"]  # fmt: skip
    return "\n".join([*lines, "}", ""])


def loss_rules(pct: int) -> str:
    """An nftables script dropping ``pct``% of the host's packets each way, at random."""
    rule = f"numgen random mod 100 < {pct} drop"
    return "\n".join([
        f"table inet {_TABLE} {{",
        "  chain in {", "    type filter hook input priority 0; policy accept;",
        f'    iifname != "lo" {rule}', "  }",
        "  chain out {", "    type filter hook output priority 0; policy accept;",
        f'    oifname != "lo" {rule}', "  }",
        "}", "",
    ])  # fmt: skip


def set_fault(host: NetnsHost, fault: str) -> None:
    """Apply an nftables script, or ``tbf KBIT`` (a rate limit on the host's link)."""
    if fault.startswith("tbf "):
        kbit = int(fault.split()[1])
        cmd = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", f"{kbit}kbit",
               "burst", "16kbit", "latency", "500ms"]  # fmt: skip
        r = host.run(cmd)
    else:
        r = host.run(["nft", "-f", "-"], input=fault)
    if r.returncode != 0:
        raise AzserveError(f"chaos: could not set {fault!r} on {host.name}: {r.stderr.strip()}")


def clear_fault(host: NetnsHost) -> None:
    """Heal the host: drop the strike's table and any rate limit (either may be absent)."""
    host.run(["nft", "delete", "table", "inet", _TABLE])
    host.run(["tc", "qdisc", "del", "dev", "eth0", "root"])


def network_unavailable() -> str | None:
    """Why network strikes cannot be made here (None when they can)."""
    missing = [c for c in ("nft", "tc") if shutil.which(c) is None]
    if missing:
        return f"{' and '.join(missing)} not found (Debian: apt-get install nftables iproute2)"
    return None


__all__ = ["clear_fault", "loss_rules", "network_unavailable", "partition_rules", "set_fault"]
