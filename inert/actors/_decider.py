"""The call state machine: every rule of one call's life, and the table that applies them.

States::

    absent -> collecting -> terminal_candidate -> validated -> dispatched
                  \\                 \\                 \\
                   +-----------------+-----------------+--> cancelled | failed

``dispatched``, ``cancelled`` and ``failed`` are terminal. ``validated`` may wait for a
confirmation before a claim can dispatch it. ``absent`` is where every call key starts and where
it stays while everything addressed to it is rejected.

Rules:

1. Determinism. An input is judged against the state, the context as of the input's log
   position (the turn, the operator controls, the limits, the turn its response was first
   seen under) and the time the log recorded it: the log's clock (on PostgreSQL the server's,
   stamped in the transaction that writes the input; on a log without a server its writers'
   clock, never before the log's last stamp), never the clock of the process that decides.
   Nothing else is consulted, so the same log gives the same decisions, live and on replay. The
   only answer from outside is a validation result, fed back as ``ValidationOutcome`` and
   recorded in the decision it produces, so that replay never asks for it again.
2. Opening. A call opens only in a known, active turn; in a cancelled or superseded turn every
   event addressed to it is rejected (``stale_turn``) and it never leaves ``absent``; a request
   for a call never opened is rejected (``unknown_call``). A provider response belongs to the
   turn it was first seen under: a call opened in a response first seen under another turn (or
   whose stream had events before, of a turn unknown now) fails at once
   (``response_of_another_turn``), so that a response replayed into a new turn never acts again.
   A tool the turn did not offer fails the call at once. A call opened under an operator control
   is cancelled at once. A call opened past a limit on live calls (of its turn, of its tenant)
   fails (``limit_exceeded``); in a turn judged by rules 3 or later its response then opens no
   call any more (each later one fails ``response_over_limit``), and a call counts against the
   limits from its opening until its ending is read back from the log (not from when it is
   decided), so that a replay in which a call takes its decisions as recorded counts alike.
   Fragments or an end event before the opening fail the call: its data can no longer be whole.
   A call the provider ran itself (a server tool) is on record and cancelled as it opens
   (``server_executed``): no tool of the turn makes it dispatchable.
3. Fragments are transport data. They go to a private buffer (``inert.actors._buffer``). A
   fragment with an offset is the call's bytes ``[offset, offset + len)``:
   a. a range wholly inside what is stored is a duplicate, however differently it was chunked:
      rejected, never data;
   b. a range that overlaps stored bytes must equal them there, or the call fails
      (``conflicting_fragment``); a range that straddles the end appends its suffix;
   c. a range that starts past the end is held until the bytes before it arrive (a gap still
      open at the end event fails the call, rule 4);
   d. sequences keep their meaning: new bytes under sequences that were all seen fail the call
      (``conflicting_fragment``), and the sequences accepted are checked for a gap at the end.
   A fragment without an offset (schema 1) is placed by its sequences: one whose sequences were
   all seen is a duplicate; one that overlaps what was seen fails the call. Fragments with and
   without offsets, or numbered and unnumbered, in one call fail it; so does one numbered at or
   before the opening. Past the byte limit (the furthest byte a fragment reaches counts) or the
   fragment limit the call fails.
4. The call's own end event permits parsing, nothing more. A sequence number missing between
   the opening and the end, or bytes missing before a part held past a gap, fail the call
   (``sequence_gap``); final arguments sent by the provider must equal the assembled bytes (or
   stand for them when there were no fragments); then the bytes are parsed once, strictly
   (``inert.actors._arguments``). Only a parse that passes makes a ``terminal_candidate``.
5. Only a successful end of its response makes a terminal candidate eligible: validation is
   requested once. A response that ends any other way, or ends before the call's own end
   event, fails the call. From rules 7 validation does not wait for the response: it is
   requested once, at the call's own end event, so that a response's end finds its calls
   validated already. Dispatch still waits: a validated call can be claimed only once the
   first end of its response, after the call's own end event, was successful (a claim before
   is rejected ``not_ready``); a first end of any other kind fails the call, and until its
   response ends the call still needs its stream (rule 6's connection loss, rule 9's idle
   deadline). A confirmation may be given meanwhile; it never dispatches on its own. A call
   whose validation fails fails whatever its response does; one whose response ends badly
   was validated for nothing, once. So a validator runs once per call, never after its
   response failed, and may run for a call whose response then fails.
6. Wanted until dispatched. A cancelled or superseded turn, a quarantined response, a disabled
   tool or a stopped tenant cancels the call at the first input that sees it, in every state
   before ``dispatched``. A stream lost without a way to resume it cancels a call whose
   response has not ended (``connection_lost``).
7. Confirmation. A validated call whose tool needs it waits for one confirmation from the
   turn's principal, for the tool digest and arguments digest of the call, before both its own
   expiry and the call's. Anything else is rejected and recorded. A denial from that principal
   cancels the call in any state before ``dispatched``. The confirmation given is valid until
   its own expiry, which the call keeps (rules 4 on). A confirmation may carry the principal's
   edit of the arguments it names: the edit is parsed strictly (rule 4's parse and size limit)
   and validated once, by the call's actor, exactly as the model's arguments were (rule 5's
   validation: schema, business rules, permission policy); if it passes, the call is validated
   again for the edited arguments (``CallValidated`` naming the editor, the digest replaced and
   the edit's size) and confirmed for them in the same answer, and only they can run; if it
   does not, the edit is refused (``EditRefused``) and nothing changes: the call still waits
   for a confirmation of the arguments it has. An edit equal to those arguments confirms them.
8. Claim. A claim dispatches only a validated, wanted call (confirmed where needed, the
   digest of the arguments that would run computed again and equal to the one confirmed) and
   is answered with ``dispatched`` or a rejection. The first claim wins; every later one is
   rejected. A confirmation bounds the ready window (rules 4 on): a claim at or after the
   expiry of the confirmation given cancels the call (``confirmation_expired``) and is
   rejected, so that a confirmation meant for a minute never lets the call run an hour later.
   A ready call has a lifetime (rules 8 on): the input that makes it ready (its validation, its
   response's successful end, its confirmation, whichever comes last) records ``CallReady``
   with the time it may be claimed until, the ready lifetime from that input's time and no
   later than the confirmation's expiry; a claim at or after it cancels the call
   (``ready_expired``, or ``confirmation_expired`` where the confirmation expired first) and is
   rejected, so that a call nobody claimed never runs long after it was wanted.
   A claim of a call that repeats an action its tool runs once per intent is judged by rule 12.
9. Deadlines. A call still collecting or waiting for its response (validated or not) is
   cancelled once the idle time has passed since its last ingress event (its opening, a
   fragment or its end event); a call waiting for confirmation is cancelled when the
   confirmation lifetime ends (whichever comes first, for a call waiting for both); a ready
   call (rules 8 on) is cancelled when its ready lifetime ends (``ready_expired``). All are
   judged when a ``DeadlineReached`` request is in the log, at the time the log recorded it.
10. Terminal is absorbing. Events addressed to a terminal call are rejected (``call_terminal``);
    events that merely concern it (its response, turn, tenant) are ignored, but for rule 11.
    This holds while the call's turn is known: a turn the runtime retired (``TurnRetired``, once
    idle for its horizon) is forgotten with its calls, and what is addressed to them afterwards
    meets a call key that starts ``absent`` in an unknown turn (rule 2: ``unknown_turn``).
11. Stop while running (rules 5 on). A dispatched call whose outcome is not recorded yet runs
    in an executor. When an input that would have cancelled it before dispatch concerns it
    (rule 6: its turn cancelled or superseded, its response quarantined, its tool disabled, its
    tenant stopped), the call records one ``CallStopRequested`` naming that reason, and the
    executor holding its claim is told. The call stays dispatched: nothing runs again, a later
    stopping input records nothing more, and the executor's outcome (completed, failed or
    stopped) says how the run ended. A call whose outcome is recorded is not running.
12. One action per intent (rules 6 on). A tool whose declaration, as its turn recorded it
    (``OfferedTool.one_action_per_intent``), asks for it runs an intent once in its scope: its
    turn, or its conversation. A claim that would dispatch a call (rule 8) instead cancels it
    (``duplicate_of``, the cancellation naming the earlier call) and is rejected, where a call
    of the same tool name and the same canonical arguments digest, in the same turn (or the
    same conversation), of a tool that asks for it, was dispatched before: its dispatch read
    back from the log, its turn still known (a retired turn takes its dispatches with it).
    Claims are decided in log order with the dispatches read back: in a conversation with a
    turn of rules 6 on that offers such a tool, a claim addressed to a call of such a turn is
    decided only once every earlier one has its first decision read back from the log; until
    then it waits, and the inputs of its call after it wait behind it, in order. So a claim
    never races a dispatch decided and not yet written, and a replay in which the earlier
    call takes its decisions as recorded decides the same.
13. No argument text (rules 9 on). No detail holds text the model wrote: refused arguments and
    refused edits name the place by indexes and the positions of names (``$.<key #2>[0]``,
    ``inert.actors._places``), a tool the turn did not offer is named by its length and digest
    in the opening decision and the failure, and every detail is cut to 200 characters (a
    validation's detail, read back on replay, is cut again to the same). A turn of earlier
    rules records the details it always did.
14. Keyed digests (rules 10 on). The digest that names a call's canonical arguments (in its
    validation, its edits, rule 12's comparison) and the digest that names a tool the turn did
    not offer are HMAC-SHA-256 keyed by the log's own key for them (``hmac-sha256:``,
    ``CallContext.digest_key``): an operator, an audit or a retained log shows them, and no one
    without the log's secret learns which arguments they name by trying candidates. A turn of
    earlier rules records ``sha256:`` digests, as it always did, on replay too.
15. One outcome per dispatch (every rules version). A dispatch has one outcome, the first the
    log holds for its claim: the executor's (completed, failed, stopped) or, when a runtime
    restarts or buries a process with the call dispatched and no report, ``outcome_unknown``.
    A report for a dispatch whose outcome is recorded, an unknown one included, is refused
    before anything is written (``RefusedError``); one that reaches the log all the same (a
    process buried while it still ran, reporting late) is ignored: the call does not run
    again, its running does not change, and the ledger keeps the first outcome, showing the
    later one ignored. Rule 11 reads "running" so: a call with an outcome is not running. No
    decision of the table reads an outcome, so the rule holds for logs written before it.
    An executor's notes of a run on its way (``note.*``: the task it is on a server, input the
    call asks its principal for and the answer, ``inert.runtime._input``) are in the call's
    request stream beside its outcome; no rule reads them either: a call that asks for input
    while it runs stays dispatched, and its answer is bound by the runtime, not the table.

Inputs per partition and global (a partitioned log, ``inert.log._partitions``). Every input of a
call lives in its conversation's partition and is judged in that partition's order: its turn's
events, its response's ingress, the requests addressed to it (claims, confirmations, deadlines),
the leases of its turn and its own decisions. Rule 12's "conversation" is one partition's. No
rule reads an order across conversations. The global inputs are the operator controls (rule
6's quarantine, tool disable and tenant stop): they are given in the control partition and
copied, the same event on the same stream, into every partition, where the decider reads them
like any other input. A control takes effect in a partition at the position of its copy there:
the inputs of the partition before it are judged without it, those after it with it, on every
replay alike. A process copies every control the control partition holds before it asks a
call of its partitions to dispatch (``inert.runtime._partitioned``), so a control acknowledged
before a claim was requested is before that claim in its partition. Heartbeats are global too,
but no rule reads them: the process that folds a partition decides from them who is dead, and
what follows (a turn leased, a stream lost, an outcome unknown) is written into the partition.

The transition table below is closed: a (state, input) pair missing from it is an
``IllegalTransition``. Beside this module: the call's state, its inputs and its decisions
(``inert.actors._call``), one handler per row of the table (``inert.actors._handlers``), the
fragment buffer (``inert.actors._buffer``) and the strict parse (``inert.actors._arguments``).
"""

from __future__ import annotations

from ..events import (
    STOPPING_CONTROL_TYPES,
    TERMINAL_PHASES,
    ArgumentsAppended,
    CallEnded,
    CallOpened,
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    Event,
    Phase,
    ResponseEnded,
    ServerToolCalled,
    StreamLost,
    StreamResumed,
    TurnCancelled,
    TurnStarted,
    TurnSuperseded,
)
from ._call import (
    CallContext,
    CallState,
    CallView,
    Decision,
    IllegalTransition,
    Input,
    ValidationOutcome,
    evolve,
)
from ._handlers import (
    NO_ARGUMENT_TEXT,
    Handler,
    Judge,
    before_open,
    changes_wish,
    claim,
    confirm,
    deadline_passed,
    deny,
    edit_validated,
    end_again,
    end_call,
    ignore,
    late_fragment,
    not_ready,
    open_call,
    refuse_terminal,
    reopen,
    response_ended,
    response_ended_early,
    response_ended_validated,
    server_tool,
    server_tool_on_open_call,
    stop_running,
    stream_lost,
    stream_lost_validated,
    take_fragment,
    unknown_call,
    validation_outcome,
    wanted,
)

# --- the table -------------------------------------------------------------------------------

A, C, T, V = Phase.ABSENT, Phase.COLLECTING, Phase.TERMINAL_CANDIDATE, Phase.VALIDATED
D = Phase.DISPATCHED
ENDED = tuple(TERMINAL_PHASES)
NOT_RUN = tuple(phase for phase in ENDED if phase is not D)
OPEN = (C, T, V)

SCOPE_EVENTS: tuple[type[Event], ...] = (
    TurnStarted,
    TurnCancelled,
    TurnSuperseded,
    *STOPPING_CONTROL_TYPES,
)

INPUT_TYPES: tuple[type, ...] = (
    CallOpened,
    ServerToolCalled,
    ArgumentsAppended,
    CallEnded,
    ResponseEnded,
    StreamLost,
    StreamResumed,
    *SCOPE_EVENTS,
    ConfirmationGiven,
    ConfirmationDenied,
    ClaimRequested,
    DeadlineReached,
    ValidationOutcome,
)
"""Every kind of input a call's actor may be handed."""


def _rows(
    input_type: type, handlers: dict[tuple[Phase, ...], Handler]
) -> dict[tuple[Phase, type], Handler]:
    return {
        (phase, input_type): handler for phases, handler in handlers.items() for phase in phases
    }


TABLE: dict[tuple[Phase, type], Handler] = {
    **_rows(
        CallOpened,
        {(A,): open_call, OPEN: wanted(reopen), ENDED: refuse_terminal},
    ),
    **_rows(
        ServerToolCalled,
        {(A,): server_tool, OPEN: wanted(server_tool_on_open_call), ENDED: refuse_terminal},
    ),
    **_rows(
        ArgumentsAppended,
        {
            (A,): before_open,
            (C,): wanted(take_fragment),
            (T, V): wanted(late_fragment),
            ENDED: refuse_terminal,
        },
    ),
    **_rows(
        CallEnded,
        {
            (A,): before_open,
            (C,): wanted(end_call),
            (T, V): wanted(end_again),
            ENDED: refuse_terminal,
        },
    ),
    **_rows(
        ResponseEnded,
        {
            (C,): wanted(response_ended_early),
            (T,): wanted(response_ended),
            (V,): response_ended_validated,
            (A, *ENDED): ignore,
        },
    ),
    **_rows(
        StreamLost,
        {(C, T): wanted(stream_lost), (V,): stream_lost_validated, (A, *ENDED): ignore},
    ),
    **_rows(StreamResumed, {OPEN: wanted(ignore), (A, *ENDED): ignore}),
    **{
        pair: handler
        for scope_event in SCOPE_EVENTS
        for pair, handler in _rows(
            scope_event, {OPEN: changes_wish, (D,): stop_running, (A, *NOT_RUN): ignore}
        ).items()
    },
    **_rows(
        ConfirmationGiven,
        {
            (A,): unknown_call,
            (C, T): wanted(not_ready, answer=True),
            (V,): wanted(confirm, answer=True),
            ENDED: refuse_terminal,
        },
    ),
    **_rows(ConfirmationDenied, {(A,): unknown_call, OPEN: wanted(deny), ENDED: refuse_terminal}),
    **_rows(
        ClaimRequested,
        {
            (A,): unknown_call,
            (C, T): wanted(not_ready, answer=True),
            (V,): wanted(claim, answer=True),
            ENDED: refuse_terminal,
        },
    ),
    **_rows(
        DeadlineReached, {(A,): unknown_call, OPEN: wanted(deadline_passed), ENDED: refuse_terminal}
    ),
    **_rows(ValidationOutcome, {(T,): validation_outcome, (V,): edit_validated}),
}


def decide(
    state: CallView, received: Input | ValidationOutcome, context: CallContext
) -> tuple[Decision, ...]:
    """The decisions of one input: what to record, and what the state needs to remember."""
    input_type = type(received.event) if isinstance(received, Input) else ValidationOutcome
    handler = TABLE.get((state.phase, input_type))
    if handler is None or (state.validating is not None) != (input_type is ValidationOutcome):
        name = getattr(input_type, "TAG", input_type.__name__)
        raise IllegalTransition(state.phase, name)
    if isinstance(received, Input):
        cause = received.position
    else:
        assert state.validating is not None
        cause = state.validating.cause
    turn = context.turn
    bounded = turn is not None and turn.rules >= NO_ARGUMENT_TEXT
    return handler(Judge(state, received, cause, bounded=bounded), context)


def step(
    state: CallState, received: Input | ValidationOutcome, context: CallContext
) -> tuple[CallState, tuple[Decision, ...]]:
    """Decide on one input and apply the decisions: the new state and what was decided."""
    decisions = decide(state, received, context)
    for decision in decisions:
        state = evolve(state, decision)
    return state, decisions
