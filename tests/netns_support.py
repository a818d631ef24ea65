"""Network namespaces for runtime processes, and the faults of their links to the server.

Each ``Namespace`` is a network namespace of its own (``ip netns``) joined to the machine by a
veth pair: the machine's end has ``host``, the namespace's end ``address``, a /30 network of
``NETWORK`` each. A process started in it reaches the machine (and a PostgreSQL cluster
listening there, see ``ha_support``) only through that link, so a fault of the link is a fault
between that process and the server alone, and the rules live in the namespace (or on its
veth), leaving the machine's own network as it was.

The link's faults: ``cut`` (nothing passes either way), ``one_way`` (what the process sends is
dropped, or what it receives: ``out`` or ``in``), ``lossy`` (each packet dropped at random, both
ways, iptables' ``statistic`` match) and ``slow`` (both ends shaped to a low rate by ``tbf``:
packets queue, then drop past the queue's latency); ``heal`` removes them all. This kernel may
lack ``netem`` (the usual tool for a fixed delay): ``slow`` needs only ``tbf``.

Namespaces need root and iproute2's and iptables' tools. Where they cannot run, the tests that
need them are skipped with the reason, and fail instead under ``CI=true``, where they must run.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from ha_support import unavailable as clusters_unavailable

NETWORK = ipaddress.IPv4Network("10.213.0.0/16")
"""The addresses the links take their /30 networks from: the clusters trust it."""
TOOLS = ("ip", "tc", "iptables")


def unavailable() -> str | None:
    """Why namespaces with faulty links to a cluster of their own cannot be made here, or
    ``None`` if they can."""
    reason = clusters_unavailable()
    if reason is not None:
        return reason
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        tools = ", ".join(missing)
        return f"the network tools are missing: {tools} (apt-get install iproute2 iptables)"
    probe = f"inert_probe_{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        ("ip", "netns", "add", probe), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"network namespaces cannot be made here: {done.stderr.strip()}"
    subprocess.run(("ip", "netns", "del", probe), capture_output=True, check=False)
    return None


def require_namespaces() -> None:
    """Skip the test (fail it under ``CI=true``) where the namespaces cannot be made."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"the network fault tests must run under CI but cannot: {reason}", pytrace=False
        )
    pytest.skip(f"network fault tests skipped: {reason}")


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


def _taken_networks() -> set[ipaddress.IPv4Network]:
    listed = subprocess.run(
        ("ip", "-o", "-4", "addr"), capture_output=True, text=True, check=False
    ).stdout
    taken = set()
    for line in listed.splitlines():
        fields = line.split()
        if "inet" in fields:
            interface = ipaddress.IPv4Interface(fields[fields.index("inet") + 1])
            taken.add(ipaddress.IPv4Network(f"{interface.ip}/30", strict=False))
    return taken


class Namespace:
    """A network namespace joined to the machine by a veth pair of its own."""

    def __init__(self, label: str, network: ipaddress.IPv4Network) -> None:
        self.label = label
        tag = uuid.uuid4().hex[:6]
        self.name = f"inert_{tag}_{label}"
        self.host_device = f"inh{tag}"
        self.device = f"inn{tag}"
        first, second = list(network.hosts())
        self.host = str(first)
        """The machine's address, as the namespace reaches it."""
        self.address = str(second)
        self.network = network
        self.faults: list[str] = []

    def make(self) -> None:
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self.host_device, "type", "veth", "peer", "name", self.device)
        _run("ip", "link", "set", self.device, "netns", self.name)
        _run("ip", "addr", "add", f"{self.host}/30", "dev", self.host_device)
        _run("ip", "link", "set", self.host_device, "up")
        self.inside("ip", "addr", "add", f"{self.address}/30", "dev", self.device)
        self.inside("ip", "link", "set", self.device, "up")
        self.inside("ip", "link", "set", "lo", "up")

    def drop(self) -> None:
        # Deleting the namespace deletes its end of the pair, and so the pair.
        subprocess.run(("ip", "netns", "del", self.name), capture_output=True, check=False)
        subprocess.run(("ip", "link", "del", self.host_device), capture_output=True, check=False)

    def inside(self, *command: str) -> None:
        _run("ip", "netns", "exec", self.name, *command)

    def command(self, *command: str) -> list[str]:
        """``command`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *command]

    # --- faults of the link ---

    def _drop(self, chain: str, *match: str) -> None:
        side = "-d" if chain == "OUTPUT" else "-s"
        self.inside("iptables", "-A", chain, side, self.host, *match, "-j", "DROP")

    def cut(self) -> None:
        """Nothing passes between the namespace and the machine, either way."""
        self._drop("OUTPUT")
        self._drop("INPUT")
        self.faults.append("cut")

    def one_way(self, direction: str) -> None:
        """What the namespace sends (``out``) or receives (``in``) is dropped."""
        self._drop("OUTPUT" if direction == "out" else "INPUT")
        self.faults.append(f"one_way {direction}")

    def lossy(self, probability: float) -> None:
        """Each packet, either way, is dropped with ``probability``."""
        chance = ("-m", "statistic", "--mode", "random", "--probability", f"{probability:.2f}")
        self._drop("OUTPUT", *chance)
        self._drop("INPUT", *chance)
        self.faults.append(f"lossy {probability:.2f}")

    def slow(self, kbit: int) -> None:
        """Both ends of the link send at ``kbit`` kilobits a second at most."""
        shape = ("tbf", "rate", f"{kbit}kbit", "burst", "1600", "latency", "2s")
        self.inside("tc", "qdisc", "add", "dev", self.device, "root", *shape)
        _run("tc", "qdisc", "add", "dev", self.host_device, "root", *shape)
        self.faults.append(f"slow {kbit}kbit")

    def heal(self) -> None:
        """Every fault of the link removed."""
        if not self.faults:
            return
        self.inside("iptables", "-F")
        for command in (
            self.command("tc", "qdisc", "del", "dev", self.device, "root"),
            ["tc", "qdisc", "del", "dev", self.host_device, "root"],
        ):
            # No shaping to remove is no error.
            subprocess.run(command, capture_output=True, check=False)
        self.faults.clear()


@contextmanager
def namespaces(labels: list[str], *, seed: int = 0) -> Iterator[dict[str, Namespace]]:
    """A namespace for each label, dropped when the block ends."""
    rng = random.Random(f"{seed}/{uuid.uuid4()}")
    subnets = list(NETWORK.subnets(new_prefix=30))
    made: dict[str, Namespace] = {}
    try:
        taken = _taken_networks()
        for label in labels:
            network = rng.choice(subnets)
            while network in taken:
                network = rng.choice(subnets)
            taken.add(network)
            made[label] = Namespace(label, network)
            made[label].make()
        yield made
    finally:
        for space in made.values():
            space.drop()
