"""Argument bytes sealed under keys that redaction destroys (crypto-shredding).

A database that keeps old versions of its rows (PostgreSQL's dead tuples, its write-ahead log,
its replicas) cannot be made to forget a payload by rewriting the row. So the payloads that
retention redacts (the events whose type names ``SENSITIVE`` fields, and a snapshot's payloads
stored apart) are stored sealed: encrypted with AES-256-GCM under a key of their own, named for
what the bytes are and whose they are (a call's fragments, a call's arguments). The key lives in
a table of keys; redacting the last of a key's payloads deletes the key in the same transaction,
and from then on every copy of those payloads, in any page, log or replica, is ciphertext that
nothing can open.

This module is pure: names, sealing and opening. The backend keeps the keys.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..events._base import registered_event_types
from ..events._errors import LogDamaged

KEY_BYTES = 32
_NONCE_BYTES = 12

FRAGMENT_TYPES = frozenset({"ingress.arguments_appended", "ingress.call_ended"})
"""Event types whose sealed payloads are a call's fragments."""


def sealed_types() -> frozenset[str]:
    """The event types whose payloads are stored sealed: those that name sensitive fields."""
    return frozenset(tag for tag, cls in registered_event_types().items() if cls.SENSITIVE)


def key_name(event_type: str, call_stream: str) -> str:
    """The name of the key a payload is sealed under: the kind of bytes, and the call's
    stream. Fragments and arguments are redacted at different times, so each has its own."""
    kind = "fragments" if event_type in FRAGMENT_TYPES else "arguments"
    return f"{kind} {call_stream}"


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def seal(key: bytes, payload: bytes, associated: bytes) -> bytes:
    """The payload encrypted and authenticated under ``key``, bound to ``associated`` (the
    event's id): a random nonce, then the ciphertext and its tag."""
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, payload, associated)


def unseal(
    key: bytes, sealed: bytes, associated: bytes, position: int, what: str = "its payload"
) -> bytes:
    """The payload ``seal`` sealed; ``LogDamaged`` at ``position`` naming ``what`` if it is
    not that."""
    try:
        return AESGCM(key).decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
    except (InvalidTag, ValueError):
        raise LogDamaged(position, f"{what}, sealed, does not open with its key") from None
