"""Identities: the turn a call belongs to, the response that carried it, the call itself.

A call is never keyed on the provider's call id alone (providers reuse ``call_0``), nor on an
index alone (parallel calls collide), nor on arrival time: its key is every protocol identity
together. Stream names are built from these identities with each component percent-encoded, so
that two different turns or call keys can never name the same stream. A response's ingress
stream is named by tenant and provider response id alone: a provider response belongs to one
turn, and a response id that shows up under another turn is for the actors to refuse, not a
second stream.
"""

from __future__ import annotations

import re
from functools import cached_property
from urllib.parse import quote

import attrs
from attrs import field, frozen

from ._structure import interned

MAX_IDENTITY_LENGTH = 512


def _identity_component(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str:
        raise TypeError(f"{attribute.name} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{attribute.name} must not be empty")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{attribute.name} must be valid Unicode (no lone surrogates)"
            ) from None
    if len(value) > MAX_IDENTITY_LENGTH:
        raise ValueError(
            f"{attribute.name} is {len(value)} characters, the limit is {MAX_IDENTITY_LENGTH}"
        )


# What ``quote(part, safe="")`` leaves as it is: most identities, which then skip it.
_UNQUOTED = re.compile(r"[A-Za-z0-9_.~-]*")


def _stream(kind: str, parts: tuple[str, ...]) -> str:
    # One look at the parts together: where one needs quoting, so does their concatenation.
    if _UNQUOTED.fullmatch("".join(parts)):
        return "/".join((kind, *parts))
    return "/".join((kind, *(quote(part, safe="") for part in parts)))


def key_part(value: str) -> str:
    """An identity (or any text) as a person reads it, on the command line and on the console's
    pages: every character but ASCII letters, digits and ``_.-~`` percent-encoded as its UTF-8
    bytes (a lone surrogate as the three bytes it would be), as in stream names.

    So a ``/`` inside an identity cannot be misread, and no format, bidirectional or other
    invisible character can hide in one or reorder what is drawn around it: ``call_\\u202egnp.exe``
    reads ``call_%E2%80%AEgnp.exe``. ``urllib.parse.unquote(shown, errors="surrogatepass")``
    gives the identity back.
    """
    return quote(value, safe="", errors="surrogatepass")


def shown_text(text: str) -> str:
    """Free text (a reason, a detail, a principal) as written, but for every character that is
    not printable (Unicode's categories C and Z but the space: format and bidirectional
    controls, control characters, line separators, unassigned code points), which is escaped as
    ``key_part`` escapes it."""
    if text.isprintable():
        return text
    return "".join(
        character if character.isprintable() else key_part(character) for character in text
    )


# Identities are dict keys on every hot path of the runtime: their hash is computed once, and
# the turn and response of a call once per instance (the ones decoded events name, interned by
# their fields). The hash is kept as a plain integer: attrs' cached hash is an integer subclass
# with a dictionary, tracked by the collector, and every live call holds two or three
# identities. A turn's and a response's streams are kept too: few, and named as dict keys while
# they live. A call's streams are made when asked for: every live call would keep two long
# names for the few moments its actor appends.


@frozen(kw_only=True)
class TurnRef:
    """One user turn of a conversation, owned by the agent server."""

    tenant: str = field(validator=_identity_component)
    conversation: str = field(validator=_identity_component)
    turn: str = field(validator=_identity_component)

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((TurnRef, self.tenant, self.conversation, self.turn))

    @cached_property
    def stream(self) -> str:
        """The stream of the turn's lifecycle and of the user's actions on it."""
        return _stream("turn", (self.tenant, self.conversation, self.turn))

    @cached_property
    def lease_stream(self) -> str:
        """Which runtime process owns the turn, where several share the log."""
        return _stream("lease", (self.tenant, self.conversation, self.turn))


@frozen(kw_only=True)
class ResponseRef:
    """One provider response (or message) produced within a turn."""

    tenant: str = field(validator=_identity_component)
    conversation: str = field(validator=_identity_component)
    turn: str = field(validator=_identity_component)
    response: str = field(validator=_identity_component)

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((ResponseRef, self.tenant, self.conversation, self.turn, self.response))

    @cached_property
    def turn_ref(self) -> TurnRef:
        tenant, conversation, turn = self.tenant, self.conversation, self.turn
        return interned(
            TurnRef,
            (tenant, conversation, turn),
            lambda: TurnRef(tenant=tenant, conversation=conversation, turn=turn),
        )

    @cached_property
    def stream(self) -> str:
        """The ingress stream of this provider response (one feeding adapter at a time)."""
        return _stream("response", (self.tenant, self.response))


@frozen(kw_only=True)
class CallKey:
    """The complete protocol identity of one streamed tool call."""

    tenant: str = field(validator=_identity_component)
    conversation: str = field(validator=_identity_component)
    turn: str = field(validator=_identity_component)
    response: str = field(validator=_identity_component)
    item: str = field(validator=_identity_component)
    call: str = field(validator=_identity_component)

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((CallKey, *self._parts()))

    @cached_property
    def turn_ref(self) -> TurnRef:
        # The response's own: a live call then holds one turn object, not two alike.
        return self.response_ref.turn_ref

    @cached_property
    def response_ref(self) -> ResponseRef:
        tenant, conversation, turn, response = (
            self.tenant,
            self.conversation,
            self.turn,
            self.response,
        )
        return interned(
            ResponseRef,
            (tenant, conversation, turn, response),
            lambda: ResponseRef(
                tenant=tenant, conversation=conversation, turn=turn, response=response
            ),
        )

    def _parts(self) -> tuple[str, ...]:
        return (self.tenant, self.conversation, self.turn, self.response, self.item, self.call)

    @property
    def stream(self) -> str:
        """The decision stream of the call: written only by the call's actor."""
        return _stream("call", self._parts())

    @property
    def request_stream(self) -> str:
        """Claims and confirmations addressed to the call's actor (any writer)."""
        return _stream("request", self._parts())


def shared_key(key: CallKey) -> CallKey:
    """The one object of this call's key while identities are kept: the first of the equal
    keys fed or decoded. A call whose key its adapter holds while it streams is then held once,
    not once as fed and again as read back from the log."""
    return interned(CallKey, key._parts(), lambda: key)


def process_stream(process: str) -> str:
    """The heartbeats of one runtime process."""
    if not process:
        raise ValueError("process must not be empty")
    return _stream("process", (process,))


def control_stream(tenant: str | None = None) -> str:
    """The stream of operator controls, global or for one tenant."""
    if tenant is None:
        return "control/global"
    if not tenant:
        raise ValueError("tenant must not be empty")
    return _stream("control", ("tenant", tenant))
