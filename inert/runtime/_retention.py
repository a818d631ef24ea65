"""Retention: argument payloads leave the log once nothing can need them again.

The policy (:class:`Retention`, on by default):

- **Fragments.** The payloads of a response's ``ArgumentsAppended`` and ``CallEnded`` events
  are redacted once no call seen in that response is live: each one is dispatched, cancelled or
  failed, so its fragments can never be assembled or parsed again.
- **Arguments.** The arguments of a call's ``CallValidated``, and those a principal gave with a
  confirmation (an edit, ``ConfirmationGiven.arguments``), are redacted once the call's outcome
  is recorded (completed, failed, stopped, or unknown after a restart), or once the call ended
  without being dispatched.

Redaction keeps every envelope, the length and SHA-256 digest of each payload, and every other
field of those events (identities, sequences, counts, digests, reasons); the ending decisions
carry the counts and sizes of what their call received. The ledger, the dispatch queue, the
status, the audit and their state digest are the same on a replay of the redacted log. Ledger
rows of finished calls age out separately, after the runtime's ``ledger_horizon``.

Redaction only ever reaches versions of a stream the fold has seen, so a live call never loses
a payload it has not been decided on. Pure: the runtime does the writing.
"""

from __future__ import annotations

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
)

FRAGMENT_TYPES = frozenset({ArgumentsAppended.TAG, CallEnded.TAG})
ARGUMENT_TYPES = frozenset({CallValidated.TAG})
EDIT_TYPES = frozenset({ConfirmationGiven.TAG})


@frozen(kw_only=True)
class Retention:
    """What the runtime redacts from the log, and when (see :mod:`inert.runtime._retention`)."""

    fragments: bool = True
    """Redact fragment payloads once no call of their response is live."""
    arguments: bool = True
    """Redact validated arguments once the call's outcome is recorded or it ended unrun."""

    def types(self) -> frozenset[str]:
        """The event types this policy redacts."""
        return (FRAGMENT_TYPES if self.fragments else frozenset()) | (
            ARGUMENT_TYPES | EDIT_TYPES if self.arguments else frozenset()
        )


DEFAULT_RETENTION = Retention()
KEEP_EVERYTHING = Retention(fragments=False, arguments=False)


class RetentionPlan:
    """Follows the log as the fold reads it and says which stream prefixes are due for
    redaction, each once, for the event types the policy names."""

    def __init__(self, policy: Retention) -> None:
        self.policy = policy
        self._types = policy.types()
        self._unredacted: dict[str, int] = {}
        self._due: dict[str, tuple[int, frozenset[str]]] = {}
        # Taken, and not yet reported made: a snapshot holds them as due, so that a process
        # stopping between the two leaves them to the next one.
        self._making: dict[tuple[str, int], frozenset[str]] = {}

    def kept(self) -> dict[str, object]:
        """What a snapshot keeps of the plan: its attributes, with the redactions taken and not
        yet reported made counted as due."""
        due = {
            stream: (version, types)
            for (stream, version), types in self._making.items()
            if version > self._due.get(stream, (0, types))[0]
        }
        return {**self.__dict__, "_due": {**self._due, **due}, "_making": {}}

    @property
    def pending(self) -> bool:
        return bool(self._due)

    def heard(self, recorded: RecordedEvent, fold: CallFold) -> None:
        """Note one recorded event, after the fold has applied it."""
        if not self._types:
            return
        if (
            recorded.event_type in self._types
            and not isinstance(recorded.event, Redacted)
            # A confirmation holds arguments only where it edits them.
            and getattr(recorded.event, "arguments", b"") is not None
        ):
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
            self._make_due(key.stream, ARGUMENT_TYPES)
            self._make_due(key.request_stream, EDIT_TYPES)
        if self.policy.fragments and fold.response_settled(key.response_ref):
            self._make_due(key.response_ref.stream, FRAGMENT_TYPES)

    def take(self) -> list[tuple[str, int, frozenset[str]]]:
        """The redactions due now (stream, up to version, event types); each is given once,
        and is still due in a snapshot until it is reported ``made``."""
        due = [(stream, version, types) for stream, (version, types) in self._due.items()]
        self._due.clear()
        for stream, version, types in due:
            self._making[stream, version] = types
        return due

    def made(self, stream: str, version: int) -> None:
        """A redaction ``take`` gave is in the log."""
        self._making.pop((stream, version), None)

    def _make_due(self, stream: str, types: frozenset[str]) -> None:
        version = self._unredacted.pop(stream, None)
        if version is not None:
            self._due[stream] = (version, types)
