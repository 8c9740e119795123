"""Every site in a network namespace of its own, joined by veth links and a bridge, each access link's rate
set in the kernel by a ``tbf`` qdisc.

:class:`SiteNamespaces` builds, with iproute2's ``ip`` and ``tc``: one hub namespace holding a bridge (IGMP
snooping off, so that multicast floods to every port as a WAN's multicast reaches every member's edge) and,
per site, a namespace whose ``wr0`` interface is one end of a veth pair, the other end a port of the bridge.
Site ``s`` has the address ``10.87.0.<s + 1>/24``; the links carry jumbo frames (MTU 9000). A ``tbf``
qdisc on both ends of each pair limits the site's link to its access rate in each direction. A process
enters its site's namespace with :meth:`SiteNamespaces.enter` (``setns(2)``) before it opens a socket,
and then binds to :meth:`SiteNamespaces.address`. The one-way delays stay in user space
(:class:`~.netio.WanEmulator`): ``netem`` is not available on every kernel.

Everything made is removed when the ``with`` block ends, however it ends: deleting a namespace deletes its
interfaces and qdiscs with it. Making them needs root (``CAP_NET_ADMIN``) and iproute2; where that fails,
:class:`NamespacesUnavailable` says why in one line, and callers fall back to one interface.
"""

import ctypes
import ctypes.util
import os
import shutil
import subprocess

__all__ = ["SiteNamespaces", "NamespacesUnavailable", "namespaces"]

_CLONE_NEWNET = 0x40000000
#: Bytes a tbf bucket holds at least: more than a jumbo frame.
MIN_BURST = 16 << 10
#: The links' MTU: jumbo frames, so that chunks up to MAX_CHUNK_BYTES fit one datagram.
MTU = 9000
#: Seconds of the link's rate a tbf queue holds before it drops: more than a window of chunks.
QUEUE_S = 0.5


class NamespacesUnavailable(Exception):
    """Network namespaces, veth links or tbf cannot be made here (one line saying why)."""


def _run(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if proc.returncode:
        raise NamespacesUnavailable(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or proc.returncode}")


class SiteNamespaces:
    """``n`` site namespaces named ``<prefix>s<i>`` and a hub ``<prefix>hub``; ``rates_Bps[i]`` is site i's
    access-link rate in bytes/s on the wire (both directions)."""

    def __init__(self, n, rates_Bps, *, prefix=None):
        if n < 1 or n > 250:
            raise ValueError(f"The number of sites must be in 1..250, not {n}.")
        rates = [float(r) for r in rates_Bps]
        if len(rates) != n or not all(r > 0 for r in rates):
            raise ValueError("Every site needs a positive access-link rate.")
        self.n, self.rates = n, rates
        self.prefix = prefix or f"wr{os.getpid()}"
        self.made = []

    def name(self, site):
        return f"{self.prefix}s{site}"

    def address(self, site):
        """Site ``site``'s IPv4 address on its link."""
        return f"10.87.0.{site + 1}"

    def __enter__(self):
        if os.geteuid() != 0:
            raise NamespacesUnavailable("network namespaces need root (CAP_NET_ADMIN)")
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                raise NamespacesUnavailable(f"iproute2's `{tool}` is not installed")
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _build(self):
        hub = f"{self.prefix}hub"
        _run("ip", "netns", "add", hub)
        self.made.append(hub)
        _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        _run("ip", "-n", hub, "link", "set", "br0", "up")
        for s in range(self.n):
            ns = self.name(s)
            _run("ip", "netns", "add", ns)
            self.made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "add", "wr0", "type", "veth", "peer", "name", f"p{s}", "netns", hub)
            _run("ip", "-n", ns, "addr", "add", f"{self.address(s)}/24", "dev", "wr0")
            _run("ip", "-n", ns, "link", "set", "wr0", "mtu", str(MTU))
            _run("ip", "-n", hub, "link", "set", f"p{s}", "mtu", str(MTU))
            _run("ip", "-n", ns, "link", "set", "wr0", "up")
            _run("ip", "-n", hub, "link", "set", f"p{s}", "master", "br0")
            _run("ip", "-n", hub, "link", "set", f"p{s}", "up")
            for where, dev in ((ns, "wr0"), (hub, f"p{s}")):
                self._rate(where, dev, self.rates[s])

    @staticmethod
    def _rate(ns, dev, rate_Bps):
        bits = int(rate_Bps * 8)
        burst = min(max(MIN_BURST, int(rate_Bps / 1000)), 1 << 28)
        limit = min(max(4 * burst, int(rate_Bps * QUEUE_S)), 1 << 30)  # tc takes 32 bits
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
             f"{bits}bit", "burst", str(burst), "limit", str(limit))  # fmt: skip

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made = []
        return False

    def enter(self, site):
        """Move the calling process (a forked site process, before it opens any socket) into site
        ``site``'s namespace."""
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fd = os.open(f"/run/netns/{self.name(site)}", os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise NamespacesUnavailable(f"cannot enter namespace {self.name(site)}: {os.strerror(err)}")
        finally:
            os.close(fd)

    def qdiscs(self, site):
        """``tc qdisc show`` of site ``site``'s link (what the kernel limits it to)."""
        proc = subprocess.run(
            ["ip", "netns", "exec", self.name(site), "tc", "qdisc", "show", "dev", "wr0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout.strip()


def namespaces():
    """The names of the network namespaces that exist now (``ip netns list``)."""
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
