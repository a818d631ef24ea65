"""Ingress: what an agent server feeds from its provider streams, on its way into the log.

Fragments are transport data, not promises. A fragment's feed hands it to its call's pending
run and returns without waiting for the disk; one writer task appends everything pending at
once, and a call's fragments that follow each other (the next bytes at their offsets, the next
sequences) become one ``ArgumentsAppended`` per append, so that the number of events grows with
the commits of the log rather than with the deltas a provider sends. A crash loses the fragments
not yet appended, as it loses the provider connection itself: their calls are cancelled
(``connection_lost``) or, on a stream that can be resumed, fed again from the last sequence the
log holds.

Every other ingress event is a promise: its feed appends it, atomically with the other events
of the feed, and returns once it is durable; the fragments its response stream holds go into
the same append, before it. So no end event, end of a response or lost stream is in the log
without the bytes fed before it, and the last sequence a lost stream records is one the log
holds.

Each response stream has one feeder: every append is fenced by the versions of the response
streams it writes, and the appends of one stream from this process take turns (a lock per
stream; the writer passes over a stream whose feeder holds it, and the feeder takes what the
stream holds). A stream another writer appended to meanwhile is a ``ConflictError``: raised by
the feed that appends, or, for fragments whose feed has returned already, by the next feed of
that stream; so is a storage failure that lost them.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Sequence

import trio

from ..events import (
    INGRESS_TYPES,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ConflictError,
    DiscardReason,
    Event,
    EventsDiscarded,
    InertError,
    LogError,
    RefusedError,
    TraceContext,
    response_of,
)
from ..events._identity import shared_key
from ..log import NO_STREAM, Log, NewEvent

FEED_VERSIONS_KEPT = 65_536
"""Response streams whose version the ingress remembers (the most recently written); a stream
written after it was dropped costs one refused append, which tells its version."""

DEFAULT_MAX_PENDING_BYTES = 16 * 1024 * 1024
"""Fragment bytes held for the next append before a feed waits for it to be written."""

DEFAULT_MAX_PENDING_EVENTS = 65_536
"""Coalesced fragment events held for the next append before a feed waits for it."""

YIELD_EVERY = 64
"""Every this many feeds of fragments one is a checkpoint; the others neither block nor
yield (a checkpoint costs more than holding a delta)."""


def response_stream(event: Event) -> str:
    """The response stream an ingress event is written to."""
    response = response_of(event)
    assert response is not None, "a feed holds ingress events only"
    return response.stream


class Held(enum.Enum):
    """What a feed of fragments waits for once they are held (see ``Ingress.hold``)."""

    NOT_HELD = "not held"
    FULL = "full"
    YIELD = "yield"
    HELD = "held"


class _Run:
    """Fragments of one call that follow each other, to be appended as one event."""

    __slots__ = ("first", "fragments", "key", "last", "offset", "parts", "size", "trace")

    def __init__(self, fragment: ArgumentsAppended, trace: TraceContext | None) -> None:
        self.key = fragment.key
        self.offset = fragment.offset
        self.first = fragment.first_sequence
        self.last = fragment.last_sequence
        self.fragments = fragment.fragments
        self.parts = [fragment.data]
        self.size = len(fragment.data)
        self.trace = trace

    def new_event(self) -> NewEvent:
        event = ArgumentsAppended(
            key=self.key,
            data=self.parts[0] if len(self.parts) == 1 else b"".join(self.parts),
            offset=self.offset,
            first_sequence=self.first,
            last_sequence=self.last,
            fragments=self.fragments,
        )
        return NewEvent(stream=self.key.response_ref.stream, event=event, trace=self.trace)


class _Discarded:
    """Events fed that the decider could only refuse, counted under one call until the next
    append writes the count."""

    __slots__ = ("calls", "events", "fragments", "key", "reason", "size")

    def __init__(self, key: CallKey, reason: DiscardReason) -> None:
        self.key = key
        self.reason = reason
        self.calls: dict[CallKey, None] = {}
        self.events = 0
        self.fragments = 0
        self.size = 0

    def new_event(self) -> NewEvent:
        event = EventsDiscarded(
            key=self.key,
            reason=self.reason,
            calls=len(self.calls),
            events=self.events,
            fragments=self.fragments,
            size=self.size,
        )
        return NewEvent(stream=self.key.response_ref.stream, event=event)


class _StreamLock:
    """The lock of one response stream, and how many use it now (it lives only while used)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.users = 0


class Ingress:
    """Holds fragments for the next append, and appends what is fed to the response streams."""

    def __init__(
        self,
        log: Log,
        *,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
        refused: Callable[[CallKey], tuple[DiscardReason, CallKey] | None] | None = None,
    ) -> None:
        self._log = log
        self._refused = refused
        self._discarded: dict[CallKey, _Discarded] = {}
        self._max_bytes = max_pending_bytes
        self._max_events = max_pending_events
        self._pending: dict[str, list[_Run | _Discarded]] = {}
        # The streams of ``_pending`` no feeder or writer holds, oldest first: the writer's
        # work, found without looking at each stream a feeder holds while it appends.
        self._free: dict[str, None] = {}
        self._open: dict[CallKey, _Run] = {}
        self._pending_bytes = 0
        self._pending_events = 0
        self._locks: dict[str, _StreamLock] = {}
        self._versions: OrderedDict[str, int] = OrderedDict()
        self._failed: dict[str, InertError] = {}
        self._work = trio.Event()
        self._signalled = False
        self._written = trio.Event()
        self._writing = False
        self._closed = False
        self._unyielded = 0

    # --- feeding ---

    def hold(self, events: Sequence[Event], trace: TraceContext | None) -> Held:
        """Hold a feed's events if they are fragments only, and say what the feed waits for:
        ``NOT_HELD`` (it holds a promise: ``append`` it), ``FULL`` (wait for ``room``),
        ``YIELD`` (a schedule point is due), ``HELD``."""
        if self._closed:
            raise LogError("the runtime is closed: nothing more is written")
        if self._failed:
            self._raise_failed(events)
        for event in events:
            if type(event) is not ArgumentsAppended:
                return Held.NOT_HELD
        self._hold(events, trace)  # type: ignore[arg-type]
        if not self._signalled:
            self._signalled = True
            self._work.set()
        if self._pending_bytes > self._max_bytes or self._pending_events > self._max_events:
            return Held.FULL
        self._unyielded += 1
        if self._unyielded < YIELD_EVERY:
            return Held.HELD
        self._unyielded = 0
        return Held.YIELD

    async def room(self) -> None:
        """Until the next append of what is held."""
        await self._next_write()

    async def append(self, events: Sequence[Event], trace: TraceContext | None) -> None:
        """Append a feed that holds promises: each after the fragments its stream holds by
        then, atomically, fenced by the versions of its streams; durable when this returns."""
        for event in events:
            if not isinstance(event, INGRESS_TYPES):
                raise RefusedError(f"feed takes ingress events, not {type(event).__name__}")
        streams = sorted(
            {response_stream(event) for event in events if not isinstance(event, ArgumentsAppended)}
        )
        users = [self._use(stream) for stream in streams]
        held: list[trio.Lock] = []
        try:
            # In one order, so that two feeds of the same streams never wait for each other.
            # A free lock is taken without a schedule point: the append is one.
            for user in users:
                try:
                    user.lock.acquire_nowait()
                except trio.WouldBlock:
                    await user.lock.acquire()
                held.append(user.lock)
            await self._append_promises(events, trace)
        finally:
            for lock in held:
                lock.release()
            for stream in streams:
                self._unuse(stream)
            # What was held meanwhile is the writer's again; a drain looks again.
            if self._free:
                self._work.set()
            self._notify_written()

    def _raise_failed(self, events: Sequence[Event]) -> None:
        for event in events:
            error = self._failed.pop(response_stream(event), None)
            if error is not None:
                raise error

    def _hold(self, fragments: Sequence[ArgumentsAppended], trace: TraceContext | None) -> None:
        """Join each fragment to its call's run where it continues it: the next bytes, the next
        sequences (where numbered), the same trace context; else start a run.

        Fragments without an offset are never joined: placed by their sequences, a joined one
        could overlap sequences seen where each alone would be a duplicate or new.
        """
        runs = self._open
        refused = self._refused
        for fragment in fragments:
            key, data = fragment.key, fragment.data
            refusal = None if refused is None else refused(key)
            if refusal is not None:
                self._discard(key, refusal, fragment.fragments, len(data))
                continue
            run = runs.get(key)
            if (
                run is not None
                and run.offset is not None
                and fragment.offset == run.offset + run.size
                and trace == run.trace
                and fragment.first_sequence == (None if run.last is None else run.last + 1)
            ):
                run.last = fragment.last_sequence
                run.fragments += fragment.fragments
                run.parts.append(data)
                run.size += len(data)
            else:
                run = runs[key] = _Run(fragment, trace)
                self._pend(key.response_ref.stream, run)
            self._pending_bytes += len(data)

    def _discard(
        self,
        key: CallKey,
        refusal: tuple[DiscardReason, CallKey],
        fragments: int,
        size: int,
    ) -> None:
        """Count an event the decider could only refuse, instead of holding it."""
        reason, counted_under = refusal
        discarded = self._discarded.get(counted_under)
        if discarded is None or discarded.reason is not reason:
            discarded = self._discarded[counted_under] = _Discarded(counted_under, reason)
            self._pend(counted_under.response_ref.stream, discarded)
        discarded.calls[key] = None
        discarded.events += 1
        discarded.fragments += fragments
        discarded.size += size

    def _pend(self, stream: str, run: _Run | _Discarded) -> None:
        self._pending.setdefault(stream, []).append(run)
        self._pending_events += 1
        if stream not in self._locks:
            self._free[stream] = None

    def _take_stream(self, stream: str) -> list[NewEvent]:
        runs = self._pending.pop(stream, [])
        self._free.pop(stream, None)
        for run in runs:
            if type(run) is _Discarded:
                if self._discarded.get(run.key) is run:
                    del self._discarded[run.key]
                self._pending_events -= 1
                continue
            if self._open.get(run.key) is run:
                del self._open[run.key]
            self._pending_bytes -= run.size
            self._pending_events -= 1
        return [run.new_event() for run in runs]

    async def _next_write(self) -> None:
        written = self._written
        await written.wait()

    def _notify_written(self) -> None:
        written, self._written = self._written, trio.Event()
        written.set()

    def _use(self, stream: str) -> _StreamLock:
        user = self._locks.get(stream)
        if user is None:
            user = self._locks[stream] = _StreamLock()
            self._free.pop(stream, None)
        user.users += 1
        return user

    def _unuse(self, stream: str) -> None:
        user = self._locks[stream]
        user.users -= 1
        if not user.users:
            del self._locks[stream]
            if stream in self._pending:
                self._free[stream] = None

    async def _append_promises(self, events: Sequence[Event], trace: TraceContext | None) -> None:
        """Append a feed's events, each promise after the fragments its stream holds by then;
        the feed holds the locks of its promises' streams."""
        news: list[NewEvent] = []
        refused = self._refused
        for event in events:
            if isinstance(event, ArgumentsAppended):
                self._hold([event], trace)
                continue
            if refused is not None and isinstance(event, CallOpened | CallEnded):
                refusal = refused(event.key)
                if refusal is not None:
                    self._discard(event.key, refusal, 0, 0)
                    continue
            if type(event) is CallOpened:
                shared_key(event.key)
            stream = response_stream(event)
            news += self._take_stream(stream)
            news.append(NewEvent(stream=stream, event=event, trace=trace))
        await self._append(news)

    async def _append(self, news: list[NewEvent]) -> None:
        """Append events fenced by the versions of their streams, and count them in."""
        counts: dict[str, int] = {}
        for new in news:
            counts[new.stream] = counts.get(new.stream, 0) + 1
        expected: dict[str, int] = {}
        guessed: set[str] = set()
        for stream in counts:
            # Taken out, and put back after the append: most recently written last, so that
            # the oldest entry is the one dropped past the bound. After a failure they stay
            # out, and are learnt again when next needed.
            version = self._versions.pop(stream, None)
            if version is None:
                # A stream this ingress has not written is most often a new response: taken
                # to be new rather than read (a round trip and a transaction of the server
                # for each response), and its version learnt from the refusal if it is not.
                version = NO_STREAM
                guessed.add(stream)
            expected[stream] = version
        while True:
            try:
                await self._log.append(news, expected)
                break
            except ConflictError as conflict:
                # Nothing was written: appended at the version the stream is at, as a read of
                # its version before the append would have, once a stream.
                if conflict.stream not in guessed:
                    raise
                guessed.discard(conflict.stream)
                expected[conflict.stream] = conflict.actual
        versions = self._versions
        for stream, count in counts.items():
            versions[stream] = expected[stream] + count
        while len(versions) > FEED_VERSIONS_KEPT:
            versions.popitem(last=False)

    # --- quiet ---

    @property
    def idle(self) -> bool:
        """No fragment held or being written by the writer."""
        return not (self._pending or self._writing)

    async def drain(self) -> None:
        """Until every fragment fed so far is written (or its append failed, or the writer
        stopped)."""
        while not self.idle and not self._closed:
            written = self._written
            self._work.set()
            await written.wait()

    # --- the writer ---

    async def run(self) -> None:
        """Append the fragments held, as often as the log takes them, until cancelled."""
        try:
            while True:
                await self._work.wait()
                self._work = trio.Event()
                self._signalled = False
                while self._free:
                    await self._write()
        finally:
            self._closed = True
            self._written.set()

    async def _write(self) -> None:
        """Append what the streams no feeder holds hold (a stream a feeder holds is appended
        by that feeder, with its promise)."""
        streams = list(self._free)
        for stream in streams:
            # A stream's lock lives only while it is used: a free stream's is new, and free.
            self._use(stream).lock.acquire_nowait()
        self._writing = True
        try:
            news = [new for stream in streams for new in self._take_stream(stream)]
            if news:
                try:
                    await self._append(news)
                except InertError as error:
                    # Their feeds returned: the next feed of each stream hears of it.
                    for stream in streams:
                        self._failed[stream] = error
        finally:
            self._writing = False
            for stream in streams:
                self._locks[stream].lock.release()
                self._unuse(stream)
            self._notify_written()
