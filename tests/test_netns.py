"""tests/netns.py itself: hosts reach each other and the root namespace over TCP, and the
teardown leaves no namespace and no process behind."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.netns import destroy_lan, make_lan, unavailable

pytestmark = pytest.mark.cluster

_ECHO_SERVER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], 7001)); s.listen(); print('ready', flush=True)\n"
    "while True:\n"
    "    c,a=s.accept(); c.sendall(a[0].encode()); c.close()\n"
)
_ASK = (
    "import socket,sys\n"
    "c=socket.create_connection((sys.argv[1], 7001), timeout=10); print(c.recv(100).decode())\n"
)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_hosts_reach_each_other_and_root(netns_hosts) -> None:
    lan = netns_hosts(2)
    a, b = lan
    assert a.address != b.address and a.name != b.name
    server = a.popen([sys.executable, "-c", _ECHO_SERVER, a.address], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        # From b: the server sees b's address, so traffic crossed the bridge.
        assert b.run([sys.executable, "-c", _ASK, a.address]).stdout.strip() == b.address
        # From the root namespace, outside every host.
        root = subprocess.run(
            [sys.executable, "-c", _ASK, a.address], capture_output=True, text=True, timeout=30
        )
        assert root.stdout.strip() == lan.root_address
        # Loopback inside a host is its own: a's port is not open on b's 127.0.0.1.
        assert b.run([sys.executable, "-c", _ASK, "127.0.0.1"]).returncode != 0
        assert server.pid in a.pids()
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


def test_destroy_kills_leftover_processes_and_removes_namespaces() -> None:
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    lan = make_lan(1)
    (host,) = lan
    left = host.popen(["sleep", "300"])
    # `ip netns exec` enters the namespace only after it starts: wait until it is listed there.
    deadline = time.monotonic() + 10
    while left.pid not in host.pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert left.pid in host.pids()
    destroy_lan(lan)
    assert left.wait(timeout=10) == -9
    assert not {host.name, lan.hub} & _namespaces()
    up = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert lan.root_address not in up


def test_two_lans_get_distinct_subnets(netns_hosts) -> None:
    first, second = netns_hosts(1), netns_hosts(1)
    assert first.subnet != second.subnet
    assert first[0].name != second[0].name


def test_a_lan_left_by_a_killed_run_is_swept(netns_hosts) -> None:
    made = subprocess.run(
        [sys.executable, "-c", "from tests.netns import make_lan; print(make_lan(1)[0].name)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    orphan = made.stdout.strip()
    assert orphan in _namespaces()  # its maker exited without tearing it down
    netns_hosts(1)
    assert orphan not in _namespaces()
    assert (
        orphan.rsplit("-", 1)[0] + "r"
        not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )
