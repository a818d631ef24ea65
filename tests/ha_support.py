"""A PostgreSQL primary and a streaming-replication standby of it, made for one test with
Debian's cluster tools, and a real failover between them.

Each pair is two new PostgreSQL 15 clusters of their own (``pg_createcluster``), on free ports:
the primary, and a standby copied from it by ``pg_basebackup -R`` that streams its WAL under an
``application_name`` of its own. Synchronous pairs name that standby in the primary's
``synchronous_standby_names`` with ``synchronous_commit=on``, so a commit is acknowledged only
once the standby has flushed it; asynchronous pairs do not. A failover stops the primary in
immediate mode (a crash, and the fence: it takes no more writes) and promotes the standby. The
clusters are dropped (``pg_dropcluster --stop``) when the block ends; no other cluster of the
machine is touched.

The tools need root. Where they cannot run, the tests that need a pair are skipped with the
reason, and fail instead under ``CI=true``, where they must run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest

VERSION = "15"
BINARIES = Path(f"/usr/lib/postgresql/{VERSION}/bin")
TOOLS = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
DATABASE = "postgres"
READY_TIMEOUT = 60.0
"""Seconds a new standby has to start streaming from its primary."""


def unavailable() -> str | None:
    """Why a replicated pair cannot be made here, or ``None`` if it can."""
    if os.geteuid() != 0:
        return "making PostgreSQL clusters with pg_createcluster needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not (BINARIES / "pg_basebackup").exists():
        missing.append(str(BINARIES / "pg_basebackup"))
    if missing:
        return f"Debian's PostgreSQL {VERSION} cluster tools are missing: {', '.join(missing)}"
    return None


def require_clusters() -> None:
    """Skip the test (fail it under ``CI=true``) where replicated pairs cannot be made."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the failover tests must run under CI but cannot: {reason}", pytrace=False)
    pytest.skip(f"failover tests skipped: {reason}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


def _ctl(name: str, *action: str) -> None:
    # Without the redirect, pg_ctlcluster would hand start and stop to systemd where it runs.
    _run("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, name, *action)


def _connect(port: int) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user=postgres dbname={DATABASE}",
        autocommit=True,
        connect_timeout=5,
    )


@attrs.frozen(kw_only=True)
class ReplicatedPair:
    """Two clusters of this machine: ``primary`` and ``standby``, by cluster name and port."""

    primary: str
    primary_port: int
    standby: str
    standby_port: int
    synchronous: bool

    def url(self, **options: str) -> str:
        """The log URL naming both servers, libpq to take whichever takes writes."""
        query = "&".join(
            f"{key}={value}"
            for key, value in {"target_session_attrs": "read-write", **options}.items()
        )
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},"
            f"127.0.0.1:{self.standby_port}/{DATABASE}?{query}"
        )

    def fail_over(self, head_query: str, *, detached: float = 0.0) -> int:
        """Crash the primary (immediate stop: no more writes reach it) and promote the standby;
        returns, once the standby takes writes, what ``head_query`` read from it in between:
        the last of the primary's writes that reached it.

        With ``detached`` seconds, the standby first stops receiving WAL for that long before
        the crash (its ``primary_conninfo`` emptied): a standby fallen behind."""
        if detached:
            with _connect(self.standby_port) as connection:
                connection.execute("ALTER SYSTEM SET primary_conninfo = ''")
                connection.execute("SELECT pg_reload_conf()")
                while connection.execute(
                    "SELECT count(*) FROM pg_stat_wal_receiver"
                ).fetchone() != (0,):
                    time.sleep(0.01)
            time.sleep(detached)
        _ctl(self.primary, "stop", "-m", "immediate")
        replicated = _replayed(self.standby_port, head_query)
        _ctl(self.standby, "promote")
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            with _connect(self.standby_port) as connection:
                row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
            if row == (False,):
                return replicated
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {self.standby} was not promoted in {READY_TIMEOUT}s")
            time.sleep(0.05)


def _replayed(port: int, head_query: str) -> int:
    """``head_query``'s number on a standby once it has replayed all the WAL it received."""
    with _connect(port) as connection:
        while True:
            received, replayed = connection.execute(
                "SELECT pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()"
            ).fetchone() or (None, None)
            if received == replayed:
                row = connection.execute(head_query).fetchone()
                return int(row[0]) if row and row[0] is not None else 0
            time.sleep(0.01)


def _wait_streaming(pair: ReplicatedPair) -> None:
    """Until the primary sees its standby streaming (as its synchronous one, if it is)."""
    wanted = "sync" if pair.synchronous else "async"
    deadline = time.monotonic() + READY_TIMEOUT
    with _connect(pair.primary_port) as connection:
        while True:
            row = connection.execute(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (pair.standby,),
            ).fetchone()
            if row == ("streaming", wanted):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"standby {pair.standby} not streaming ({wanted}) after {READY_TIMEOUT}s: {row}"
                )
            time.sleep(0.05)


def _create(name: str, port: int, trusted: str | None) -> None:
    """A new cluster; with ``trusted`` (a network, CIDR), listening on every address of the
    machine and trusting connections from that network too."""
    listen = ["-o", "listen_addresses=*"] if trusted else []
    _run(
        "pg_createcluster",
        VERSION,
        name,
        "-p",
        str(port),
        "-o",
        "wal_level=replica",
        "-o",
        "max_wal_senders=4",
        *listen,
        "--",
        "--auth=trust",
    )
    if trusted:
        with Path(f"/etc/postgresql/{VERSION}/{name}/pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {trusted} trust\n")


@contextmanager
def single_cluster(*, trusted: str | None = None) -> Iterator[int]:
    """A new cluster of its own (its port), dropped when the block ends; ``trusted`` as
    ``replicated_pair``'s."""
    name = f"inert_ha_{uuid.uuid4().hex[:8]}_single"
    port = _free_port()
    try:
        _create(name, port, trusted)
        _ctl(name, "start")
        yield port
    finally:
        _run("pg_dropcluster", "--stop", VERSION, name)


@contextmanager
def replicated_pair(*, synchronous: bool, trusted: str | None = None) -> Iterator[ReplicatedPair]:
    """A new primary and a streaming standby of it, both dropped when the block ends. With
    ``trusted`` (a network, CIDR), both listen on every address of the machine and trust
    connections from that network: processes in network namespaces of their own reach them."""
    prefix = f"inert_ha_{uuid.uuid4().hex[:8]}"
    pair = ReplicatedPair(
        primary=f"{prefix}_primary",
        primary_port=_free_port(),
        standby=f"{prefix}_standby",
        standby_port=_free_port(),
        synchronous=synchronous,
    )
    made: list[str] = []
    try:
        for name, port in ((pair.primary, pair.primary_port), (pair.standby, pair.standby_port)):
            made.append(name)
            _create(name, port, trusted)
        _ctl(pair.primary, "start")
        # The standby's data directory is the primary's, copied; its own configuration (port,
        # paths) stays in /etc, where pg_createcluster wrote it.
        data = Path(f"/var/lib/postgresql/{VERSION}/{pair.standby}")
        # Emptied, not removed: its parent is root's, the directory the server's user's.
        for entry in data.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        _run(
            "runuser",
            "-u",
            "postgres",
            "--",
            str(BINARIES / "pg_basebackup"),
            "--dbname",
            f"host=127.0.0.1 port={pair.primary_port} user=postgres"
            f" application_name={pair.standby}",
            "--pgdata",
            str(data),
            "--write-recovery-conf",
            "--checkpoint=fast",
            "--wal-method=stream",
        )
        _ctl(pair.standby, "start")
        if synchronous:
            with _connect(pair.primary_port) as connection:
                connection.execute(
                    f"ALTER SYSTEM SET synchronous_standby_names = '\"{pair.standby}\"'"
                )
                connection.execute("ALTER SYSTEM SET synchronous_commit = on")
                connection.execute("SELECT pg_reload_conf()")
        _wait_streaming(pair)
        yield pair
    finally:
        for name in reversed(made):
            _run("pg_dropcluster", "--stop", VERSION, name)
