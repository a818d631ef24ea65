"""The hostile-snapshot corpus: snapshot rows written by whoever can write the log's storage.

Each case turns a valid snapshot of a runtime into the state bytes an attacker or a damaged
disk would leave in its row: pickles of every protocol that would run a program, reach a class
through a module's imports by a dotted name, or build one with a reduce trick; huge and deeply
nested values; rows cut short; and valid snapshots changed in one place so that they are no
state of their log. The tests store each with its digest recomputed, both as whoever writes the
row can (unkeyed) and as one who also read the log's secret can (keyed): a runtime opening the
log must replay it from the start, report the snapshot once, and do nothing else; a case that
ran anything would leave the canary file its program writes.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path

import attrs
import msgpack

from inert.log import StoredSnapshot


@attrs.frozen
class HostileSnapshot:
    name: str
    forge: Forge
    """The state made of a valid snapshot's; the path is the canary a program would write."""
    data_only: bool = True
    """Refused for what the bytes are, whatever the digest: ``False`` for a change that may
    leave a state of its log (a byte inside a string, say), which its keyed digest tells."""


Forge = Callable[[StoredSnapshot, Path], bytes]


def _with_state(state: bytes) -> Forge:
    return lambda valid, _: state


def _pickled(make: Callable[[Path], object], protocol: int) -> Forge:
    return lambda valid, canary: pickle.dumps(make(canary), protocol=protocol)


class _RunsAProgram:
    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return os.system, (f"touch {self.canary}",)


class _OpensAProcess(_RunsAProgram):
    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return subprocess.Popen, (["touch", str(self.canary)],)


class _WritesAFile(_RunsAProgram):
    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return open, (str(self.canary), "w")


class _Reconstructs(_RunsAProgram):
    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return copyreg._reconstructor, (subprocess.Popen, object, ["touch", str(self.canary)])  # type: ignore[attr-defined]


def _global(module: str, name: str, argument: str) -> bytes:
    """A protocol 4 pickle calling ``module``'s ``name`` (dotted: resolved attribute by
    attribute, through the module's own imports) with one string."""

    def text(value: str) -> bytes:
        data = value.encode()
        return b"\x8c" + bytes([len(data)]) + data

    return (
        b"\x80\x04"
        + text(module)
        + text(name)
        + b"\x93"  # STACK_GLOBAL
        + text(argument)
        + b"\x85"  # TUPLE1
        + b"R"  # REDUCE
        + b"."
    )


def _dotted(module: str, name: str) -> Forge:
    return lambda valid, canary: _global(module, name, f"touch {canary}")


def _changed(at: Callable[[bytes], int], byte: int) -> Forge:
    def forge(valid: StoredSnapshot, _: Path) -> bytes:
        state = bytearray(valid.state)
        state[at(valid.state)] = byte
        return bytes(state)

    return forge


def _at(fraction: float) -> Callable[[bytes], int]:
    return lambda state: min(len(state) - 1, int(len(state) * fraction))


def _cut(fraction: float) -> Forge:
    return lambda valid, _: valid.state[: int(len(valid.state) * fraction)]


def _header(change: Callable[[list[object]], object]) -> Forge:
    """The valid state with its binding (the first value: format, log, position, event) changed."""

    def forge(valid: StoredSnapshot, _: Path) -> bytes:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(valid.state)
        header = unpacker.unpack()
        return bytes(msgpack.packb(change(header))) + valid.state[unpacker.tell() :]

    return forge


def _set(index: int, value: object) -> Callable[[list[object]], list[object]]:
    return lambda header: [value if at == index else item for at, item in enumerate(header)]


def _nested(depth: int, opening: bytes, closing: bytes = b"\xc0") -> bytes:
    return opening * depth + closing


def _nested_objects(depth: int) -> bytes:
    """Tuples (marked arrays) nested ``depth`` deep."""
    value: object = None
    for _ in range(depth):
        value = [msgpack.ExtType(1, b"\x00\x00"), value]
    return bytes(msgpack.packb(value))


def _cases() -> list[HostileSnapshot]:
    cases: list[HostileSnapshot] = []

    def add(name: str, forge: Forge, *, data_only: bool = True) -> None:
        cases.append(HostileSnapshot(name, forge, data_only))

    # --- pickles that would run something, every protocol ----------------------------------------
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        add(f"pickle {protocol}: os.system", _pickled(_RunsAProgram, protocol))
        add(f"pickle {protocol}: subprocess.Popen", _pickled(_OpensAProcess, protocol))
        add(f"pickle {protocol}: open a file", _pickled(_WritesAFile, protocol))
        add(f"pickle {protocol}: copyreg._reconstructor", _pickled(_Reconstructs, protocol))

    # --- dotted names through inert's own modules -------------------------------------------------
    for module, name in [
        ("inert.actors._fold", "os.system"),
        ("inert.runtime._snapshot", "sys.modules.os.system"),
        ("inert.events._catalog", "enum.sys.modules.subprocess.getoutput"),
        ("inert.projections._ledger", "datetime.sys.modules.os.system"),
        ("inert.runtime._retention", "attrs.__builtins__.exec"),
        ("builtins", "eval"),
        ("io", "FileIO"),
    ]:
        add(f"dotted name {module}.{name}", _dotted(module, name))

    # --- huge, deep and cut ---------------------------------------------------------------------
    add("an empty state", _with_state(b""))
    add("a map claiming four billion entries", _with_state(b"\xdf\xff\xff\xff\xff"))
    add("bytes claiming four gigabytes", _with_state(b"\xc6\xff\xff\xff\xff" + b"x" * 64))
    add("a string of five megabytes", _with_state(msgpack.packb("x" * 5_000_000)))
    add("arrays nested 100,000 deep", _with_state(_nested(100_000, b"\x91")))
    add("maps nested 100,000 deep", _with_state(_nested(100_000, b"\x81\xc0")))
    add("tuples nested 500 deep", _with_state(_nested_objects(500)))
    add("random bytes", _with_state(bytes(range(256)) * 64))
    for fraction in (0.01, 0.3, 0.5, 0.9, 0.999):
        add(f"the state cut at {fraction:.1%}", _cut(fraction))

    # --- a valid snapshot changed in one place, its digest recomputed -------------------------
    add("its format changed", _header(_set(1, 2)))
    add("taken of another log", _header(_set(2, "log-another")))
    add("its position moved back", _header(lambda header: [*header[:3], 1, header[4]]))
    add("its position past the head", _header(lambda header: [*header[:3], 10**9, header[4]]))
    add("another event at its position", _header(_set(4, "not-the-event")))
    add("its header not a list", _header(lambda header: {"format": header[1]}))
    for tenth in range(1, 10):
        # 0xc1 is no MessagePack value: the state cannot be read past it.
        add(f"a byte {tenth}0% in made 0xc1", _changed(_at(tenth / 10), 0xC1), data_only=False)
    add("its last byte changed", _changed(_at(1.0), 0x91), data_only=False)
    return cases


CORPUS: list[HostileSnapshot] = _cases()
