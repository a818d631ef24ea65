"""W3C trace context headers read as untrusted input (Trace Context, level 1).

``traceparent`` is ``version-traceid-parentid-flags`` in lower-case hex. Version ``00`` has
exactly that form (55 characters); version ``ff`` is invalid; a higher version is read for its
first four fields when the header is at least 55 characters and anything after the flags starts
with ``-``, as the specification asks of a reader that does not know the version. An all-zero
trace id or parent id is invalid. ``tracestate`` is at most 32 comma-separated ``key=value``
members of the specification's grammar; members past 512 bytes are dropped, the longest ones
(over 128 characters) first, then from the end; a header that does not follow the grammar is
dropped whole. Nothing here raises for a bad header: it is recorded as a problem and the caller
starts a new trace. Pure: no I/O, no dependency beyond the vocabulary.
"""

from __future__ import annotations

import re

from attrs import frozen

from ..events import TraceContext

MAX_TRACESTATE_MEMBERS = 32
MAX_TRACESTATE_BYTES = 512
_LONG_MEMBER = 128

_VERSION_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ANY_VERSION = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_KEY = re.compile(
    r"[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}"
)
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


@frozen
class IncomingTrace:
    """What was made of the headers: the context to keep (None: start a new trace) and, where a
    header was refused or trimmed, why (never the header itself)."""

    context: TraceContext | None
    problem: str | None = None


def read_trace_headers(traceparent: object, tracestate: object = None) -> IncomingTrace:
    """The trace context of a request's headers, or why there is none to continue."""
    if traceparent is None:
        return IncomingTrace(None)
    parent_problem = _traceparent_problem(traceparent)
    if parent_problem is not None:
        return IncomingTrace(None, f"traceparent refused: {parent_problem}")
    assert isinstance(traceparent, str)
    state, state_problem = _tracestate(tracestate)
    problem = f"tracestate {state_problem}" if state_problem else None
    return IncomingTrace(TraceContext(traceparent=traceparent, tracestate=state), problem)


def _traceparent_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "not text"
    if len(value) > 512:
        return "longer than any version could be"
    version = value[:2]
    if version == "00":
        match = _VERSION_00.fullmatch(value)
        if match is None:
            return "not the exact form of version 00"
        trace_id, parent_id = match[1], match[2]
    else:
        match = _ANY_VERSION.fullmatch(value)
        if match is None or len(value) < 55:
            return "not a version this reader can parse"
        if match[1] == "ff":
            return "version ff is invalid"
        trace_id, parent_id = match[2], match[3]
    if trace_id == "0" * 32:
        return "all-zero trace id"
    if parent_id == "0" * 16:
        return "all-zero parent id"
    return None


def _tracestate(value: object) -> tuple[str | None, str | None]:
    """The tracestate to keep, and what was done to it (None: kept as it came)."""
    if value is None or value == "":
        return None, None
    if not isinstance(value, str):
        return None, "dropped: not text"
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]
    if len(members) > MAX_TRACESTATE_MEMBERS:
        return None, f"dropped: more than {MAX_TRACESTATE_MEMBERS} members"
    keys: set[str] = set()
    for member in members:
        key, equals, member_value = member.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _VALUE.fullmatch(member_value):
            return None, "dropped: a member outside the grammar"
        if key in keys:
            return None, "dropped: a key repeated"
        keys.add(key)
    kept = list(members)
    trimmed = False
    while len(",".join(kept)) > MAX_TRACESTATE_BYTES:
        trimmed = True
        long = [member for member in kept if len(member) > _LONG_MEMBER]
        kept.remove(long[0] if long else kept[-1])
    problem = f"trimmed to {MAX_TRACESTATE_BYTES} bytes" if trimmed else None
    return (",".join(kept) or None), problem
