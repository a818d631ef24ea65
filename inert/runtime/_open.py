"""Opening a runtime: its options checked, its log opened, its state rebuilt from the log (or a
snapshot and the log's tail), its tasks started, and its stop, with the one error that stopped
it raised as itself.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import trio
import trio.lowlevel
from opentelemetry.trace import TracerProvider

from ..actors import (
    DEFAULT_LIMITS,
    CallLimits,
    ToolDeclaration,
    ToolRegistry,
    Validator,
)
from ..actors._router import (
    DEFAULT_INBOX_SIZE,
    DEFAULT_MAX_BUSY_ACTORS,
    DEFAULT_VALIDATION_TIMEOUT,
)
from ..events import (
    ConfigurationError,
    InertError,
    LogNotFound,
)
from ..log import Log, open_log
from ..projections import DEFAULT_LEDGER_HORIZON
from ..tracing import CallSpans, global_tracer_provider
from . import _collector
from ._boundary import OperatorAuthorizer
from ._collector import DEFAULT_COLLECTOR, CollectorSettings
from ._ingress import DEFAULT_MAX_PENDING_BYTES
from ._partitioned import PartitionedRuntime
from ._peers import DEFAULT_LEASE_TIME
from ._recovery import keep_company, leave, recover
from ._retention import DEFAULT_RETENTION, Retention
from ._retirement import retire_idle_turns
from ._runtime import DEFAULT_REQUEST_TIMEOUT, Runtime, trio_clock
from ._snapshot import (
    DEFAULT_SNAPSHOT_EVERY,
)


@asynccontextmanager
async def open_runtime(
    *,
    log: str | Log,
    create: bool = False,
    tools: Iterable[ToolDeclaration] = (),
    check: Validator | None = None,
    limits: CallLimits = DEFAULT_LIMITS,
    validation_timeout: float = DEFAULT_VALIDATION_TIMEOUT,
    inbox_size: int = DEFAULT_INBOX_SIZE,
    max_busy_actors: int = DEFAULT_MAX_BUSY_ACTORS,
    operators: OperatorAuthorizer | Iterable[str] = (),
    ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    retention: Retention = DEFAULT_RETENTION,
    process: str | None = None,
    lease_time: float = DEFAULT_LEASE_TIME,
    tracer_provider: TracerProvider | None = None,
    collector: CollectorSettings | None = DEFAULT_COLLECTOR,
    held_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> AsyncIterator[Runtime]:
    """Open a runtime on a log (a URL, or a log opened already) with these tool declarations.

    A URL must name a log that exists (an SQLite file or a PostgreSQL schema holding one), or
    ``LogNotFound`` is raised: a mistyped path or schema would otherwise start a new, empty log
    beside the real one, where no call of it is known. ``create=True`` makes the log where
    there is none (a memory log always exists).

    ``check`` validates each call further once its declaration is known (business rules,
    permissions), within ``validation_timeout`` seconds; its answer is recorded, so a replay never
    asks again. ``operators`` says who holds the operator role: a function of the operator
    principal, or the principals themselves (none by default: every control is refused). The ledger
    keeps a finished call's row ``ledger_horizon`` (30 days) after it finished, by the log's times,
    and a turn idle that long is retired (a ``TurnRetired`` event: every replay forgets the turn
    where the live runtime did). ``inbox_size`` bounds the work waiting for one call's actor (at
    least 1; the router waits when it is full), and ``max_busy_actors`` the actors with work at
    once (at least 1, 4,096 by default; past it the router waits for one to finish before it
    starts another, so that a fold catching up on a backlog does not start one for every call it
    passes). ``retention`` says which argument payloads are redacted from the log once nothing
    can need them (by default fragments and validated arguments, see
    [`Retention`][inert.Retention]). Where several runtime processes share one log, each names
    itself (``process``): it owns the turns it starts, and takes over the turns of a process
    silent for ``lease_time`` seconds (see [Runtimes on a log][runtimes-on-a-log]). With a
    ``tracer_provider`` (OpenTelemetry; by default the global one, where the application set
    one), turns, calls, validations, confirmations, dispatches and controls become spans, made
    from the log once the runtime is live, never on replay (see
    [`inert.tracing`][inert.tracing]). The garbage collector is set as ``collector`` says (higher
    thresholds from the start; the objects alive frozen once a snapshot is loaded and once
    everything is rebuilt from the log; ``None`` leaves it alone, see
    [`CollectorSettings`][inert.CollectorSettings]); the runtime stops when the block ends.
    Fragments fed are held for the next append of the log: past ``held_bytes`` of them (16 MiB) a
    feed of fragments waits until the writer has made room. Every ``snapshot_every`` events folded
    (and once after a restart that folded at least that many), the runtime writes a snapshot of its
    state beside the log, and a restart starts from the newest one its code and configuration made
    (``None``: never; see [Snapshots][snapshots]). A request the runtime makes of a call's
    actor (a claim, a confirmation, a denial) or of its own fold (catching up before a control or a
    confirmation) that is not answered within ``request_timeout`` seconds (30, three lease times)
    raises ``RequestTimedOut``, naming what was not answered and why.
    """
    for name, seconds in (
        ("validation_timeout", validation_timeout),
        ("lease_time", lease_time),
        ("request_timeout", request_timeout),
    ):
        # Written so that NaN fails too.
        if not 0 < seconds < math.inf:
            raise ConfigurationError(
                f"{name} must be a positive, finite number of seconds, not {seconds}"
            )
    if held_bytes < 1:
        raise ConfigurationError(f"held_bytes must be at least 1, not {held_bytes}")
    if snapshot_every is not None and snapshot_every < 1:
        raise ConfigurationError(f"snapshot_every must be at least 1 or None, not {snapshot_every}")
    if inbox_size < 1:
        raise ConfigurationError(f"inbox_size must be at least 1, not {inbox_size}")
    if max_busy_actors < 1:
        raise ConfigurationError(f"max_busy_actors must be at least 1, not {max_busy_actors}")
    registry = ToolRegistry(tools, check=check)
    authorizer = operators if callable(operators) else frozenset(operators).__contains__
    async with _opened(log, create=create, partitions=None, opener="open_runtime") as opened:
        if opened.partitions > 1:
            raise ConfigurationError(
                f"the log has {opened.partitions} partitions of calls: open it with"
                " open_partitioned_runtime, which folds the partitions this process takes"
            )
        runtime = _new_runtime(
            opened,
            registry,
            limits,
            operators=authorizer,
            tracer_provider=tracer_provider,
            ledger_horizon=ledger_horizon,
            retention=retention,
            process=process,
            lease_time=lease_time,
            held_bytes=held_bytes,
            snapshot_every=snapshot_every,
            validation_timeout=validation_timeout,
            inbox_size=inbox_size,
            max_busy_actors=max_busy_actors,
            request_timeout=request_timeout,
        )
        async with _run(runtime, collector) as running:
            yield running


@asynccontextmanager
async def _opened(
    log: str | Log, *, create: bool, partitions: int | None, opener: str
) -> AsyncIterator[Log]:
    """The log a runtime runs on: one opened already, or the one a URL names (opened here, on
    the runtime's clock, and closed after)."""
    if isinstance(log, Log):
        yield log
        return
    async with AsyncExitStack() as stack:
        try:
            opened = await stack.enter_async_context(
                open_log(log, clock=trio_clock(), create=create, partitions=partitions)
            )
        except LogNotFound as error:
            raise LogNotFound(f"{error}; {opener}(create=True) makes a new log there") from None
        yield opened


def _new_runtime(
    log: Log,
    registry: ToolRegistry,
    limits: CallLimits,
    *,
    operators: OperatorAuthorizer,
    tracer_provider: TracerProvider | None,
    **settings: Any,
) -> Runtime:
    """A runtime on a log (or one partition of it), with its operators and spans."""
    runtime = Runtime(log, registry, limits, **settings)
    runtime.operators = operators
    provider = tracer_provider if tracer_provider is not None else global_tracer_provider()
    if provider is not None:
        runtime.spans = CallSpans(
            provider.get_tracer("inert"),
            offered=runtime._offered_tools,
            digest_key=runtime._digest_key_of,
        )
    return runtime


@asynccontextmanager
async def open_partitioned_runtime(
    *,
    log: str | Log,
    process: str,
    create: bool = False,
    partitions: int | None = None,
    tools: Iterable[ToolDeclaration] = (),
    check: Validator | None = None,
    limits: CallLimits = DEFAULT_LIMITS,
    operators: OperatorAuthorizer | Iterable[str] = (),
    ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    retention: Retention = DEFAULT_RETENTION,
    lease_time: float = DEFAULT_LEASE_TIME,
    tracer_provider: TracerProvider | None = None,
    snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> AsyncIterator[PartitionedRuntime]:
    """Open the runtime of one process (named ``process``, unique among the processes of the
    log) on a partitioned log: it beats in the control partition, takes its share of the
    partitions of the processes alive, and folds those alone, each with a ``Runtime`` of its
    own (see [Partitions][partitions]). A log created here has ``partitions`` partitions of
    calls. The other options are ``open_runtime``'s, for each partition's runtime.
    """
    if not process:
        raise ConfigurationError("a runtime on a partitioned log needs a process name")
    for name, seconds in (("lease_time", lease_time), ("request_timeout", request_timeout)):
        if not 0 < seconds < math.inf:
            raise ConfigurationError(
                f"{name} must be a positive, finite number of seconds, not {seconds}"
            )
    registry = ToolRegistry(tools, check=check)
    authorizer = operators if callable(operators) else frozenset(operators).__contains__
    async with _opened(
        log, create=create, partitions=partitions, opener="open_partitioned_runtime"
    ) as opened:

        def make_core(partition: Log) -> Runtime:
            core = _new_runtime(
                partition,
                registry,
                limits,
                operators=authorizer,
                tracer_provider=tracer_provider,
                ledger_horizon=ledger_horizon,
                retention=retention,
                process=process,
                lease_time=lease_time,
                snapshot_every=snapshot_every,
                request_timeout=request_timeout,
            )
            # Heartbeats go to the control partition, once a process.
            core._beats_here = False
            core._heartbeats = opened
            return core

        runtime = PartitionedRuntime(
            opened,
            process=process,
            lease_time=lease_time,
            operators=authorizer,
            make_core=make_core,
            serve_core=lambda core: _serving(core, None),
        )
        try:
            async with runtime.running() as running:
                yield running
        except BaseExceptionGroup as group:
            raise sole_inert_error(group) from None


@asynccontextmanager
async def _run(runtime: Runtime, collector: CollectorSettings | None) -> AsyncIterator[Runtime]:
    if collector is None:
        async with _running(runtime, None) as running:
            yield running
        return
    _collector.apply(collector)
    try:
        async with _running(runtime, collector) as running:
            yield running
    finally:
        _collector.restore()


@asynccontextmanager
async def _running(runtime: Runtime, collector: CollectorSettings | None) -> AsyncIterator[Runtime]:
    # Present from its first step: an operator's control is taken up by it from here on.
    async with runtime.log.runtime_presence(), _serving(runtime, collector) as running:
        yield running


@asynccontextmanager
async def _serving(runtime: Runtime, collector: CollectorSettings | None) -> AsyncIterator[Runtime]:
    await runtime._restore()
    if collector is not None:
        _collector.freeze(collector)
    await runtime._router.catch_up()
    await runtime._redact_caught_up()
    snapshot_written = _collector.after_snapshot(collector)
    runtime._snapshots.captured = _collector.after_capture(collector)
    await runtime._snapshots.after_replay(
        runtime._router.position, runtime.restored_from, snapshot_written
    )
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime._router.run, nursery)
            nursery.start_soon(runtime._ingress.run)
            nursery.start_soon(runtime._retain)
            nursery.start_soon(runtime._snapshots.write_taken, snapshot_written)
            if runtime._horizon is not None:
                nursery.start_soon(
                    retire_idle_turns,
                    runtime.log,
                    runtime._fold,
                    runtime._horizon,
                    runtime._caught_up,
                )
            if runtime.peers is not None:
                nursery.start_soon(keep_company, runtime, runtime.peers)
            try:
                # What replaying the log heard made no spans: from here on, events are new.
                runtime._live = True
                await recover(runtime)
                if collector is not None:
                    _collector.freeze(collector)
                yield runtime
            except BaseException as error:
                body_error = error
            finally:
                with trio.CancelScope(shield=True):
                    # A clean stop writes the fragments fed: only a crash loses them.
                    await runtime._ingress.drain()
                if runtime.spans is not None:
                    runtime.spans.close(runtime.log.now())
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        stopped = sole_inert_error(group)
        if body_error is None or isinstance(body_error, trio.Cancelled):
            raise stopped from None
        # The block failed too (its own error, or a write of the runtime's start, such as an
        # unknown outcome it records): both are said, neither is lost.
        raise BaseExceptionGroup(
            "the runtime stopped, and the block it ran failed", [stopped, body_error]
        ) from None
    if body_error is not None:
        raise body_error
    if runtime.process is not None and runtime._beats_here:
        # A clean stop: the others need not wait out the lease to take its turns over.
        await leave(runtime.log, runtime.process)


def sole_inert_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one ``InertError`` that stopped the runtime's tasks, else the group as it is.

    An actor that cannot write (a storage failure, another writer on its stream) or a replay
    that diverges stops the runtime; its error is raised as itself, not inside a group.
    """
    errors = [error for error in _leaves(group) if not isinstance(error, trio.Cancelled)]
    if len(errors) == 1 and isinstance(errors[0], InertError):
        return errors[0]
    return group


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
