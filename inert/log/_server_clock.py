"""The clock of a log kept by a server: the server's, as one process can tell it.

Processes on other machines share a PostgreSQL log, and their clocks disagree: one may be
minutes ahead, another may jump back when its time is set. A time one of them stamped would
judge the others' leases, confirmations and deadlines by its own error. So the log's clock is
the server's: every append is stamped with the server's time, read in the transaction that
writes it (``SERVER_TIME``), after the locks of the partitions' heads are granted, and never
before the stamp of a head's row: the stamps of a partition follow its positions, even across a
server's clock set back or a failover to a standby whose clock is behind.

A process still needs the log's time between appends, to know when a lease runs out or a
deadline is due (``Log.now``). ``ServerClock`` answers with its own clock moved by the offset
it last measured against the server: at each append and when a connection opens. The answer
lags the server by at most the round trip of that measurement, plus what its own clock gained
or lost since; it never depends on the process's clock being set right, and a jump of the
process's clock lasts only until its next append. Lagging is the safe side: a lease looks
held a little longer, and a deadline asked for early is refused by the log's stamp and asked
again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..events._times import micros_to_datetime
from ._log import Clock

SERVER_TIME = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
"""The server's time now, in microseconds since the epoch, as the log stamps it."""


class ServerClock:
    """The log's clock as this process tells it: its own, moved by the server's offset."""

    def __init__(self, local: Clock) -> None:
        self._local = local
        # Set from the worker threads of the log's connections: one assignment, read whole.
        self._offset = timedelta(0)

    def __call__(self) -> datetime:
        return self._local() + self._offset

    @property
    def offset(self) -> timedelta:
        """How far the server's clock is ahead of this process's, as last measured."""
        return self._offset

    def observed(self, server_micros: int) -> None:
        """The server said its time was ``server_micros`` (just now, as its answer arrives)."""
        self._offset = micros_to_datetime(server_micros) - self._local()
