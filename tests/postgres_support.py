"""The PostgreSQL server the tests use, and a schema of its own for each test.

The server is named by ``INERT_TEST_POSTGRESQL`` (a libpq URL, the local ``test`` database by
default). A server that cannot be reached fails the tests that need it, with the reason: the
backend is part of the suite, so silence would hide it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("INERT_TEST_POSTGRESQL", DEFAULT_URL)


def connect() -> psycopg.Connection[tuple[Any, ...]]:
    """An autocommit connection to the test server, or a failed test saying why not."""
    url = server_url()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.Error as error:
        pytest.fail(
            f"the PostgreSQL test server {url} cannot be reached ({error});"
            " start it, or name another one in INERT_TEST_POSTGRESQL",
            pytrace=False,
        )


def log_url(schema: str, **options: object) -> str:
    """The server's URL with the log options given, ``schema`` first."""
    parts = urlsplit(server_url())
    query = "&".join(filter(None, [parts.query, urlencode({"schema": schema, **options})]))
    return parts._replace(query=query).geturl()


def drop_schema(schema: str) -> None:
    with connect() as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def new_schema() -> str:
    """The name of a schema no other test uses, once the server is known to answer."""
    connect().close()
    return f"inert_test_{uuid.uuid4().hex[:16]}"


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new schema's name, dropped with everything in it afterwards."""
    schema = new_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)
