"""The deterministic simulator: one seed drives the real runtime through an awkward plan.

``simulate(seed)`` makes the seed's plan (``_workload``), then runs it against ``open_runtime``
on a memory log under ``trio.testing.MockClock(autojump_threshold=0)`` with Trio's scheduler
seeded too, so that the whole run (every task switch, every time the log records) is a
function of the seed. Conversations feed their turns and provider streams concurrently; two
executors race to claim ready calls and complete, fail or drop them; a probe claims calls in
any state; the person answers confirmations (fresh, stale, for other arguments, from someone
else, twice, too late, never) or denies; an operator quarantines, disables and stops; half of
the seeds restart the runtime in the middle (abruptly, or after recording the open streams as
lost and resumable).

Then the checker (``_checker``) reads the log event by event, with what the executors were
handed, and a replay of the log (fresh projections and a fresh fold) must reach the live
runtime's digest and phases at the end of every runtime's life (I8). The seed is run twice and
both logs must hash the same: anything else is nondeterminism.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import multiprocessing
import random
import shlex
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar

import attrs
import trio
import trio.testing
from attrs import define, field, frozen

from ..actors import (
    CallFold,
    CallLimits,
    Phase,
    ReplayDivergence,
    ToolDeclaration,
    ValidationRequested,
    ValidationResult,
    Validator,
)
from ..actors._call import DIGEST_KEY
from ..events import (
    DEFAULT_CODEC,
    CallKey,
    ClaimRefused,
    ConfigurationError,
    ConfirmationGiven,
    ConfirmationRefused,
    Event,
    FailReason,
    InertError,
    RecordedEvent,
    Redacted,
    RefusedError,
    ResponseEnded,
    ResponseRef,
    StreamLost,
    StreamResumed,
    TurnRef,
)
from ..log import MemoryLog, MemoryStore, NewEvent
from ..log._records import StoredRecord, decode_record
from ..projections import DEFAULT_LEDGER_HORIZON, Projections
from ..runtime import PendingConfirmation, Runtime, open_runtime
from ..runtime._collector import CollectorSettings
from ..runtime._retention import DEFAULT_RETENTION, KEEP_EVERYTHING, Retention
from ._checker import Observation, Violation, check_log
from ._plants import planted
from ._suite import ToolSuite, load_suite, tool_errors
from ._workload import (
    DEMO_TOOLS,
    SIMULATION_LIMITS,
    VALIDATION_TIMEOUT,
    CancelTurn,
    Confirmations,
    Conversation,
    Feed,
    Plan,
    SimulatedTool,
    StartTurn,
    make_plan,
)

JobT = TypeVar("JobT")
ResultT = TypeVar("ResultT")

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The wall-clock time at virtual time zero: every run records the same times."""

OPERATOR = "operator:sim"

RETENTIONS: dict[str, Retention] = {
    "default": DEFAULT_RETENTION,
    "arguments": Retention(fragments=False),
    "none": KEEP_EVERYTHING,
}
"""Retention policies by name: the runtime's default, validated arguments only, nothing."""

DRAIN = 60.0
EXECUTOR_LAG = 0.3
"""How often an executor waits (up to two seconds) before it claims a ready call."""
_COLLECTOR = CollectorSettings(freeze=False)

SNAPSHOT_EVERY = 500
"""Events between a runtime's snapshots: a restart starts from one of a few hundred events
ago."""
"""Virtual seconds given, after the last conversation finished, for deadlines to fire and
executors to finish."""


class SimulationFailed(InertError):
    """A simulation found a violation of the contract (its message says where to look)."""


@frozen(kw_only=True)
class SimulationResult:
    """What one seed did and found."""

    seed: int
    keys: int
    plant: str | None
    steps: int
    """Log events checked, each against every invariant that concerns it."""
    actions: int
    """Operations of the simulated parties on the runtime (feeds, turns, claims, ...)."""
    restarts: int
    states: dict[str, int]
    """How many call keys were in each phase when the last runtime stopped."""
    violations: tuple[Violation, ...]
    log_hash: str
    retention: str = "default"
    """The retention policy by its name in ``RETENTIONS`` (``custom`` for another)."""
    suite: str | None = None
    """Where the tools came from (``module:attribute`` or a TOOLS.json file, ``load_suite``);
    None for the demo tools, or for tools handed to ``simulate`` directly."""

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def command(self) -> str:
        """The one-line command that runs this seed again, exactly (with the demo tools or the
        ``suite`` named: a run with tools handed to ``simulate`` directly is replayed by
        ``simulate`` with the same arguments)."""
        tools = f" --tools {shlex.quote(self.suite)}" if self.suite else ""
        plant = f" --plant {self.plant}" if self.plant else ""
        retention = f" --retention {self.retention}" if self.retention != "default" else ""
        return f"inert simulate{tools} --seed {self.seed} --keys {self.keys}{plant}{retention}"


async def demo_check(request: ValidationRequested) -> ValidationResult:
    """The demo business check: Atlantis is no city; some answers take long, a few too long.

    The delay is a function of the call key, so that it is the same in every run.
    """
    drawn = hashlib.sha256(request.key.stream.encode()).digest()[0]
    delay = _CHECK_DELAYS[drawn % len(_CHECK_DELAYS)]
    if delay:
        await trio.sleep(delay)
    if request.arguments.value.get("city") == "Atlantis":
        return ValidationResult(failure=FailReason.BUSINESS_INVALID, detail="/city unknown")
    return ValidationResult()


_CHECK_DELAYS = (0.0,) * 12 + (0.02, 0.05, 0.0, 0.3)
"""One answer in sixteen takes longer than the validation timeout."""


# --- determinism -------------------------------------------------------------------------------


@contextmanager
def seeded_scheduling(seed: int) -> Iterator[None]:
    """Make Trio's choice of which runnable task goes first a function of ``seed``.

    Trio shuffles each batch of runnable tasks with the module-level ``random.Random`` of
    ``trio._core._run`` (``_r``), and only when ``_ALLOW_DETERMINISTIC_SCHEDULING`` is set does
    it sort the batch first, which makes the shuffle depend on the seed alone. That flag and
    that generator are the hook Trio itself sets up for Hypothesis and pytest-trio; Trio has no
    public API for it (0.35), so this is the least private hook there is. Both are restored.
    """
    run = importlib.import_module("trio._core._run")
    allowed = run._ALLOW_DETERMINISTIC_SCHEDULING
    state = run._r.getstate()
    # setattr: the flag is declared Final for type checkers, though Trio's hooks assign it.
    setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010
    run._r.seed(seed)
    try:
        yield
    finally:
        setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", allowed)  # noqa: B010
        run._r.setstate(state)


_ID = 32
"""The length of a random id, in hex digits."""

_HEX_MASK = bytes(ord("x") if byte in b"0123456789abcdef" else ord(".") for byte in range(256))
"""A translation table: each lowercase hex digit to ``x``, any other byte to ``.``."""


def _hashed_row(row: StoredRecord) -> bytes:
    # The checksum is left out: it covers the random ids, and everything it covers is hashed
    # here. So is the digest of a redacted confirmation, whose payload held its random nonce:
    # the rest of the row (what remains, the payload's length) still is.
    columns: tuple[object, ...] = row[:-1]
    if row.event_type == ConfirmationGiven.TAG:
        columns = row[:9] + row[10:-1]
    text = "\x00".join([str(value) for value in columns if not isinstance(value, bytes)])
    data = [value for value in columns if isinstance(value, bytes)]
    return b"\x00".join([text.encode(), *data]) if data else text.encode()


def log_hash(store: MemoryStore) -> str:
    """A hash of what a memory log stores, row by row (partition by partition), that two runs
    of one seed must share.

    Event ids, claim ids and confirmation nonces are drawn at random by design (32 hex digits
    each); they are renamed by order of first appearance, so that the hash still sees which
    event names which. Everything else (positions, streams, versions, times, types, payload
    bytes, redactions) is hashed as it is.
    """
    rows = [_hashed_row(row) for row in store.rows]
    # A partitioned log's partitions follow its control partition, each after its number.
    for number in sorted(store.partition_stores):
        rows.append(b"partition %d" % number)
        rows.extend(_hashed_row(row) for row in store.partition_stores[number].rows)
    # Neither separator is a hex digit: no id spans two rows, and the ids of the whole log, in
    # order, are those of each row in turn.
    log = b"\x01".join([*rows, b""])
    # An id is a run of exactly 32 hex digits. Searching the log's hex mask for runs of 32 with
    # bytes.find costs a fraction of a regular expression tried at every byte of the payloads.
    mask = log.translate(_HEX_MASK)
    names: dict[bytes, bytes] = {}
    digest = hashlib.sha256()
    hashed = 0
    start = mask.find(b"x" * _ID)
    while start >= 0:
        stop = mask.find(b".", start + _ID)
        stop = len(mask) if stop < 0 else stop
        if stop - start == _ID:
            digest.update(log[hashed:start])
            digest.update(names.setdefault(log[start:stop], b"%032d" % len(names)))
            hashed = stop
        start = mask.find(b"x" * _ID, stop)
    digest.update(log[hashed:])
    return "sha256:" + digest.hexdigest()


def _clock() -> datetime:
    return EPOCH + timedelta(seconds=trio.current_time())


# --- one run -----------------------------------------------------------------------------------


class _TappedLog(MemoryLog):
    """A memory log that keeps what was appended, as it was appended.

    Retention redacts argument payloads from the log once nothing needs them; the checker
    needs them still, to see what a call was really sent.
    """

    def __init__(self, store: MemoryStore, appended: dict[int, Event]) -> None:
        super().__init__(store, clock=_clock)
        self.appended = appended

    async def append(
        self, events: Sequence[NewEvent], expected_versions: Mapping[str, int] | None = None
    ) -> list[int]:
        positions = await super().append(events, expected_versions)
        for position, new in zip(positions, events, strict=True):
            self.appended.setdefault(position, new.event)
        return positions


def _as_appended(
    records: Sequence[RecordedEvent], appended: dict[int, Event]
) -> list[RecordedEvent]:
    return [
        attrs.evolve(recorded, event=appended[recorded.position])
        if isinstance(recorded.event, Redacted) and recorded.position in appended
        else recorded
        for recorded in records
    ]


@frozen(kw_only=True)
class _Life:
    """How a runtime left the log when it stopped: what a replay of that log must reach."""

    head: int
    digest: str
    phases: dict[CallKey, Phase]
    rows: tuple[StoredRecord, ...]
    limits: CallLimits
    horizon: timedelta | None
    digest_key: bytes


class Serving(Protocol):
    """What the conversations and the person ask of a runtime: a ``Runtime``, or what routes
    each request to the process of a partitioned log that serves it."""

    async def start_turn(
        self,
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        tools: Iterable[str | ToolDeclaration] | None = None,
    ) -> object: ...

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None: ...

    async def feed(self, events: Sequence[Event]) -> None: ...

    async def pending_confirmation(self, key: CallKey) -> PendingConfirmation | None: ...

    async def confirm(
        self,
        key: CallKey,
        *,
        principal: str,
        arguments_digest: str,
        expires_in: timedelta = ...,
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> object: ...

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None: ...


class _Stop(Exception):
    """The runtime broke in a way no party expects: the run ends and the log is checked."""


@define
class _Run:
    plan: Plan
    tools: Sequence[SimulatedTool]
    check: Validator | None
    limits: CallLimits
    seed: int
    retention: Retention
    horizon: timedelta | None = DEFAULT_LEDGER_HORIZON
    """The runtime's ledger horizon, after which an idle turn is retired."""
    keep_lives: bool = True
    """Record each runtime's end state (``lives``) for I8; a run made only to compare its log
    with another's does without."""
    from_snapshot: bool = True
    """A restarted runtime starts from the snapshot its predecessor wrote; otherwise the
    snapshot is dropped first and it replays the log from the start."""
    store: MemoryStore = field(factory=MemoryStore)
    appended: dict[int, Event] = field(factory=dict)
    cursors: dict[str, int] = field(factory=dict)
    open_responses: dict[ResponseRef, None] = field(factory=dict)
    fed: list[CallKey] = field(factory=list)
    held: list[CallKey] = field(factory=list)
    observations: dict[int, list[Observation]] = field(factory=dict)
    crashes: list[Violation] = field(factory=list)
    lives: list[_Life] = field(factory=list)
    recovered: list[int] = field(factory=list)
    controls_done: int = 0
    actions: int = 0
    restarts: int = 0

    @property
    def head(self) -> int:
        return len(self.store.rows)

    async def run(self) -> None:
        lives = 1 if self.plan.restart_at is None else 2
        resumed: list[ResponseRef] = []
        for life in range(lives):
            last = life == lives - 1
            try:
                resumed = await self._life(resumed, None if last else self.plan.restart_at)
            except _Stop:
                return
            if not last:
                self.restarts += 1
                if not self.from_snapshot:
                    self.store.snapshots.clear()

    @asynccontextmanager
    async def _runtime(self) -> AsyncIterator[Runtime]:
        log = _TappedLog(self.store, self.appended)
        async with open_runtime(
            log=log,
            tools=[tool.declaration for tool in self.tools],
            check=self.check,
            limits=self.limits,
            validation_timeout=VALIDATION_TIMEOUT,
            operators=[OPERATOR],
            retention=self.retention,
            ledger_horizon=self.horizon,
            snapshot_every=SNAPSHOT_EVERY,
            # Nothing to freeze: a seed's state is small, and a worker runs a runtime after
            # another, whose every stop would then collect the whole process.
            collector=_COLLECTOR,
        ) as runtime:
            yield runtime

    async def _life(self, resumed: list[ResponseRef], until: float | None) -> list[ResponseRef]:
        """One runtime's life: until the plan is done, or until the crash at ``until``."""
        lost: list[ResponseRef] = []
        try:
            async with self._runtime() as runtime:
                await runtime.settle()
                self.recovered.append(self.head)
                if resumed:
                    await runtime.feed([StreamResumed(response=r) for r in resumed])
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._executor, runtime, "executor-a", 1.0)
                    nursery.start_soon(self._executor, runtime, "executor-b", 0.15)
                    nursery.start_soon(self._probe, runtime)
                    nursery.start_soon(self._operator, runtime)
                    with trio.move_on_at(until if until is not None else float("inf")):
                        async with trio.open_nursery() as conversations:
                            for conversation in self.plan.conversations:
                                conversations.start_soon(self._converse, runtime, conversation)
                        await trio.sleep(DRAIN)
                    if until is not None and self.plan.graceful_restart:
                        lost = list(self.open_responses)
                        if lost:
                            await runtime.feed(
                                [StreamLost(response=r, resumable=True) for r in lost]
                            )
                    nursery.cancel_scope.cancel()
                await runtime.settle()
                if self.keep_lives:
                    self.lives.append(
                        _Life(
                            head=self.head,
                            digest=runtime.digest(),
                            phases={key: runtime.phase(key) for key in self.fed},
                            # A copy: retention goes on redacting the log in the next life.
                            rows=tuple(self.store.rows),
                            limits=self.limits,
                            horizon=self.horizon,
                            digest_key=runtime.log.key(DIGEST_KEY),
                        )
                    )
        except* Exception as group:
            self.crashes.append(_crash(group))
            raise _Stop from None
        return lost

    # --- the parties ---

    async def _converse(self, runtime: Serving, conversation: Conversation) -> None:
        name = f"{conversation.tenant}/{conversation.name}"
        cursor = self.cursors.get(name, 0)
        if cursor == 0:
            await trio.sleep(conversation.start)
        rng = random.Random(f"{self.seed}/{name}/{cursor}")
        while cursor < len(conversation.actions):
            action = conversation.actions[cursor]
            await self._act(runtime, conversation, action, rng)
            cursor += 1
            self.cursors[name] = cursor

    async def _act(
        self,
        runtime: Serving,
        conversation: Conversation,
        action: Feed | StartTurn | CancelTurn | Confirmations,
        rng: random.Random,
    ) -> None:
        self.actions += 1
        match action:
            case StartTurn(turn=turn, tools=tools):
                # Refused only for a turn started before a restart whose answer the crash took.
                with contextlib.suppress(RefusedError):
                    await runtime.start_turn(
                        tenant=turn.tenant,
                        conversation=turn.conversation,
                        turn=turn.turn,
                        principal=conversation.principal,
                        tools=tools,
                    )
            case CancelTurn(turn=turn):
                # Refused only for a turn retired (idle for the horizon) before the plan
                # cancels it.
                try:
                    await runtime.cancel_turn(turn, principal=conversation.principal)
                except RefusedError as error:
                    if "is unknown" not in str(error):
                        raise
            case Feed(events=events, pause=pause):
                if pause:
                    await trio.sleep(pause)
                for event in events:
                    key = getattr(event, "key", None)
                    if isinstance(key, CallKey):
                        self.open_responses[key.response_ref] = None
                        self.fed.append(key)
                    if isinstance(event, ResponseEnded):
                        self.open_responses.pop(event.response, None)
                await runtime.feed(events)
            case Confirmations(answers=answers):
                await trio.sleep(rng.uniform(0.2, 1.0))
                for key, choice in answers:
                    await self._answer(runtime, conversation, key, choice)

    async def _answer(
        self, runtime: Serving, conversation: Conversation, key: CallKey, choice: str
    ) -> None:
        pending = await runtime.pending_confirmation(key)
        digest = pending.arguments_digest if pending is not None else "sha256:" + "0" * 64
        principal = conversation.principal
        expires = timedelta(minutes=10)
        edit: Mapping[str, Any] | bytes | None = None
        match choice:
            case "ignore":
                return
            case "deny":
                await _refusable(runtime.deny(key, principal=principal, reason="no"))
                return
            case "stale":
                expires = timedelta(seconds=-1)
            case "brief":
                # Outlived by a claim that comes late (an executor's, or the probe's).
                expires = timedelta(seconds=1)
            case "wrong_digest":
                digest = "sha256:" + hashlib.sha256(digest.encode()).hexdigest()
            case "wrong_principal":
                principal = "user:mallory"
            case "late":
                await trio.sleep(self.limits.confirmation_lifetime.total_seconds() + 1)
            case "edit":
                # The person changes what they were shown (which the schema may then refuse).
                edit = _edited(pending.arguments) if pending is not None else {}
            case "bad_edit":
                edit = b'{"edited": '
        self.actions += 1
        await _refusable(
            runtime.confirm(
                key,
                principal=principal,
                arguments_digest=digest,
                expires_in=expires,
                arguments=edit,
            )
        )
        if choice in ("twice", "stale"):
            # A second confirmation: a duplicate, or a fresh one after the stale one.
            self.actions += 1
            await _refusable(runtime.confirm(key, principal=principal, arguments_digest=digest))

    async def _executor(self, runtime: Runtime, name: str, share: float) -> None:
        rng = random.Random(f"{self.seed}/{name}/{self.restarts}")
        async for ready in runtime.ready_calls():
            self._observe(
                Observation(
                    head=self.head,
                    key=ready.key,
                    turn=ready.turn,
                    tenant=ready.tenant,
                    principal=ready.principal,
                    tool=ready.tool,
                    arguments_digest=ready.arguments_digest,
                )
            )
            if rng.random() < share:
                if rng.random() < EXECUTOR_LAG:
                    # A busy executor claims late: a confirmation given for a moment may have
                    # expired by then.
                    await trio.sleep(rng.uniform(0, 2))
                await self._claim(runtime, ready.key, name, rng)

    async def _claim(self, runtime: Runtime, key: CallKey, name: str, rng: random.Random) -> None:
        self.actions += 1
        try:
            dispatch = await runtime.claim(key, executor=name)
        except ClaimRefused:
            return
        self._observe(
            Observation(
                head=self.head,
                key=dispatch.key,
                turn=dispatch.turn,
                tenant=dispatch.tenant,
                principal=dispatch.principal,
                tool=dispatch.tool,
                arguments_digest=dispatch.arguments_digest,
                claim_id=dispatch.claim_id,
            )
        )
        roll = rng.random()
        if roll < 0.2:
            # The executor took the call and never said how it went.
            self.held.append(key)
            return
        if roll < 0.3:
            # A run that takes a while, and stops when asked to.
            with dispatch.stop.scope() as run:
                await trio.sleep(rng.uniform(0, 3))
            if run.cancelled_caught:
                self.actions += 1
                await runtime.stopped(dispatch)
                return
        self.actions += 1
        if roll < 0.85:
            await runtime.complete(dispatch)
        else:
            await runtime.fail(dispatch, "RuntimeError")

    async def _probe(self, runtime: Runtime) -> None:
        """Claims calls in whatever state they are, and each call an executor took without
        reporting how it went (after a restart its outcome is unknown) once."""
        rng = random.Random(f"{self.seed}/probe/{self.restarts}")
        while True:
            await trio.sleep(rng.uniform(1, 6))
            candidates = self.held[:]
            del self.held[:]
            if self.fed:
                candidates.append(rng.choice(self.fed))
            for key in candidates:
                await self._claim(runtime, key, "probe", rng)

    async def _operator(self, runtime: Runtime) -> None:
        controls = self.plan.controls
        while self.controls_done < len(controls):
            control = controls[self.controls_done]
            await trio.sleep_until(control.at)
            self.actions += 1
            reason = "simulated incident"
            match control.action:
                case "quarantine":
                    await runtime.quarantine_response(
                        control.target, operator=OPERATOR, reason=reason, tenant=control.tenant
                    )
                case "disable":
                    await runtime.disable_tool(
                        control.target, operator=OPERATOR, reason=reason, tenant=control.tenant
                    )
                case "enable":
                    await runtime.enable_tool(
                        control.target, operator=OPERATOR, reason=reason, tenant=control.tenant
                    )
                case "stop":
                    await runtime.stop_tenant(control.target, operator=OPERATOR, reason=reason)
                case "resume":
                    await runtime.resume_tenant(control.target, operator=OPERATOR, reason=reason)
            self.controls_done += 1

    def _observe(self, observation: Observation) -> None:
        self.observations.setdefault(observation.head, []).append(observation)


def _edited(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a person shown them might confirm instead: each text changed."""
    return {
        name: f"{value} (edited)" if isinstance(value, str) else value
        for name, value in arguments.items()
    }


async def _refusable(request: Awaitable[object]) -> None:
    """Await a confirmation or a denial the runtime may refuse (and records when it does)."""
    with contextlib.suppress(ConfirmationRefused):
        await request


def _crash(group: BaseExceptionGroup[Exception]) -> Violation:
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        error = stack.pop()
        if isinstance(error, BaseExceptionGroup):
            stack.extend(reversed(error.exceptions))
        elif not isinstance(error, trio.Cancelled):
            leaves.append(error)
    error = leaves[0] if leaves else group
    detail = f"{type(error).__name__}: {error}"
    invariant = "I8" if isinstance(error, ReplayDivergence) else "crash"
    return Violation(invariant=invariant, key="", detail=detail)


# --- checking a run ------------------------------------------------------------------------------


def _replay_violations(records: Sequence[RecordedEvent], life: _Life) -> list[Violation]:
    """I8: a fresh fold of the log as a runtime left it reaches that runtime's digest and the
    phase it gave every call."""
    projections = Projections(ledger_horizon=life.horizon)
    fold = CallFold(life.limits, digest_key=life.digest_key)
    for recorded in records:
        projections.apply(recorded)
        try:
            fold.apply(recorded)
        except ReplayDivergence as error:
            return [
                Violation(
                    invariant="I8",
                    key=error.key.stream,
                    detail=str(error),
                    position=recorded.position,
                )
            ]
    violations = []
    if projections.digest() != life.digest:
        violations.append(
            Violation(
                invariant="I8",
                key="",
                detail=f"the replayed digest {projections.digest()} is not the live {life.digest}",
                position=life.head,
            )
        )
    for key, phase in life.phases.items():
        state = fold.state(key)
        replayed = Phase.ABSENT if state is None else state.phase
        if replayed is not phase:
            violations.append(
                Violation(
                    invariant="I8",
                    key=key.stream,
                    detail=f"replayed {replayed.value}, live {phase.value}",
                    position=life.head,
                )
            )
    return violations


def _seeded_store(seed: int, *, partitions: int = 1) -> MemoryStore:
    """A log for ``seed`` whose identity and secret, and so its keyed digests, every run of the
    seed shares."""
    made = hashlib.sha256(f"inert simulation {seed}".encode()).digest()
    return MemoryStore(identity=f"simulation-{seed}", secret=made, partitions=partitions)


async def _read(rows: Sequence[StoredRecord]) -> list[RecordedEvent]:
    store = MemoryStore()
    store.append(list(rows))
    log = MemoryLog(store, clock=_clock)
    try:
        return await log.read(1)
    finally:
        await log.aclose()


def _read_again(
    rows: Sequence[StoredRecord], read: Sequence[StoredRecord], records: Sequence[RecordedEvent]
) -> list[RecordedEvent]:
    """What ``_read`` gives for ``rows``, the log as an earlier runtime left it, given the rows
    it holds now (``read``) read as ``records``: only rows redacted since are decoded again."""
    return [
        records[index] if row == read[index] else decode_record(DEFAULT_CODEC, row)
        for index, row in enumerate(rows)
    ]


def _run_once(
    seed: int,
    *,
    plan: Plan,
    tools: Sequence[SimulatedTool],
    check: Validator | None,
    limits: CallLimits,
    retention: Retention,
    horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    keep_lives: bool = True,
    from_snapshot: bool = True,
) -> _Run:
    run = _Run(
        plan=plan,
        tools=tools,
        check=check,
        limits=limits,
        seed=seed,
        retention=retention,
        horizon=horizon,
        keep_lives=keep_lives,
        from_snapshot=from_snapshot,
        store=_seeded_store(seed),
    )
    with seeded_scheduling(seed):
        trio.run(run.run, clock=trio.testing.MockClock(autojump_threshold=0))
    return run


def simulate(
    seed: int,
    *,
    keys: int = 200,
    plant: str | None = None,
    tools: Sequence[SimulatedTool] = DEMO_TOOLS,
    check: Validator | None = demo_check,
    retention: Retention = DEFAULT_RETENTION,
    horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    twice: bool = True,
) -> SimulationResult:
    """Run one seed against the real runtime, check every invariant, and run it again.

    ``tools`` and ``check`` are what the runtime is opened with (your own declarations, each
    with example arguments, and your business check); ``plant`` runs it against a planted bug
    (``PLANTS``); ``retention`` is the runtime's retention policy (its default, unless given);
    ``horizon`` its ledger horizon (a short one retires turns while the plan runs).
    Call it outside a Trio run: it runs its own.
    """
    plan = make_plan(seed, keys, tools, SIMULATION_LIMITS)
    limits = SIMULATION_LIMITS
    once = partial(
        _run_once,
        seed,
        plan=plan,
        tools=tools,
        check=check,
        limits=limits,
        retention=retention,
        horizon=horizon,
    )
    with planted(plant):
        run = once()
        # The second run restarts by replaying the log from the start, the first from its
        # snapshot: both must write the same log.
        again = once(keep_lives=False, from_snapshot=False) if twice else run
        records = trio.run(_read, run.store.rows)
        # The code that wrote the log (planted bug included) must replay it to the same state.
        replayed = [
            violation
            for life in run.lives
            for violation in _replay_violations(
                _read_again(life.rows, run.store.rows, records), life
            )
        ]
    checker = check_log(
        _as_appended(records, run.appended),
        [tool.declaration for tool in tools],
        limits,
        observations=run.observations,
        restarts=run.recovered[1:],
    )
    violations = [*run.crashes, *checker.violations, *replayed, *tool_errors(records)]
    first, second = log_hash(run.store), log_hash(again.store)
    if first != second:
        violations.append(
            Violation(
                invariant="nondeterminism",
                key="",
                detail=(
                    "two runs of the seed (restarted from a snapshot, and by a replay from the"
                    f" start) wrote different logs ({first} and {second})"
                ),
            )
        )
    states: dict[str, int] = {}
    for phase in (run.lives[-1].phases if run.lives else {}).values():
        states[phase.value] = states.get(phase.value, 0) + 1
    return SimulationResult(
        seed=seed,
        keys=keys,
        plant=plant,
        steps=checker.steps,
        actions=run.actions,
        restarts=run.restarts,
        states=states,
        violations=tuple(violations),
        log_hash=first,
        retention=next(
            (name for name, policy in RETENTIONS.items() if policy == retention), "custom"
        ),
    )


def _simulate_job(
    job: tuple[int, int, str | None, str, str | None], loaded: ToolSuite | None = None
) -> SimulationResult:
    seed, keys, plant, retention, suite = job
    if suite is None:
        return simulate(seed, keys=keys, plant=plant, retention=RETENTIONS[retention])
    # A worker process loads the tools by their name, once for each seed it runs.
    tools = loaded if loaded is not None else load_suite(suite)
    result = simulate(
        seed,
        keys=keys,
        plant=plant,
        tools=tools.tools,
        check=tools.check,
        retention=RETENTIONS[retention],
    )
    return attrs.evolve(result, suite=suite)


def simulate_many(
    seeds: Iterable[int],
    *,
    keys: int = 200,
    plant: str | None = None,
    retention: str = "default",
    workers: int = 1,
    progress: Callable[[int], object] | None = None,
    suite: str | None = None,
) -> list[SimulationResult]:
    """Run ``simulate`` on each seed, in ``workers`` processes, in order.

    The tools are the demo's, or those ``suite`` names (``module:attribute`` or a TOOLS.json
    file, see ``load_suite``; loaded here first, so that a name that gives none fails before
    any seed runs). ``retention`` names a policy of ``RETENTIONS``. Workers are started fresh
    (``spawn``), so that nothing of the calling process (its threads, a planted bug) leaks into
    them. ``progress`` is told how many seeds are done as each one is.
    """
    jobs = [(seed, keys, plant, retention, suite) for seed in seeds]
    return run_seeds(_simulate_job, jobs, retention, suite, workers=workers, progress=progress)


def run_seeds(
    job: Callable[[JobT, ToolSuite | None], ResultT],
    jobs: list[JobT],
    retention: str,
    suite: str | None,
    *,
    workers: int,
    progress: Callable[[int], object] | None,
) -> list[ResultT]:
    """Each job run by ``job`` (a module's function, so that a worker process finds it), in
    ``workers`` processes started fresh, in order; the retention policy's name and the suite
    checked (and the suite loaded) first, so that a name that gives none fails before any seed
    runs."""
    if retention not in RETENTIONS:
        raise ConfigurationError(
            f"no retention policy is named {retention!r}: choose from {', '.join(RETENTIONS)}"
        )
    loaded = load_suite(suite) if suite is not None else None
    results: list[ResultT] = []

    def done(result: ResultT) -> None:
        results.append(result)
        if progress is not None:
            progress(len(results))

    if workers <= 1 or len(jobs) <= 1:
        for each in jobs:
            done(job(each, loaded))
        return results
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        # One seed at a time: a seed takes about a second and its result is small, so handing
        # out chunks saves nothing, and a chunk of many seeds left to one worker at the end
        # (60 of 1,000 seeds over two workers) keeps the other idle that long.
        for result in pool.map(job, jobs):
            done(result)
    return results
