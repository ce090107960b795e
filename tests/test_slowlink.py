"""The chaos fleet's delay (``azserve.perf.slowlink``): a transparent forwarder in a namespaced
host, fed by an nftables redirect, carries the host's TCP connections to other hosts intact, in
order, and held as the control file says; the partition rules still cut the forwarded
connections off. Real namespaces, real sockets (root only)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from azserve.perf.netfaults import clear_fault, partition_rules, set_fault
from azserve.perf.netns import destroy_lan, make_lan, unavailable
from azserve.perf.slowlink import Delays, redirect_rules, write_delays

pytestmark = pytest.mark.timeout(120)

# One thread a connection, and a connection's reset ends only that connection: the one-way cut
# below leaves a half-open connection that completes when the cut heals, after its client left.
ECHO = """
import socket, sys, threading
def echo(c):
    try:
        while b := c.recv(65536):
            c.sendall(b)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"""

# Talks to the echo server at ADDRESS:PORT: 1 MB of random bytes must come back as sent, then
# the round trip of one byte, printed; exits 4 when refused, 3 when not connected within 2 s. ARGV: ADDRESS
# PORT TIMEOUT_S (of each read).
CLIENT = """
import os, socket, sys, time
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
except ConnectionRefusedError:
    sys.exit(4)
except OSError:
    sys.exit(3)
s.settimeout(float(sys.argv[3]))
data = os.urandom(1 << 20)
s.sendall(data)
got = bytearray()
while len(got) < len(data):
    got += s.recv(65536)
assert bytes(got) == data, "the bytes came back changed or out of order"
t = time.monotonic(); s.sendall(b"x"); assert s.recv(1) == b"x"
print(f"rtt {time.monotonic() - t:.3f}")
"""


def test_delays_are_read_from_the_control_file(tmp_path: Path) -> None:
    control = tmp_path / "delays.json"
    d = Delays(control)
    d.refresh()
    assert d.of("10.0.0.1") == (0.0, 0.0)  # no file: no delay
    write_delays(control, {"10.0.0.2": (200.0, 50.0)})
    d.refresh()
    assert d.of("10.0.0.1", "10.0.0.2") == (0.2, 0.05)  # slow when either end is
    assert d.of("10.0.0.1", "10.0.0.3") == (0.0, 0.0)
    control.write_text("{not json")
    d.refresh()  # a bad file keeps the delays it had
    assert d.of("10.0.0.2") == (0.2, 0.05)
    write_delays(control, {})
    d.refresh()
    assert d.of("10.0.0.2") == (0.0, 0.0)


def test_forwarded_connections_arrive_intact_held_and_partitioned(tmp_path: Path) -> None:
    if unavailable() or shutil.which("nft") is None:
        pytest.skip(unavailable() or "nft not installed")
    lan = make_lan(2)
    control = tmp_path / "delays.json"
    write_delays(control, {})
    procs: list[subprocess.Popen[bytes]] = []
    try:
        a, b = lan[0], lan[1]
        procs.append(b.popen([sys.executable, "-c", ECHO, b.address, "7000"]))
        fwd = a.popen(
            [sys.executable, "-m", "azserve.perf.slowlink", "--own", a.address,
             "--port", "7999", "--control", str(control)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(fwd)
        assert fwd.stdout is not None
        assert b"forwarding on 127.0.0.1:7999" in fwd.stdout.readline()
        r = a.run(["nft", "-f", "-"], input=redirect_rules(lan.subnet, a.address, 7999))
        assert r.returncode == 0, r.stderr

        listening = "import socket, sys; socket.create_connection((sys.argv[1], 7000), timeout=1)"
        for _ in range(100):  # the echo server, from its own host (no redirect there)
            if b.run([sys.executable, "-c", listening, b.address]).returncode == 0:
                break
            time.sleep(0.1)

        def client() -> subprocess.CompletedProcess[str]:
            return a.run([sys.executable, "-c", CLIENT, b.address, "7000", "30"], timeout=60)

        plain = client()
        assert plain.returncode == 0, plain.stderr
        # the connection went through the forwarder: without it, nothing connects
        write_delays(control, {b.address: (150.0, 100.0)})
        time.sleep(0.5)  # the forwarder polls every 0.1 s
        slow = client()
        assert slow.returncode == 0, slow.stderr  # jitter reordered nothing
        rtt = float(slow.stdout.split()[1])
        assert rtt >= 0.3, slow.stdout  # 150 ms each way, at least
        write_delays(control, {})
        time.sleep(0.5)
        # a partition still drops the host's packets silently: no connection, no refusal
        set_fault(a, partition_rules("out", None))
        cut = a.run([sys.executable, "-c", CLIENT, b.address, "7000", "3"], timeout=60)
        assert cut.returncode == 3, cut.stderr
        clear_fault(a)
        # and one cut only on the way back (the forwarder's connection out gets no answer)
        set_fault(b, partition_rules("out", None))
        cut = a.run([sys.executable, "-c", CLIENT, b.address, "7000", "3"], timeout=60)
        assert cut.returncode == 1 and "timed out" in cut.stderr, cut.stderr
        clear_fault(b)
        healed = client()
        assert healed.returncode == 0, healed.stderr
        fwd.terminate()
        fwd.wait(timeout=10)
        time.sleep(0.2)
        gone = a.run([sys.executable, "-c", CLIENT, b.address, "7000", "3"])
        assert gone.returncode == 4, gone.stderr  # redirected to a closed port: every connection
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
        destroy_lan(lan)
