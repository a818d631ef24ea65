"""The PostgreSQL log's tables, their upgrades from older schema versions, and its statements.

Every row of the events, streams, heads and snapshot tables belongs to one partition (see
:mod:`._partitions`). A stream is named within its partition; an event id is unique within its
partition; each partition has its own head row, its own gap-free positions and its own
snapshots. Nothing on the append path is shared by partitions but the table of payload keys,
whose rows are keyed by call and so are never written by two partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import psycopg

from ._log import new_identity, new_secret
from ._partitions import PARTITION_HASH
from ._records import with_checksum

Connection = psycopg.Connection[tuple[Any, ...]]
Migration = Callable[[Connection, str], None]
"""A step from schema version N to N + 1, given a connection in a transaction and the schema."""


def _snapshot_sql(schema: str) -> str:
    # Payloads are indexed by stream, which redaction deletes them by.
    return f"""
CREATE TABLE {schema}.snapshots (
    partition integer NOT NULL DEFAULT 0,
    name text NOT NULL,
    position bigint NOT NULL,
    stamp text NOT NULL,
    state bytea NOT NULL,
    digest text NOT NULL,
    PRIMARY KEY (partition, name)
);
CREATE TABLE {schema}.snapshot_payloads (
    partition integer NOT NULL DEFAULT 0,
    name text NOT NULL,
    ordinal integer NOT NULL,
    part text NOT NULL,
    stream text NOT NULL,
    first_version integer NOT NULL,
    data bytea NOT NULL,
    key_id bigint,
    PRIMARY KEY (partition, name, ordinal)
);
CREATE INDEX ON {schema}.snapshot_payloads (partition, stream);
"""


def schema_sql(schema: str, partitions: int) -> str:
    """The tables of a new log of ``partitions`` partitions of calls (their heads made too)."""
    heads = ", ".join(f"({number}, 0)" for number in range(partitions + (partitions > 1)))
    return f"""
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE {schema}.inert_meta (
    application text NOT NULL,
    schema_version integer NOT NULL,
    identity text NOT NULL,
    secret bytea NOT NULL,
    partitions integer NOT NULL,
    partition_hash text NOT NULL
);
CREATE TABLE {schema}.heads (
    partition integer PRIMARY KEY,
    position bigint NOT NULL
);
CREATE TABLE {schema}.streams (
    stream_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition integer NOT NULL,
    name text NOT NULL,
    version bigint NOT NULL,
    UNIQUE (partition, name)
);
CREATE TABLE {schema}.events (
    partition integer NOT NULL,
    position bigint NOT NULL,
    event_id text NOT NULL,
    stream_id bigint NOT NULL
        REFERENCES {schema}.streams (stream_id) DEFERRABLE INITIALLY DEFERRED,
    version bigint NOT NULL CHECK (version >= 1),
    recorded_at bigint NOT NULL,
    event_type text NOT NULL,
    schema_version integer NOT NULL,
    payload bytea,
    payload_length integer NOT NULL,
    payload_digest bytea,
    traceparent text,
    tracestate text,
    checksum bigint NOT NULL,
    key_id bigint,
    PRIMARY KEY (partition, position),
    UNIQUE (partition, event_id),
    UNIQUE (stream_id, version)
);
INSERT INTO {schema}.heads VALUES {heads};
{_snapshot_sql(schema)}
{_keys_sql(schema)}"""


def _keys_sql(schema: str) -> str:
    # A row sealed under a key names it; the index finds what a key still seals when a
    # redaction asks whether it may go.
    return f"""
CREATE TABLE {schema}.payload_keys (
    key_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    key bytea NOT NULL
);
CREATE INDEX ON {schema}.events (key_id) WHERE key_id IS NOT NULL;
"""


def _add_keys(connection: Connection, schema: str) -> None:
    # Rows written before are left as they are: sealing starts with the rows written after.
    connection.execute(f"ALTER TABLE {schema}.events ADD COLUMN key_id bigint")
    connection.execute(f"ALTER TABLE {schema}.snapshot_payloads ADD COLUMN key_id bigint")
    connection.execute(_keys_sql(schema))


def _add_snapshots(connection: Connection, schema: str) -> None:
    # The tables as schema 2 made them: one partition, whose number they did not hold.
    connection.execute(f"""
CREATE TABLE {schema}.snapshots (
    name text PRIMARY KEY,
    position bigint NOT NULL,
    stamp text NOT NULL,
    state bytea NOT NULL,
    digest text NOT NULL
);
CREATE TABLE {schema}.snapshot_payloads (
    name text NOT NULL,
    ordinal integer NOT NULL,
    part text NOT NULL,
    stream text NOT NULL,
    first_version integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (name, ordinal)
);
CREATE INDEX ON {schema}.snapshot_payloads (stream);
""")


def _add_checksums(connection: Connection, schema: str) -> None:
    # The rows are taken as they are: nothing older can tell whether one was damaged before.
    connection.execute(f"ALTER TABLE {schema}.events ADD COLUMN checksum bigint NOT NULL DEFAULT 0")
    # The rows as schema 2 held them: nothing sealed yet, no table of keys.
    select = (
        "SELECT e.position, e.event_id, s.name, e.version, e.recorded_at, e.event_type,"
        " e.schema_version, e.payload, e.payload_length, e.payload_digest, e.traceparent,"
        f" e.tracestate FROM {schema}.events AS e"
        f" JOIN {schema}.streams AS s ON s.stream_id = e.stream_id"
        " WHERE e.position >= %s ORDER BY e.position LIMIT %s"
    )
    position = 1
    while rows := connection.execute(select, (position, 4096)).fetchall():
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {schema}.events SET checksum = %s WHERE position = %s",
                [(with_checksum(row).checksum, row[0]) for row in rows],
            )
        position = rows[-1][0] + 1


def _add_identity(connection: Connection, schema: str) -> None:
    connection.execute(
        f"ALTER TABLE {schema}.inert_meta ADD COLUMN identity text, ADD COLUMN secret bytea"
    )
    connection.execute(
        f"UPDATE {schema}.inert_meta SET identity = %s, secret = %s",
        (new_identity(), new_secret()),
    )
    connection.execute(
        f"ALTER TABLE {schema}.inert_meta ALTER COLUMN identity SET NOT NULL,"
        " ALTER COLUMN secret SET NOT NULL"
    )


def _add_partitions(connection: Connection, schema: str) -> None:
    # What a log held becomes partition 0 of a log of one partition: every position, stream
    # name, event id and snapshot name keeps its meaning there.
    connection.execute(f"""
ALTER TABLE {schema}.inert_meta ADD COLUMN partitions integer NOT NULL DEFAULT 1,
    ADD COLUMN partition_hash text NOT NULL DEFAULT '{PARTITION_HASH}';
ALTER TABLE {schema}.inert_meta ALTER COLUMN partitions DROP DEFAULT,
    ALTER COLUMN partition_hash DROP DEFAULT;
CREATE TABLE {schema}.heads (partition integer PRIMARY KEY, position bigint NOT NULL);
INSERT INTO {schema}.heads SELECT 0, position FROM {schema}.head;
DROP TABLE {schema}.head;
ALTER TABLE {schema}.streams ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.streams ALTER COLUMN partition DROP DEFAULT,
    DROP CONSTRAINT streams_name_key, ADD UNIQUE (partition, name);
ALTER TABLE {schema}.events ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.events ALTER COLUMN partition DROP DEFAULT,
    DROP CONSTRAINT events_pkey, DROP CONSTRAINT events_event_id_key,
    ADD PRIMARY KEY (partition, position), ADD UNIQUE (partition, event_id);
ALTER TABLE {schema}.snapshots ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.snapshots DROP CONSTRAINT snapshots_pkey, ADD PRIMARY KEY (partition, name);
ALTER TABLE {schema}.snapshot_payloads ADD COLUMN partition integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.snapshot_payloads DROP CONSTRAINT snapshot_payloads_pkey,
    ADD PRIMARY KEY (partition, name, ordinal);
DROP INDEX {schema}.snapshot_payloads_stream_idx;
CREATE INDEX ON {schema}.snapshot_payloads (partition, stream);
""")


def _defer_stream_references(connection: Connection, schema: str) -> None:
    # A group's rows are copied before the streams they open are inserted with the commit, so
    # that both cost no round trip of their own; the reference is checked at the commit.
    (name,) = connection.execute(
        "SELECT conname FROM pg_constraint WHERE contype = 'f'"
        " AND conrelid = (quote_ident(%s) || '.events')::regclass",
        (schema,),
    ).fetchone() or (None,)
    if name is not None:
        connection.execute(
            f"ALTER TABLE {schema}.events ALTER CONSTRAINT {name} DEFERRABLE INITIALLY DEFERRED"
        )


MIGRATIONS: dict[int, Migration] = {
    1: _add_snapshots,
    2: _add_checksums,
    3: _add_identity,
    4: _add_keys,
    5: _add_partitions,
    6: _defer_stream_references,
}


@attrs.frozen
class Statements:
    """The SQL of one schema, written once when the log is made. Each statement that reads or
    writes rows of a partition takes the partition's number as its first parameter."""

    select: str
    lock_heads: str
    stored: str
    streams: str
    insert_streams: str
    new_ids: str
    make_keys: str
    set_versions: str
    insert_events: str
    set_heads: str
    notify: str
    read: str
    read_stream: str
    head: str
    heads: str
    stream_version: str
    lock_snapshots: str
    to_redact_in: str
    to_redact_of_types_in: str
    redact_rows: str
    redact_snapshots_in: str
    snapshot_first_versions: str
    delete_snapshot_payloads_from: str
    rows_at: str
    redacted_rows: str
    delete_snapshot_payloads: str
    delete_snapshot: str
    write_snapshot: str
    write_snapshot_payload: str
    read_snapshot: str
    keys: str
    insert_keys: str
    lock_keys: str
    delete_keys: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        # A row's columns, then the key its payload is sealed under (see ``_row``).
        select = (
            "SELECT e.position, e.event_id, s.name, e.version, e.recorded_at, e.event_type,"
            " e.schema_version, e.payload, e.payload_length, e.payload_digest, e.traceparent,"
            f" e.tracestate, e.checksum, e.key_id, k.key FROM {schema}.events AS e"
            f" JOIN {schema}.streams AS s ON s.stream_id = e.stream_id"
            f" LEFT JOIN {schema}.payload_keys AS k ON k.key_id = e.key_id"
        )
        return cls(
            select=select,
            # In the order of their numbers, so that two writers never wait on each other's;
            # with the stamp of each head's row, which the group's stamp is never before.
            lock_heads=(
                f"SELECT h.partition, h.position, e.recorded_at FROM {schema}.heads AS h"
                f" LEFT JOIN {schema}.events AS e"
                " ON e.partition = h.partition AND e.position = h.position"
                " WHERE h.partition = ANY(%s) ORDER BY h.partition FOR UPDATE OF h"
            ),
            # What a group finds of its events and streams, in every partition it writes to,
            # in a statement each: a row with its partition last, a stream with its first.
            stored=(
                select.replace(" FROM ", ", e.partition FROM ", 1)
                + " JOIN unnest(%s::int4[], %s::text[]) AS r(partition, event_id)"
                " ON e.partition = r.partition AND e.event_id = r.event_id"
            ),
            streams=(
                f"SELECT s.partition, s.name, s.stream_id, s.version FROM {schema}.streams AS s"
                " JOIN unnest(%s::int4[], %s::text[]) AS r(partition, name)"
                " ON s.partition = r.partition AND s.name = r.name"
            ),
            # The new streams of every partition a group writes to, in one round trip.
            # Numbered by the group before it knows which of its streams and keys are new, so
            # that they are inserted with the commit (a number taken and not used is a gap).
            new_ids=(
                f"SELECT nextval(pg_get_serial_sequence('{schema}.streams', 'stream_id')),"
                f" nextval(pg_get_serial_sequence('{schema}.payload_keys', 'key_id'))"
                " FROM generate_series(1, %s)"
            ),
            insert_streams=(
                f"INSERT INTO {schema}.streams (stream_id, partition, name, version)"
                " OVERRIDING SYSTEM VALUE"
                " SELECT * FROM unnest(%s::int8[], %s::int4[], %s::text[], %s::bigint[])"
            ),
            # A name another writer made meanwhile (a snapshot's) breaks the transaction, which
            # is then written again with that key.
            make_keys=(
                f"INSERT INTO {schema}.payload_keys (key_id, name, key) OVERRIDING SYSTEM VALUE"
                " SELECT * FROM unnest(%s::int8[], %s::text[], %s::bytea[])"
            ),
            set_versions=(
                f"UPDATE {schema}.streams AS s SET version = v.version"
                " FROM unnest(%s::bigint[], %s::bigint[]) AS v(stream_id, version)"
                " WHERE s.stream_id = v.stream_id"
            ),
            # COPY in binary: the cheapest way in for many rows, and no escaping of payloads.
            insert_events=(
                f"COPY {schema}.events (partition, position, event_id, stream_id, version,"
                " recorded_at, event_type, schema_version, payload, payload_length,"
                " payload_digest, traceparent, tracestate, checksum, key_id)"
                " FROM STDIN (FORMAT BINARY)"
            ),
            set_heads=(
                f"UPDATE {schema}.heads AS h SET position = v.position"
                " FROM unnest(%s::integer[], %s::bigint[]) AS v(partition, position)"
                " WHERE h.partition = v.partition"
            ),
            # A notification goes out with the commit that moves the head, never before.
            notify="SELECT pg_notify(%s, %s)",
            read=(
                f"{select} WHERE e.partition = %s AND e.position >= %s ORDER BY e.position LIMIT %s"
            ),
            read_stream=(
                f"{select} WHERE s.partition = %s AND s.name = %s AND e.version >= %s"
                " ORDER BY e.version"
            ),
            head=f"SELECT position FROM {schema}.heads WHERE partition = %s",
            heads=f"SELECT partition, position FROM {schema}.heads",
            stream_version=(
                f"SELECT version FROM {schema}.streams WHERE partition = %s AND name = %s"
            ),
            # A batch of redactions, each of a stream up to a version, costs the server a
            # statement of each kind, not one a stream and a row. Only the rows of the types
            # asked for leave the server: a redaction limited to some calls is made for each
            # batch of calls that end, over a stream of others' rows.
            to_redact_in=(
                f"{select} JOIN unnest(%s::text[], %s::int8[]) AS r(name, up_to)"
                " ON r.name = s.name WHERE s.partition = %s AND e.version <= r.up_to"
                " AND e.payload_digest IS NULL ORDER BY e.position FOR UPDATE OF e"
            ),
            to_redact_of_types_in=(
                f"{select} JOIN unnest(%s::text[], %s::int8[]) AS r(name, up_to)"
                " ON r.name = s.name WHERE s.partition = %s AND e.version <= r.up_to"
                " AND e.payload_digest IS NULL AND e.event_type = ANY(%s)"
                " ORDER BY e.position FOR UPDATE OF e"
            ),
            redact_rows=(
                f"UPDATE {schema}.events AS e SET schema_version = v.schema_version,"
                " payload = v.payload, payload_digest = v.payload_digest,"
                " checksum = v.checksum, key_id = NULL"
                " FROM unnest(%s::int4[], %s::bytea[], %s::bytea[], %s::int8[], %s::int8[])"
                " AS v(schema_version, payload, payload_digest, checksum, position)"
                " WHERE e.partition = %s AND e.position = v.position"
            ),
            # Taken by redactions and snapshot writes of a partition, and by nothing else: one
            # that waits for the other then sees what it committed (a payload to delete, or a
            # redacted stream). Those of other partitions go on meanwhile. Taken in the order of
            # the keys given, which the caller sorts.
            lock_snapshots=(
                "SELECT pg_advisory_xact_lock(k)"
                " FROM (SELECT k FROM unnest(%s::int8[]) AS k ORDER BY k) AS ordered"
            ),
            redact_snapshots_in=(
                f"DELETE FROM {schema}.snapshot_payloads AS p"
                " USING unnest(%s::text[], %s::int8[]) AS r(stream, up_to)"
                " WHERE p.partition = %s AND p.stream = r.stream AND p.first_version <= r.up_to"
                " RETURNING p.key_id"
            ),
            snapshot_first_versions=(
                f"SELECT DISTINCT first_version FROM {schema}.snapshot_payloads"
                " WHERE partition = %s AND stream = %s AND first_version <= %s"
            ),
            delete_snapshot_payloads_from=(
                f"DELETE FROM {schema}.snapshot_payloads WHERE partition = %s AND stream = %s"
                " AND first_version = ANY(%s) RETURNING key_id"
            ),
            rows_at=f"{select} WHERE s.partition = %s AND s.name = %s AND e.version = ANY(%s)",
            redacted_rows=(
                f"{select} WHERE s.partition = %s AND s.name = ANY(%s)"
                " AND e.payload_digest IS NOT NULL"
            ),
            delete_snapshot_payloads=(
                f"DELETE FROM {schema}.snapshot_payloads WHERE partition = %s AND name = %s"
                " RETURNING key_id"
            ),
            delete_snapshot=f"DELETE FROM {schema}.snapshots WHERE partition = %s AND name = %s",
            write_snapshot=(
                f"INSERT INTO {schema}.snapshots"
                " (partition, name, position, stamp, state, digest)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (partition, name) DO UPDATE SET position = excluded.position,"
                " stamp = excluded.stamp, state = excluded.state, digest = excluded.digest"
            ),
            write_snapshot_payload=(
                f"INSERT INTO {schema}.snapshot_payloads"
                " (partition, name, ordinal, part, stream, first_version, data, key_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            ),
            # One statement, so that it sees one snapshot whole even while a write replaces it;
            # a payload whose key is gone is redacted, and left out.
            read_snapshot=(
                f"SELECT 0, position, stamp, digest, 0, state, NULL::bigint, NULL::bytea"
                f" FROM {schema}.snapshots WHERE partition = %s AND name = %s UNION ALL"
                " SELECT 1, p.ordinal, p.part, p.stream, p.first_version, p.data, p.key_id,"
                f" k.key FROM {schema}.snapshot_payloads AS p"
                f" LEFT JOIN {schema}.payload_keys AS k ON k.key_id = p.key_id"
                " WHERE p.partition = %s AND p.name = %s ORDER BY 1, 2"
            ),
            # Shared: a redaction that would destroy one waits for the appends sealing with it.
            keys=(
                f"SELECT name, key_id, key FROM {schema}.payload_keys WHERE name = ANY(%s)"
                " FOR SHARE"
            ),
            insert_keys=(
                f"INSERT INTO {schema}.payload_keys (name, key)"
                " SELECT * FROM unnest(%s::text[], %s::bytea[])"
                " ON CONFLICT (name) DO NOTHING RETURNING name, key_id, key"
            ),
            lock_keys=(
                f"SELECT key_id FROM {schema}.payload_keys WHERE key_id = ANY(%s) FOR UPDATE"
            ),
            # A key goes with the last payload it seals, in a row or a snapshot. The keys are
            # named inside each test too: the planner then looks them up in the index of the
            # rows' keys, where it could otherwise scan every row of a log whose statistics
            # are older than its growth.
            delete_keys=(
                "WITH asked AS (SELECT %s::int8[] AS ids)"
                f" DELETE FROM {schema}.payload_keys AS k USING asked"
                " WHERE k.key_id = ANY(asked.ids)"
                f" AND NOT EXISTS (SELECT 1 FROM {schema}.events AS e"
                " WHERE e.key_id = ANY(asked.ids) AND e.key_id = k.key_id"
                " AND e.payload_digest IS NULL)"
                f" AND NOT EXISTS (SELECT 1 FROM {schema}.snapshot_payloads AS p"
                " WHERE p.key_id = ANY(asked.ids) AND p.key_id = k.key_id) RETURNING k.key_id"
            ),
        )


EVENT_COLUMN_TYPES = [
    "int4",
    "int8",
    "text",
    "int8",
    "int8",
    "int8",
    "text",
    "int4",
    "bytea",
    "int4",
    "bytea",
    "text",
    "text",
    "int8",
    "int8",
]
