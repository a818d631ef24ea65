"""The error tree of inert.

Every failure that inert reports is an ``InertError``. Errors of the libraries inert uses
(sqlite3, msgpack, cattrs) are caught where they arise and re-raised as one of these, with the
original kept as ``__cause__``. Messages name the state, the event or the limit involved.
"""

from __future__ import annotations


class InertError(Exception):
    """Base class of every error inert raises."""


class ConfigurationError(InertError, ValueError):
    """A setting, URL or option is invalid."""


class CodecError(InertError):
    """An event could not be encoded or decoded: unknown tag, corrupt payload, unknown version."""


class LogError(InertError):
    """The event log could not do what was asked: storage failure, closed log, bad file."""


class LogNotFound(LogError):
    """There is no log where the URL points (a missing or empty SQLite file, a PostgreSQL schema
    without inert's tables) and none was to be created there."""


class LogDamaged(LogError):
    """The log holds a row that is not what was appended (its checksum fails), lacks a position
    or a version, or records what no decision allows. Nothing is decided or executed from it."""

    def __init__(self, position: int, what: str) -> None:
        super().__init__(f"the log is damaged at position {position}: {what}")
        self.position = position
        self.what = what


class ConflictError(LogError):
    """An append was refused because a stream is not at the version the writer expected.

    Nothing of the batch was written.
    """

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, the append expected version {expected};"
            " nothing of the batch was written"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class DuplicateEventError(LogError):
    """An event id already in the log was appended again with different content."""

    def __init__(self, event_id: str, reason: str) -> None:
        super().__init__(
            f"event id {event_id!r} is already in the log with different {reason};"
            " nothing of the batch was written"
        )
        self.event_id = event_id


class RefusedError(InertError):
    """The runtime refused a request: an unknown or finished turn, another principal, a call that
    cannot be claimed or confirmed. Nothing was done."""


class NotOwner(RefusedError):
    """The turn or call lives in a partition of a partitioned log that another runtime process
    takes (new turns) or folds (everything else): send it to that process."""


class RequestRefused(RefusedError):
    """A call's actor answered a request (a confirmation, a denial, a claim) with a rejection.

    ``reason`` is the rejection's reason (``wrong_principal``, ``not_ready``, ...).
    """

    REQUEST = "request"

    def __init__(self, key_stream: str, reason: str, detail: str) -> None:
        super().__init__(f"{self.REQUEST} of {key_stream!r} refused ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


class ClaimRefused(RequestRefused):
    """A claim was refused: the executor must not run the call."""

    REQUEST = "claim"


class ConfirmationRefused(RequestRefused):
    """A confirmation or denial was refused and recorded; the call is as it was."""

    REQUEST = "confirmation"


class InputRefused(RequestRefused):
    """An answer to a running call's request for input was refused (``not_awaiting_input``,
    ``wrong_principal``, ``digest_mismatch``, ``expired``, ``answered``): nothing was recorded
    or sent, and the call still waits as it did."""

    REQUEST = "input"


class RequestTimedOut(InertError):
    """A request the runtime made of itself (a claim, a confirmation, a denial, a control's
    catching up) was not answered within the runtime's ``request_timeout``.

    The request is in the log and may still be answered later. A claim answered then leaves a
    dispatched call that no executor holds; the next restart records it ``outcome_unknown``.
    """

    def __init__(self, what: str, seconds: float, why: str) -> None:
        super().__init__(f"{what} was not answered within {seconds:g} s: {why}")
        self.seconds = seconds


class RuntimeClosed(InertError):
    """An operation was asked of a runtime that is closing or closed (through the asyncio
    facade, whose runtime runs in a Trio run that may have ended)."""
