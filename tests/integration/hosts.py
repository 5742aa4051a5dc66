"""Hosts on one machine: each a Linux network namespace with one veth link to a bridge, as a lab's
worker hosts and API host on one LAN (needs root and iproute2's `ip netns`; :func:`unavailable` says
why not, and the tests skip with it).

The bridge's own address, in the root namespace, is the database host: the tests start PostgreSQL and
Redis there, listening on it (and on loopback, for the test's own reads). A host's processes see
only the bridge's subnet; a link set down drops their packets (a partition: TCP connections hang,
as across a failed switch port, instead of being refused).

    with Lab("t1") as lab:
        api = lab.add_host("api")             # 10.213.K.2
        proc = lab.spawn(api, [...], env, log)
        lab.set_link(api, up=False)           # partitioned; up=True heals it

Names carry a number K of this process (interfaces: 15 characters at most) so that two test runs on
one machine do not meet; a run that died without closing its lab leaves namespaces that the next
Lab of the same K deletes first.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.integration.procs import spawn


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> str | None:
    """Why hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return f"network namespaces need root (this runs as uid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"smdprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _remove_namespace(namespace: str) -> None:
    for pid in _ip("netns", "pids", namespace, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ip("netns", "del", namespace, check=False)   # its veth pair goes with it once no process holds it


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str     # its address on the bridge
    link: str        # the root namespace's end of its veth pair


class Lab:
    """A bridge and the hosts on it; ``close`` deletes them (the caller stops their processes first)."""

    def __init__(self, tag: str):
        self.k = 20 + os.getpid() % 200
        self.prefix = f"smd{self.k}{tag}"[:9]
        self.bridge = f"{self.prefix}br"
        self.gateway = f"10.213.{self.k}.1"   # the database host: the root namespace's address on the bridge
        self.hosts: dict[str, Host] = {}
        self._clean()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def subnet(self) -> str:
        return f"10.213.{self.k}.0/24"

    def add_host(self, name: str) -> Host:
        n = len(self.hosts) + 2
        host = Host(name, f"{self.prefix}-{name}", f"10.213.{self.k}.{n}", f"{self.prefix}v{n}")
        inner = f"{self.prefix}i{n}"
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", host.namespace)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", inner)
        _ip("-n", host.namespace, "link", "set", inner, "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def spawn(self, host: Host, args: list[str], env: dict, log: Path) -> subprocess.Popen:
        """``args`` run on ``host`` (`ip netns exec` execs them: the pid is theirs), in a session of their
        own, output to ``log``."""
        return spawn(["ip", "netns", "exec", host.namespace, *args], env, log)

    def set_link(self, host: Host, *, up: bool) -> None:
        _ip("link", "set", host.link, "up" if up else "down")

    def close(self) -> None:
        """Kill whatever still runs on the hosts (a namespace lives on while a process is in it, and with
        it its link), then delete them and the bridge."""
        for host in self.hosts.values():
            _remove_namespace(host.namespace)
        _ip("link", "del", self.bridge, check=False)
        self.hosts = {}

    def _clean(self) -> None:
        """What a run of the same number left behind when it died."""
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            namespace = line.split(" ")[0]
            if namespace.startswith(f"{self.prefix}-"):
                _remove_namespace(namespace)
        for line in _ip("-br", "link", check=False).stdout.splitlines():
            link = line.split(" ")[0].split("@")[0]
            if link.startswith(self.prefix):
                _ip("link", "del", link, check=False)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
