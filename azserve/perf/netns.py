"""Hosts on one machine: network namespaces joined on one private /24, for the cluster tests
and ``azserve bench chaos`` (root only).

API:

- ``NetnsLan``: a sequence of ``n`` ``NetnsHost`` (``lan[0]``, ``len(lan)``, iteration) plus
  ``root_address``, the address of this machine's own (root) namespace on the LAN, so that a
  launcher or a probe running outside every namespace reaches them too; ``subnet`` (CIDR);
  ``hub`` and ``root_link`` (the plumbing's names).
- ``NetnsHost``: ``name`` (the ``ip netns`` name), ``address`` (IPv4 on the LAN, e.g.
  ``10.77.5.1``); ``argv(cmd)`` -> ``["ip", "netns", "exec", name, *cmd]``; ``run(cmd, **kw)``
  (``subprocess.run``, text output captured unless overridden); ``popen(cmd, **kw)``
  (``subprocess.Popen`` in a new session); ``pids()`` (every process inside the namespace).
- ``make_lan(n) -> NetnsLan`` and ``destroy_lan(lan)``: make a LAN and take it down;
  ``destroy_lan`` kills every process left in the namespaces (``ip netns pids``, SIGKILL) and
  deletes them (the bridge and veths go with them).
- ``unavailable() -> str | None``: why namespaces cannot be made here (None when they can).

Layout: a hidden hub namespace holds a bridge; each host namespace has ``lo`` up and ``eth0``
(a veth to the bridge) at ``.1``, ``.2``, ...; the root namespace joins the bridge at ``.254``.
The bridge lives in the hub, not in the root namespace, so the machine's firewall never sees
host-to-host traffic. Names carry the creating pid (``azt<pid>x<k>``) and each LAN gets its own
``10.77.<k>.0/24``, so parallel runs never collide; LANs left by a killed run are swept on the
next creation.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

_LOCK = Path("/run/azserve-netns.lock")
_NAME = re.compile(r"^azt(\d+)x(\d+)-")
_counter = itertools.count()


@dataclass(frozen=True)
class NetnsHost:
    """One network namespace, reached at ``address`` from every other host of its LAN."""

    name: str
    address: str

    def argv(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` prefixed so that it runs inside this namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def run(self, cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """``subprocess.run`` inside the namespace (output captured as text by default)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(self.argv(cmd), **kw)

    def popen(self, cmd: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen`` inside the namespace, in a session of its own."""
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(self.argv(cmd), **kw)

    def pids(self) -> list[int]:
        """Every process running inside the namespace."""
        return _pids(self.name)

    def azserve_pids(self, *words: bytes) -> list[int]:
        """The pids of the azserve processes in the namespace whose command line has every one
        of ``words`` as an argument (``b"serve"``, ``b"--rank"``)."""
        found = []
        for pid in self.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"azserve.cli.main" in cmd and all(w in cmd for w in words):
                found.append(pid)
        return found

    def azserve_pid(self, word: bytes) -> int:
        """The pid of the azserve process in the namespace whose command line has ``word``;
        ``LookupError`` when there is none."""
        pids = self.azserve_pids(word)
        if not pids:
            raise LookupError(f"no azserve process with {word!r} in {self.name}")
        return pids[0]


@dataclass(frozen=True)
class NetnsLan(Sequence[NetnsHost]):
    """Host namespaces on one bridge, plus the root namespace at ``root_address``."""

    hosts: tuple[NetnsHost, ...]
    hub: str
    subnet: str
    root_address: str
    root_link: str

    @overload
    def __getitem__(self, i: int) -> NetnsHost: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[NetnsHost]: ...
    def __getitem__(self, i: int | slice) -> NetnsHost | Sequence[NetnsHost]:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def __iter__(self) -> Iterator[NetnsHost]:
        return iter(self.hosts)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the cluster tests as root)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = f"azt{os.getpid()}x{next(_counter)}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def make_lan(n: int) -> NetnsLan:
    """``n`` host namespaces on a fresh /24 (see the module docstring); on any failure what was
    made is removed and the error raised."""
    if not 1 <= n <= 250:
        raise ValueError(f"n={n}: between 1 and 250 hosts")
    with _locked():
        _sweep_dead()
        k = next(_counter)
        tag = f"azt{os.getpid()}x{k}"
        subnet = _free_subnet()
        prefix = subnet.rsplit(".", 1)[0]
        hub = f"{tag}-hub"
        hosts = tuple(NetnsHost(f"{tag}-{i}", f"{prefix}.{i + 1}") for i in range(n))
        lan = NetnsLan(hosts, hub, f"{subnet}/24", f"{prefix}.254", root_link=f"{tag}r")
        try:
            _build(lan)
        except BaseException:
            destroy_lan(lan)
            raise
    return lan


def destroy_lan(lan: NetnsLan) -> None:
    """Kill every process left in the LAN's namespaces, then delete them (hub last) and the
    root namespace's leg (the kernel frees a deleted namespace's links only later)."""
    names = [h.name for h in lan.hosts] + [lan.hub]
    for name in names:
        _kill_all(name)
    _ip("link", "del", lan.root_link, check=False)
    for name in names:
        _ip("netns", "del", name, check=False)


def _build(lan: NetnsLan) -> None:
    _ip("netns", "add", lan.hub)
    _ip("-n", lan.hub, "link", "set", "lo", "up")
    _ip("-n", lan.hub, "link", "add", "br0", "type", "bridge")
    _ip("-n", lan.hub, "link", "set", "br0", "up")
    for i, host in enumerate(lan.hosts):
        _ip("netns", "add", host.name)
        _ip("-n", host.name, "link", "set", "lo", "up")
        port = f"p{i}"
        _ip("-n", lan.hub, "link", "add", port, "type", "veth", "peer", "eth0", "netns", host.name)
        _ip("-n", lan.hub, "link", "set", port, "master", "br0", "up")
        _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.name, "link", "set", "eth0", "up")
    # The root namespace's own leg: created here, its peer moved into the hub.
    _ip("link", "add", lan.root_link, "type", "veth", "peer", "root", "netns", lan.hub)
    _ip("-n", lan.hub, "link", "set", "root", "master", "br0", "up")
    _ip("addr", "add", f"{lan.root_address}/24", "dev", lan.root_link)
    _ip("link", "set", lan.root_link, "up")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _pids(name: str) -> list[int]:
    done = _ip("netns", "pids", name, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _kill_all(name: str) -> None:
    deadline = time.monotonic() + 10
    while (pids := _pids(name)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def _sweep_dead() -> None:
    """Remove LANs whose creating process is gone (a test run killed before its teardown)."""
    for name in _namespaces():
        m = _NAME.match(name)
        if m and not _alive(int(m.group(1))):
            _kill_all(name)
            _ip("netns", "del", name, check=False)
            if name.endswith("-hub"):
                _ip("link", "del", f"azt{m.group(1)}x{m.group(2)}r", check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> str:
    """``10.77.<k>.0`` for the first ``k`` that no root-namespace address uses."""
    used = _ip("-4", "-o", "addr", "show").stdout
    for k in range(256):
        if f" 10.77.{k}." not in used:
            return f"10.77.{k}.0"
    raise RuntimeError("every 10.77.<k>.0/24 is in use on this machine")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialise LAN creation across processes (subnet choice and the sweep)."""
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
