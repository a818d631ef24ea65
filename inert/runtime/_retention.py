"""Retention: argument payloads leave the log as soon as nothing can need them again.

The policy (``Retention``, on by default):

- **Fragments.** The payloads of a call's ``ArgumentsAppended`` and ``CallEnded`` events are
  redacted once the call is no longer live (dispatched, cancelled or failed): its fragments can
  never be assembled or parsed again. Its siblings (the other calls of its provider response)
  share the response's stream, so only the call's own events of it are redacted (by their key):
  a sibling still collecting, waiting for its response's end or ready keeps every byte of its
  own. Once no call seen in the response is live, the payloads of every fragment event of the
  response's stream are redacted (those of calls the fold no longer knows included).
- **Arguments.** The arguments of a call's ``CallValidated``, and those a principal gave with a
  confirmation (an edit, ``ConfirmationGiven.arguments``), are redacted once the call's outcome
  is recorded (completed, failed, stopped, or unknown after a restart), or once the call ended
  without being dispatched (failed, denied, cancelled, a ready call whose lifetime ended).

Redaction keeps every envelope, the length and SHA-256 digest of each payload, and every other
field of those events (identities, sequences, counts, digests, reasons); the ending decisions
carry the counts and sizes of what their call received. The ledger, the dispatch queue, the
status, the audit and their state digest are the same on a replay of the redacted log. Ledger
rows of finished calls age out separately, after the runtime's ``ledger_horizon``.

Redaction only ever reaches versions of a stream the fold has seen, and only events of calls
that are no longer live, so a live call never loses a payload it has not been decided on.

Where runtime processes share the log, every process folds the same plan, and a call's
redactions are made by the process that owns the call's turn (see ``inert.runtime._peers``)
alone: the others hold them back (``deferred``: not due, so nothing waits on them) until they
gain the turn, a dead owner's turn taken over included, and then make them (again, if the owner
had: redacting what is redacted changes nothing). What is held back for a turn is dropped once
the turn is retired, which its owner writes long after its redactions.
Pure: the runtime does the writing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from attrs import frozen

from ..actors import CallFold, Phase
from ..events import (
    OUTCOME_TYPES,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallValidated,
    ConfirmationGiven,
    RecordedEvent,
    Redacted,
    TurnRef,
    TurnRetired,
)

FRAGMENT_TYPES = frozenset({ArgumentsAppended.TAG, CallEnded.TAG})
ARGUMENT_TYPES = frozenset({CallValidated.TAG})
EDIT_TYPES = frozenset({ConfirmationGiven.TAG})


@frozen(kw_only=True)
class Retention:
    """What the runtime redacts from the log, and when: on by default.

    ``fragments``: a call's fragment payloads (``ArgumentsAppended``, ``CallEnded``) once the call
    is no longer live (dispatched, cancelled or failed), and every fragment payload of its
    response once no call of it is live. ``arguments``: the validated arguments (and those a
    principal gave with a confirmation) once the call's outcome is recorded or the call ended
    without being dispatched. Redaction keeps every envelope, each payload's length and digest and
    every other field; the projections and their digest are the same on a replay of the redacted
    log (see [What is erased, and when][what-is-erased-and-when]).
    """

    fragments: bool = True
    """Redact a call's fragment payloads once it is no longer live."""
    arguments: bool = True
    """Redact validated arguments once the call's outcome is recorded or it ended unrun."""

    def types(self) -> frozenset[str]:
        """The event types this policy redacts."""
        return (FRAGMENT_TYPES if self.fragments else frozenset()) | (
            ARGUMENT_TYPES | EDIT_TYPES if self.arguments else frozenset()
        )


DEFAULT_RETENTION = Retention()
KEEP_EVERYTHING = Retention(fragments=False, arguments=False)


class Redaction(NamedTuple):
    """A redaction due: the stream, up to which version, of which event types and, where it is
    limited to some calls' events, those calls."""

    stream: str
    version: int
    types: frozenset[str]
    keys: tuple[CallKey, ...] | None = None


class RetentionPlan:
    """Follows the log as the fold reads it and says which stream prefixes (or which calls'
    events of them) are due for redaction, each once, for the event types the policy names.

    The calls of a response that ended while it still has live calls are redacted together,
    one pass over the response's stream for all of them, however many end meanwhile.
    """

    def __init__(self, policy: Retention) -> None:
        self.policy = policy
        self._types = policy.types()
        # Per stream of arguments or edits, the last version holding an unredacted payload.
        self._unredacted: dict[str, int] = {}
        # Per response stream, per call, the last version holding an unredacted fragment event
        # of the call: one call's redaction leaves its siblings' entries as they are, so that
        # what is due later never names rows redacted already. Most responses have one call at
        # a time: its entry is then the pair alone, a quarter of a dict's bytes.
        self._fragments: dict[str, tuple[CallKey, int] | dict[CallKey, int]] = {}
        # Per stream, up to which version, of which types, and the turn whose owner makes it.
        self._due: dict[str, tuple[int, frozenset[str], TurnRef]] = {}
        # Per response stream, the calls whose own fragment events are due, each up to its
        # last one.
        self._due_calls: dict[str, dict[CallKey, int]] = {}
        # Taken, and not yet reported made: a snapshot holds them as due, so that a process
        # stopping between the two leaves them to the next one.
        self._making: dict[tuple[str, int], tuple[frozenset[str], TurnRef]] = {}
        self._making_calls: list[tuple[str, int, tuple[CallKey, ...]]] = []
        # Taken while another process owned their turn: due again if this one gains it.
        self._deferred: dict[TurnRef, dict[str, tuple[int, frozenset[str]]]] = {}
        self._deferred_calls: dict[TurnRef, dict[str, dict[CallKey, int]]] = {}

    def kept(self) -> dict[str, object]:
        """What a snapshot keeps of the plan: its attributes, with the redactions taken and not
        yet reported made, and those held back for another process's turns, counted as due (a
        restart takes them again, and holds back again what is not its own)."""
        due = dict(self._due)
        calls = {stream: dict(keys) for stream, keys in self._due_calls.items()}

        def merge(stream: str, version: int, types: frozenset[str], turn: TurnRef) -> None:
            if version > due.get(stream, (0, types, turn))[0]:
                due[stream] = (version, types, turn)

        for (stream, version), (types, turn) in self._making.items():
            merge(stream, version, types, turn)
        for stream, version, made in self._making_calls:
            _merge(calls.setdefault(stream, {}), dict.fromkeys(made, version))
        for turn, streams in self._deferred.items():
            for stream, (version, types) in streams.items():
                merge(stream, version, types, turn)
        for streams_of_calls in self._deferred_calls.values():
            for stream, held in streams_of_calls.items():
                _merge(calls.setdefault(stream, {}), held)
        return {
            **self.__dict__,
            "_due": due,
            "_due_calls": calls,
            "_making": {},
            "_making_calls": [],
            "_deferred": {},
            "_deferred_calls": {},
        }

    @property
    def pending(self) -> bool:
        return bool(self._due or self._due_calls)

    def heard(self, recorded: RecordedEvent, fold: CallFold) -> None:
        """Note one recorded event, after the fold has applied it."""
        if not self._types:
            return
        event = recorded.event
        if isinstance(event, TurnRetired):
            self._deferred.pop(event.turn, None)
            self._deferred_calls.pop(event.turn, None)
        if (
            recorded.event_type in self._types
            and not isinstance(event, Redacted)
            # A confirmation holds arguments only where it edits them.
            and getattr(event, "arguments", b"") is not None
        ):
            if recorded.event_type in FRAGMENT_TYPES:
                self._track(recorded.stream, _key_of(event), recorded.version)
            else:
                self._unredacted[recorded.stream] = recorded.version
        key = getattr(recorded.kept, "key", None)
        if not isinstance(key, CallKey):
            return
        state = fold.state(key)
        # A call the fold holds no state of (forgotten with its turn, or never opened in a turn
        # unknown) can need nothing: its payloads are due like those of a call that ended.
        if state is not None and state.live:
            return
        if self.policy.arguments and (
            state is None
            or state.phase is not Phase.DISPATCHED
            or isinstance(recorded.kept, OUTCOME_TYPES)
        ):
            self._make_due(key.stream, ARGUMENT_TYPES, key.turn_ref)
            self._make_due(key.request_stream, EDIT_TYPES, key.turn_ref)
        if not self.policy.fragments:
            return
        self._fragments_due(key, fold)

    def _fragments_due(self, key: CallKey, fold: CallFold) -> None:
        """The fragments of a call that is not live are due: its own events of its response's
        stream, or, where no call of the response is live, what is left of the stream's (those
        of calls the fold no longer knows included), at once."""
        stream = key.response_ref.stream
        left = self._fragments.get(stream)
        if left is None:
            return
        if fold.response_settled(key.response_ref):
            del self._fragments[stream]
            last = left[1] if isinstance(left, tuple) else max(left.values())
            version = max(last, self._due.get(stream, (0, FRAGMENT_TYPES, key.turn_ref))[0])
            self._due[stream] = (version, FRAGMENT_TYPES, key.turn_ref)
            return
        found = self._untrack(stream, left, key)
        if found is not None:
            waiting = self._due_calls.setdefault(stream, {})
            waiting[key] = max(found, waiting.get(key, 0))

    def _track(self, stream: str, key: CallKey, version: int) -> None:
        """The call has an unredacted fragment event at this version of the stream."""
        left = self._fragments.get(stream)
        if left is None or (isinstance(left, tuple) and left[0] == key):
            self._fragments[stream] = (key, version)
        elif isinstance(left, tuple):
            self._fragments[stream] = {left[0]: left[1], key: version}
        else:
            left[key] = version

    def _untrack(
        self, stream: str, left: tuple[CallKey, int] | dict[CallKey, int], key: CallKey
    ) -> int | None:
        """The last version of the call's tracked fragment events, no longer tracked."""
        if isinstance(left, tuple):
            if left[0] != key:
                return None
            del self._fragments[stream]
            return left[1]
        found = left.pop(key, None)
        if len(left) == 1:
            [(other, version)] = left.items()
            self._fragments[stream] = (other, version)
        return found

    def take(self, owns: Callable[[TurnRef], bool]) -> list[Redaction]:
        """The redactions due now of the turns this process ``owns``; each is given once, and is
        still due in a snapshot until it is reported ``made``. Those of other turns are held
        back until ``gained``."""
        due: list[Redaction] = []
        for stream, (version, types, turn) in self._due.items():
            if owns(turn):
                self._making[stream, version] = (types, turn)
                due.append(Redaction(stream, version, types))
            else:
                deferred = self._deferred.setdefault(turn, {})
                before = deferred.get(stream, (0, types))[0]
                deferred[stream] = (max(version, before), types)
        for stream, calls in self._due_calls.items():
            turn = next(iter(calls)).turn_ref
            if owns(turn):
                batch = (stream, max(calls.values()), tuple(calls))
                self._making_calls.append(batch)
                due.append(Redaction(stream, batch[1], FRAGMENT_TYPES, batch[2]))
            else:
                _merge(self._deferred_calls.setdefault(turn, {}).setdefault(stream, {}), calls)
        self._due.clear()
        self._due_calls.clear()
        return due

    def gained(self, turn: TurnRef) -> None:
        """This process owns the turn now: what was held back of it is due."""
        for stream, (version, types) in self._deferred.pop(turn, {}).items():
            before = self._due.get(stream, (0, types, turn))[0]
            self._due[stream] = (max(version, before), types, turn)
        for stream, calls in self._deferred_calls.pop(turn, {}).items():
            _merge(self._due_calls.setdefault(stream, {}), calls)

    def made(self, stream: str, version: int, keys: Collection[CallKey] | None = None) -> None:
        """A redaction ``take`` gave is in the log."""
        if keys is None:
            self._making.pop((stream, version), None)
            return
        batch = (stream, version, tuple(keys))
        if batch in self._making_calls:
            self._making_calls.remove(batch)

    def _make_due(self, stream: str, types: frozenset[str], turn: TurnRef) -> None:
        version = self._unredacted.pop(stream, None)
        if version is not None:
            self._due[stream] = (version, types, turn)


def _merge(into: dict[CallKey, int], calls: dict[CallKey, int]) -> None:
    """Each call's last version due, the later of the two."""
    for key, version in calls.items():
        into[key] = max(version, into.get(key, 0))


def _key_of(event: object) -> CallKey:
    key = getattr(event, "key", None)
    assert isinstance(key, CallKey)
    return key
