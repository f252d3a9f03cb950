"""A network namespace joined to the host by a veth pair, for partition tests.

Addresses live only on the two ends of the pair this helper creates (a /30), and
``delete`` removes the namespace and the pair. Needs root and ``ip`` (iproute2).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid


def netns_unavailable_reason() -> str | None:
    """Why namespaces cannot be created here, or None when they can."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"rfxprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def random_pair() -> tuple[str, str]:
    """Host and namespace addresses of a random /30 in 10.213.0.0/16, so that runs side
    by side do not route to each other's namespace."""
    block = random.randrange(0, 1 << 14) * 4
    prefix = f"10.213.{block >> 8}"
    return f"{prefix}.{(block & 255) + 1}", f"{prefix}.{(block & 255) + 2}"


class NetNamespace:
    """``host_addr`` on the host end, ``ns_addr`` inside the namespace, both in a /30."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        host_addr, ns_addr = random_pair()
        self.name = f"rifflux-{tag}"
        self.host_if = f"rfx{tag}h"
        self.ns_if = f"rfx{tag}n"
        self.host_addr = host_addr
        self.ns_addr = ns_addr
        self.created = False

    def create(self) -> None:
        _ip("netns", "add", self.name)
        self.created = True
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _ip("link", "set", self.ns_if, "netns", self.name)
        _ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        self.inside("addr", "add", f"{self.ns_addr}/30", "dev", self.ns_if)
        self.inside("link", "set", self.ns_if, "up")
        self.inside("link", "set", "lo", "up")

    def inside(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "ip", *args)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Take the host end down: the namespace can reach nothing."""
        _ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def delete(self) -> None:
        """Remove the pair and the namespace; safe to call twice or after a failed create."""
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        if self.created:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self.created = False
