"""A throttled network on one machine: one network namespace per rank, joined through a bridge.

Each rank's namespace holds one veth end renamed `eth0` with a link-local address
(169.254.77.<rank + 1>/24); the other end sits on a bridge in the root namespace, which has no
address. No route or NAT leads out, so traffic stays between the test's own namespaces. Rates are
shaped with `tbf` on both ends of every veth (a qdisc shapes egress only). `netem` is missing on
these machines, so links add no latency: rate only. gloo must bind to eth0 (`GLOO_SOCKET_IFNAME`),
or it picks the hostname's 127.0.0.1 and fails to connect across namespaces.

    with ThrottledNetwork(ranks=5, rate="1gbit") as net:
        LocalJob(cfg, placement=net).run()
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import tempfile
from typing import Optional

SUBNET = "169.254.77"
PRESETS = {"10gbit": "10gbit", "1gbit": "1gbit", "100mbit": "100mbit", "unshaped": None}
_RATE = re.compile(r"^(\d+)(gbit|mbit|kbit)$")


class NetnsUnavailable(RuntimeError):
    """Namespaces, veths, bridges or tc cannot be used here (not root, no CAP_NET_ADMIN, ...)."""


def rate_bytes_per_s(rate: str) -> float:
    m = _RATE.match(rate)
    if not m:
        raise ValueError(f"rate {rate!r}: expected e.g. 10gbit, 1gbit or 100mbit")
    return int(m.group(1)) * {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}[m.group(2)] / 8


class ThrottledNetwork:
    def __init__(self, ranks: int, rate: Optional[str], tag: Optional[str] = None):
        if ranks > 250:
            raise ValueError("at most 250 ranks fit the /24")
        self.ranks = ranks
        self.rate = rate
        # The full pid keeps tags unambiguous for reap_stale(); "gr" + 7 digits + "h249" still
        # fits the 15-character interface name limit.
        self.tag = tag or f"gr{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.master_addr = self.address(0)
        self.env = {"GLOO_SOCKET_IFNAME": "eth0"}
        self._made: list[list[str]] = []  # undo commands, run in reverse

    def namespace(self, rank: int) -> str:
        return f"{self.tag}-r{rank}"

    def address(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    def prefix(self, rank: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(rank)]

    def _ip(self, *args: str, undo: Optional[list[str]] = None) -> None:
        done = subprocess.run(list(args), capture_output=True, text=True)
        if done.returncode:
            raise NetnsUnavailable(f"`{' '.join(args)}` failed: {done.stderr.strip()}")
        if undo:
            self._made.append(undo)

    def _shape(self, *dev: str) -> None:
        if self.rate is None:
            return
        # tbf needs a bucket of at least rate / HZ; 4 ms of traffic covers HZ >= 250.
        burst = max(64 * 1024, int(rate_bytes_per_s(self.rate) / 250))
        self._ip(*dev[:-1], "tc", "qdisc", "add", "dev", dev[-1], "root", "tbf", "rate", self.rate,
                 "burst", str(burst), "latency", "100ms")

    def __enter__(self) -> "ThrottledNetwork":
        with _reap_lock():  # no reaper sees a network half-made (see reap_stale)
            return self._make()

    def _make(self) -> "ThrottledNetwork":
        try:
            self._ip("ip", "link", "add", self.bridge, "type", "bridge",
                     undo=["ip", "link", "del", self.bridge])
            self._ip("ip", "link", "set", self.bridge, "up")
            for r in range(self.ranks):
                ns, host, peer = self.namespace(r), f"{self.tag}h{r}", f"{self.tag}n{r}"
                self._ip("ip", "netns", "add", ns, undo=["ip", "netns", "del", ns])
                self._ip("ip", "link", "add", host, "type", "veth", "peer", "name", peer,
                         undo=["ip", "link", "del", host])
                self._ip("ip", "link", "set", peer, "netns", ns)
                self._ip("ip", "-n", ns, "link", "set", peer, "name", "eth0")
                self._ip("ip", "-n", ns, "addr", "add", f"{self.address(r)}/24", "dev", "eth0")
                self._ip("ip", "-n", ns, "link", "set", "eth0", "up")
                self._ip("ip", "-n", ns, "link", "set", "lo", "up")
                self._ip("ip", "link", "set", host, "master", self.bridge)
                self._ip("ip", "link", "set", host, "up")
                self._shape(host)  # into the namespace
                self._shape("ip", "netns", "exec", ns, "eth0")  # out of it
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        while self._made:
            subprocess.run(self._made.pop(), capture_output=True)

    def __exit__(self, *exc) -> None:
        self.close()


def leftovers(tag_prefix: str = "gr") -> list[str]:
    """Namespaces a crashed run may have left behind (`ip netns del` them)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(tag_prefix)]


_OWNED = re.compile(r"^gr(\d+)(?:-r\d+|br|h\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _reap_lock():
    """Making a network and reaping are exclusive across processes: a reaper in another process
    (two benchmarks, or two test lanes) must not delete a network while it is being made, as it
    would one tagged with a pid that has exited (tests/bench/test_netns_reap.py makes such one)."""
    with open(os.path.join(tempfile.gettempdir(), "grappa-netns.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def reap_stale() -> list[str]:
    """Delete namespaces and links of runs whose process is gone (a SIGKILL skips close()).
    Networks of live processes are left alone; returns what was deleted."""
    with _reap_lock():
        return _reap()


def _reap() -> list[str]:
    names = [line.split()[0] for line in
             subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()]
    links = [line.split()[0].split("@")[0] for line in
             subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout.splitlines()]
    gone = []
    for kind, name in [("netns", n) for n in names] + [("link", n) for n in links]:
        m = _OWNED.match(name)
        if m and not _alive(int(m.group(1))):
            done = subprocess.run(["ip", kind, "del", name], capture_output=True)
            if done.returncode == 0:
                gone.append(name)
    return gone
