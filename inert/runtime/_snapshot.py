"""Snapshots: what a replay of the log builds, kept at a position, so a restart folds the tail.

A snapshot holds the fold (every turn and call it knows), the projections, the retention plan
and, where processes share the log, what the log says of them: what replaying the log up to the
snapshot's position builds, and nothing the running runtime holds beside it (actors, timers,
requests waiting for an answer). The runtime writes one every ``snapshot_every`` events it
folds, and once after a restart that folded at least that many; the log keeps the newest under
the runtime's name (``inert.log._snapshots``). A restart loads it and folds only the
events after its position.

- **The log stays the truth.** A snapshot is a cache of a fold of the log, never the only copy
  of anything. One that cannot be used (another stamp, a damaged or unreadable state) is
  ignored: the runtime replays the log from the start and writes a new one. ``inert replay``
  never reads one.
- **The stamp.** A snapshot is loaded only by the code and configuration that wrote it: the
  stamp hashes the snapshot format, the Python version, the source of every module whose
  objects the state holds (the events, the decider, the fold, the projections, retention, the
  peers) and what the fold depends on beside the log (limits, ledger horizon, retention policy,
  process name, lease time).
- **Argument payloads are stored apart**, in two parts per call that holds any, each under the
  stream whose redaction takes it: the fragments (the buffer and inputs held back, or, where the
  buffer holds a prefix of the call's bytes and nothing else, those bytes as they are) under the
  response's stream, the arguments (parsed arguments, a pending validation, decisions not yet read
  back) under the call's. The log deletes a part when it redacts its stream. A part missing at
  loading was redacted since, so its call was not live at the log's head (redaction never reaches
  a live call). The call is loaded without those bytes (its decisions not yet read back as
  retention leaves them), and where it could still decide on them (collecting or holding inputs
  back; waiting for its response's end or its validation) it takes its recorded decisions as they
  are, as a replay of the redacted log does (``Slot.degraded``).
- **Redactions are never lost.** The retention plan holds, as due, every redaction due when the
  snapshot was taken and every one under way then: a process that stops before the log made
  them leaves them to the restart, as a replay from the start would find them due.
- **A snapshot is data.** The state and its payloads are MessagePack of plain values, made back
  into objects of the explicit list of ``inert.runtime._state_types`` by
  ``inert.runtime._state_codec``, each field checked against its declared type: no byte of a
  snapshot can choose code to run. Anything else, like any other failure to load, makes the
  snapshot unusable.
- **A snapshot belongs to its log and its position.** Its state begins with the identity of the
  log it was taken of (written when the log was created), its position and the id of the event
  at that position. A snapshot of another log, of a position past the log's head, or of a
  position whose event is not the one it names (a log restored from a backup and written on
  since) is refused; the runtime replays the log from the start.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import sys
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Any, overload

import attrs
import msgpack

from ..actors import CallFold, CallLimits, Phase
from ..actors._arguments import ParsedArguments
from ..actors._buffer import Buffer
from ..actors._call import CallContext, Input, ValidationRequested
from ..actors._slot import Slot
from ..events import CallKey, Event, without_sensitive
from ..log._snapshots import SnapshotPayload, StoredSnapshot
from ..projections import Projections
from ._peers import Peers
from ._retention import Retention, RetentionPlan
from ._state_codec import Reader, Writer
from ._state_shapes import StateUnreadable
from ._state_types import state_shapes

SNAPSHOT_FORMAT = 3
DEFAULT_SNAPSHOT_EVERY = 100_000

# Packages whose modules make the state: their source is part of the stamp.
_STATE_PACKAGES = ("inert.events", "inert.actors", "inert.projections")
_STATE_MODULES = (
    "inert.runtime._peers",
    "inert.runtime._retention",
    "inert.runtime._snapshot",
    "inert.runtime._state_codec",
    "inert.runtime._state_shapes",
    "inert.runtime._state_types",
)
# Modules of those packages whose objects are never state: the router (I/O), the declarations
# and their schemas (a validation's answer is recorded, and read back as recorded).
_NOT_STATE = frozenset({"inert.actors._router", "inert.actors._tools", "inert.actors._schemas"})
_MAGIC = "inert snapshot"
SNAPSHOT_KEY = "snapshot"
"""The purpose the log's key for snapshot digests is derived for (``Log.key``)."""


class SnapshotUnusable(Exception):
    """A snapshot that cannot be loaded: the log is replayed from the start instead."""


@attrs.frozen
class Binding:
    """What ties a snapshot to one log: the log's identity, the snapshot's position, the id of
    the event at that position, and the log's key its digest is made with."""

    log: str
    position: int
    event_id: str
    key: bytes = attrs.field(repr=False)


def keyed_digest(key: bytes, state: bytes) -> str:
    """The digest a snapshot of this state carries: keyed by its log, so that a state changed
    by whoever can write the row, but not read the log's secret, is told from the one written."""
    return "hmac-sha256:" + hmac.new(key, state, hashlib.sha256).hexdigest()


@attrs.define
class RuntimeState:
    """What a snapshot holds: the state replaying the log up to ``position`` builds."""

    position: int
    fold: CallFold
    projections: Projections
    retention: RetentionPlan
    peers: Peers | None
    apart: dict[str, tuple[CallKey, str, bool]] = attrs.field(factory=dict)
    """The payloads stored apart, by label: the call, the kind, and whether the call may still
    decide on them."""


@attrs.frozen(kw_only=True)
class Configuration:
    """What the fold depends on beside the log: part of every snapshot's stamp."""

    limits: CallLimits
    ledger_horizon: timedelta | None
    retention: Retention
    process: str | None
    lease_time: float


def stamp(configuration: Configuration) -> str:
    """The stamp of snapshots this code writes, and the only one it loads, for a configuration."""
    digest = hashlib.sha256(_code_stamp().encode())
    digest.update(repr(configuration).encode())
    return f"{SNAPSHOT_FORMAT}:{digest.hexdigest()}"


@cache
def _code_stamp() -> str:
    digest = hashlib.sha256(f"{SNAPSHOT_FORMAT} {sys.version_info[:2]}".encode())
    digest.update(state_shapes().describe().encode())
    for name in sorted(_state_module_names()):
        source = Path(import_module(name).__file__ or "").read_bytes()
        digest.update(name.encode() + b"\0" + source)
    return digest.hexdigest()


@cache
def _state_module_names() -> frozenset[str]:
    names = set(_STATE_MODULES)
    for package in _STATE_PACKAGES:
        directory = Path(import_module(package).__file__ or "").parent
        names.add(package)
        names.update(f"{package}.{path.stem}" for path in directory.glob("*.py"))
    names.discard("inert.events.__init__")
    names.discard("inert.actors.__init__")
    names.discard("inert.projections.__init__")
    return frozenset(names - _NOT_STATE)


# --- writing ---------------------------------------------------------------------------------


@attrs.frozen
class _Part:
    """What a call holds of one kind of payload: its slot fields, and the stream whose redaction
    takes them (the fragments are the response's, the arguments and decisions the call's)."""

    kind: str
    types: tuple[tuple[str, Any], ...]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.types)

    def checks(self) -> tuple[Callable[[object], bool], ...]:
        """The checks of the fields' declared types, as a state's fields are checked."""
        return _part_checks(self)

    def stream(self, slot: Slot) -> tuple[str, int]:
        """The stream the bytes come from, and the first version of it they may come from."""
        return self.stream_of(slot.key), slot.opened_version if self is FRAGMENTS else 1

    def stream_of(self, key: CallKey) -> str:
        return key.response_ref.stream if self is FRAGMENTS else key.stream

    def label(self, key: CallKey) -> str:
        """The payload's name in the snapshot: unique, as a call holds one of each kind."""
        return f"{self.kind} {key.stream}"

    def held_by(self, slot: Slot) -> bool:
        if self is FRAGMENTS:
            return slot._buffer.holds_bytes or bool(slot.held)
        return bool(slot.arguments is not None or slot.validating is not None or slot.expected)

    def needed_by(self, slot: Slot) -> bool:
        """Whether the call may still decide on these payloads."""
        if self is FRAGMENTS:
            return slot.phase is Phase.COLLECTING or bool(slot.held)
        # A validated call's arguments are hashed again when it is claimed.
        return slot.phase in _DECIDED_ON_ARGUMENTS or slot.validating is not None

    def dump(self, slot: Slot, fields: tuple[Any, ...], write: Writer) -> bytes:
        """The bytes stored apart of the call's ``fields`` of this kind: fragments that are a
        prefix of its bytes and nothing else are those bytes as they are (the most common
        payload, written as they are); anything else is the fields, written as data."""
        if self is FRAGMENTS and not slot.held and slot._buffer.prefix_only:
            return _PREFIX + slot._buffer.assembled()
        return write(list(fields))

    def load(self, slot: Slot, data: bytes, label: str) -> None:
        """Give a loaded call the payload ``dump`` wrote of it."""
        if self is FRAGMENTS and data[:1] == _PREFIX:
            try:
                slot._buffer = slot._buffer.with_prefix(data[1:])
            except ValueError as error:
                raise SnapshotUnusable(f"its payload {label!r} is not a call's: {error}") from None
            return
        fields = _read(data, f"its payload {label!r}")
        if type(fields) is not list or len(fields) != len(self.fields):
            raise SnapshotUnusable(f"its payload {label!r} is not a call's")
        for field, value, check in zip(self.fields, fields, self.checks(), strict=True):
            if not check(value):
                raise SnapshotUnusable(f"its payload {label!r} is not a call's: {field}")
            setattr(slot, field, value)

    def strip(self, slot: Slot) -> None:
        """Leave the call what it holds of this kind without a byte of argument."""
        if self is FRAGMENTS:
            slot._buffer = slot._buffer.without_data()
            slot.held = ()
        else:
            slot.arguments = None
            slot.validating = None
            slot.validation_context = None
            # Decisions not yet read back stay, as retention leaves them: one found redacted
            # in the log is compared so.
            slot.expected = [without_sensitive(decision) for decision in slot.expected]


_DECIDED_ON_ARGUMENTS = frozenset({Phase.TERMINAL_CANDIDATE, Phase.VALIDATED})
# Marks a payload of bytes as they are: one written as data starts with an array's marker.
_PREFIX = b"\x00"
FRAGMENTS = _Part(
    "fragments",
    (("_buffer", Buffer), ("held", list[tuple[Input, CallContext]] | tuple[()])),
)
ARGUMENTS = _Part(
    "arguments",
    (
        ("arguments", ParsedArguments | None),
        ("validating", ValidationRequested | None),
        ("validation_context", CallContext | None),
        ("expected", list[Event] | tuple[()]),
    ),
)


@cache
def _part_checks(part: _Part) -> tuple[Callable[[object], bool], ...]:
    shapes = state_shapes()
    return tuple(
        _always if (check := shapes.check_of(kind)) is None else check for _, kind in part.types
    )


def _always(value: object) -> bool:
    return True


# In the order a capture takes them; a payload's kind is stored as its index here.
_ORDERED_PARTS = (FRAGMENTS, ARGUMENTS)
_PARTS = {part.kind: part for part in _ORDERED_PARTS}


def capture(state: RuntimeState, *, name: str, stamp: str, binding: Binding) -> StoredSnapshot:
    """The snapshot of a runtime's state, its payloads apart, bound to its log by ``binding``.
    Synchronous: the state must not change meanwhile, and is as it was afterwards."""
    if binding.position != state.position:
        raise ValueError(f"a state at {state.position} bound at {binding.position}")
    with _collector_paused():
        return _capture(state, name, stamp, binding)


def _capture(state: RuntimeState, name: str, stamp: str, binding: Binding) -> StoredSnapshot:
    payloads = _Payloads()
    taken: list[tuple[Slot, _Part, tuple[Any, ...]]] = []
    apart: dict[str, tuple[CallKey, str, bool]] = {}
    write = Writer(state_shapes())
    try:
        for slot in state.fold.records.values():
            for part in _ORDERED_PARTS:
                if not part.held_by(slot):
                    continue
                fields = tuple(getattr(slot, field) for field in part.fields)
                payloads.add(slot, part, part.dump(slot, fields, write))
                apart[part.label(slot.key)] = (slot.key, part.kind, part.needed_by(slot))
                taken.append((slot, part, fields))
                part.strip(slot)
        header = write([_MAGIC, SNAPSHOT_FORMAT, binding.log, binding.position, binding.event_id])
        data = header + write(
            [
                state.position,
                state.fold,
                state.projections,
                state.retention,
                state.peers,
                apart,
            ]
        )
    finally:
        for slot, part, fields in taken:
            for field, value in zip(part.fields, fields, strict=True):
                setattr(slot, field, value)
    return StoredSnapshot(
        name=name,
        position=state.position,
        stamp=stamp,
        state=data,
        payloads=payloads,
        digest=keyed_digest(binding.key, data),
    )


class _Payloads(Sequence[SnapshotPayload]):
    """A snapshot's payloads as a few flat buffers, each ``SnapshotPayload`` made as it is read.

    A snapshot lives while the runtime goes on; as one small object per payload (and its label)
    it would leave those objects' memory scattered among the runtime's own once it is freed.
    Labels and streams are the calls' keys' own, derived when read.
    """

    __slots__ = ("_data", "_ends", "_first_versions", "_keys", "_kinds")

    def __init__(self) -> None:
        self._keys: list[CallKey] = []
        self._kinds = bytearray()
        self._first_versions = array("q")
        self._ends = array("Q")
        self._data = bytearray()

    def add(self, slot: Slot, part: _Part, data: bytes) -> None:
        self._keys.append(slot.key)
        self._kinds.append(_ORDERED_PARTS.index(part))
        self._first_versions.append(part.stream(slot)[1])
        self._data += data
        self._ends.append(len(self._data))

    def __len__(self) -> int:
        return len(self._keys)

    @overload
    def __getitem__(self, index: int) -> SnapshotPayload: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SnapshotPayload]: ...

    def __getitem__(self, index: int | slice) -> SnapshotPayload | Sequence[SnapshotPayload]:
        if isinstance(index, slice):
            return [self[at] for at in range(*index.indices(len(self)))]
        at = range(len(self._keys))[index]
        start = self._ends[at - 1] if at else 0
        return _payload(
            self._keys[at],
            self._kinds[at],
            self._first_versions[at],
            self._data[start : self._ends[at]],
        )

    def __iter__(self) -> Iterator[SnapshotPayload]:
        start = 0
        data = self._data
        for key, kind, first_version, end in zip(
            self._keys, self._kinds, self._first_versions, self._ends, strict=True
        ):
            yield _payload(key, kind, first_version, data[start:end])
            start = end

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


def _payload(key: CallKey, kind: int, first_version: int, data: bytearray) -> SnapshotPayload:
    part = _ORDERED_PARTS[kind]
    return SnapshotPayload(
        part=part.label(key),
        stream=part.stream_of(key),
        first_version=first_version,
        data=bytes(data),
    )


# --- loading ---------------------------------------------------------------------------------


def binding_of(snapshot: StoredSnapshot) -> Binding:
    """The log and the position a snapshot says it was taken of; ``SnapshotUnusable`` if it
    says none."""
    header, _ = _header(snapshot.state)
    return header


def _header(state: bytes) -> tuple[Binding, int]:
    """The binding at the start of a state, and where the rest begins."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(state), 1))
    try:
        unpacker.feed(state[:_MAX_HEADER])
        fields = unpacker.unpack()
        end = unpacker.tell()
    except Exception:
        raise SnapshotUnusable("it does not begin as a snapshot of this format") from None
    match fields:
        case [str(magic), int(version), str(log), int(position), str(event_id)] if (
            magic == _MAGIC and version == SNAPSHOT_FORMAT and position > 0
        ):
            return Binding(log=log, position=position, event_id=event_id, key=b""), end
        case [str(magic), int(version), *_] if magic == _MAGIC:
            raise SnapshotUnusable(f"it is of snapshot format {version}, not {SNAPSHOT_FORMAT}")
    raise SnapshotUnusable("it does not begin as a snapshot of this format")


_MAX_HEADER = 4096


def restore(snapshot: StoredSnapshot, *, stamp: str, binding: Binding) -> RuntimeState:
    """The state a snapshot holds, with its payloads back; ``SnapshotUnusable`` if it cannot
    be used (another stamp, damaged, unreadable, or bound to another log or event than
    ``binding``, what the log holds at the snapshot's position)."""
    if snapshot.stamp != stamp:
        raise SnapshotUnusable("written by another code or configuration")
    if not hmac.compare_digest(snapshot.digest, keyed_digest(binding.key, snapshot.state)):
        raise SnapshotUnusable(
            "its state is not the one written (damaged, changed, or keyed by another log)"
        )
    written, end = _header(snapshot.state)
    if written.log != binding.log:
        raise SnapshotUnusable(f"it was taken of another log ({written.log!r})")
    if written.position != snapshot.position or written.position != binding.position:
        raise SnapshotUnusable(
            f"it says position {written.position}, stored at {snapshot.position}"
        )
    if written.event_id != binding.event_id:
        raise SnapshotUnusable(
            f"the event at position {written.position} is not the one it was taken after"
        )
    with _collector_paused():
        state = _state(_read(memoryview(snapshot.state)[end:], "its state"), written.position)
        _put_back(state, snapshot.payloads)
    state.fold.live = False
    if state.peers is not None:
        # What the running process did with what it heard (processes it buried, turns it
        # gained) is not what a replay builds: it finds them again once live.
        state.peers.forget_actions()
    return state


def _read(data: bytes | memoryview, what: str) -> Any:
    try:
        return _reader()(data)
    except StateUnreadable as error:
        raise SnapshotUnusable(f"{what} cannot be read ({error})") from None


def _reader() -> Reader:
    """One reader for every state and payload of a thread: it holds nothing between two reads,
    and making one costs about as much as reading a call's payload."""
    reader: Reader | None = getattr(_READERS, "reader", None)
    if reader is None:
        reader = _READERS.reader = Reader(state_shapes())
    return reader


_READERS = threading.local()


_STATE_FIELDS = (
    ("position", int),
    ("fold", CallFold),
    ("projections", Projections),
    ("retention", RetentionPlan),
    ("peers", Peers | None),
    ("apart", dict[str, tuple[CallKey, str, bool]]),
)


def _state(values: object, position: int) -> RuntimeState:
    if type(values) is not list or len(values) != len(_STATE_FIELDS):
        raise SnapshotUnusable("its state is not a runtime's")
    shapes = state_shapes()
    for (name, kind), value in zip(_STATE_FIELDS, values, strict=True):
        check = shapes.check_of(kind)
        if check is not None and not check(value):
            raise SnapshotUnusable(f"its state is not a runtime's: {name}")
    fields = dict(zip((name for name, _ in _STATE_FIELDS), values, strict=True))
    state = RuntimeState(**fields)
    if state.position != position or state.fold.position != position:
        raise SnapshotUnusable(f"its state is at position {state.fold.position}, not {position}")
    return state


def _put_back(state: RuntimeState, stored: Sequence[SnapshotPayload]) -> None:
    """Give each call the payloads the log still holds of it; degrade the others."""
    records = state.fold.records
    payloads = {payload.part: payload.data for payload in stored}
    for label, (key, kind, needed) in state.apart.items():
        slot = records.get(key)
        part = _PARTS.get(kind)
        if slot is None or part is None or label != part.label(key):
            raise SnapshotUnusable(f"its payload {label!r} is of no call of its state")
        data = payloads.get(label)
        if data is None:
            # Redacted since: the call was not live at the log's head. One that could still
            # decide on these bytes takes its recorded decisions as they are.
            slot.degraded = slot.degraded or needed
            continue
        part.load(slot, data, label)
    state.apart = {}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No collection runs meanwhile. Capturing and loading make millions of objects in one go
    (the writer's memo holds what it wrote until the end; loading frees nothing), none of them
    garbage in a cycle: the cyclic collector would walk them again and again for nothing, which
    doubles the time of loading a large state and adds up to a quarter to capturing one."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
