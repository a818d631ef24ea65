"""The ``console`` command: the operator console over one log, served until interrupted."""

from __future__ import annotations

import argparse
import errno
import getpass
import ipaddress
import os
import secrets
import sys
from collections.abc import Callable
from functools import partial
from typing import cast

import trio

from ..events import ConfigurationError, InertError
from ..log import open_log
from ._arguments import count_argument, text_argument
from ._operators import OPERATORS_VARIABLE, configured_operators

TOKEN_VARIABLE = "INERT_CONSOLE_TOKEN"
"""A token of at least 16 characters to use instead of a new one at every start."""

DEFAULT_PORT = 8750


class CannotListen(InertError):
    """The console's address cannot be listened on: the port is taken, or not this user's."""


_BIND_ADVICE = {
    errno.EADDRINUSE: "another program listens there: stop it, or give another --port (0: any"
    " free one)",
    errno.EACCES: "ports below 1024 need privileges: give a higher --port",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address: give another --host",
}


def console_arguments(
    console: argparse.ArgumentParser, log_option: Callable[[argparse.ArgumentParser], None]
) -> None:
    log_option(console)
    console.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    console.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help="the port (0: any free one)"
    )
    console.add_argument(
        "--principal",
        type=text_argument,
        help="the principal the printed token stands for (default: your user name); controls"
        f" need it among {OPERATORS_VARIABLE}",
    )
    console.add_argument(
        "--principal-header",
        metavar="HEADER",
        type=text_argument,
        help="also take the principal from this header, set by a proxy in front of the console",
    )
    console.add_argument(
        "--trusted-proxy",
        metavar="ADDRESS",
        action="append",
        type=text_argument,
        help="an address the principal header is believed from (repeatable; default: 127.0.0.1"
        " and ::1)",
    )
    console.add_argument(
        "--trace-url",
        metavar="PATTERN",
        type=text_argument,
        help="where a call's trace id links to, with {trace_id} in it (default: Jaeger's UI on"
        " 127.0.0.1:16686)",
    )
    console.add_argument(
        "--page-size", type=count_argument(1000), default=100, help="calls on a page of the ledger"
    )


async def console_command(url: str, arguments: argparse.Namespace) -> None:
    """Serve the console on the log until interrupted; print its address first."""
    # The console is an optional part: its dependencies are the console extra.
    try:
        from hypercorn.config import Config  # noqa: PLC0415
        from hypercorn.trio import serve  # noqa: PLC0415
        from hypercorn.typing import Framework  # noqa: PLC0415

        from ..console import Console, ConsoleSettings  # noqa: PLC0415
        from ..console._settings import JAEGER_TRACE_URL  # noqa: PLC0415
    except ImportError as error:
        raise ConfigurationError(
            f"the console needs its dependencies: pip install 'inert[console]' ({error})"
        ) from None
    token = os.environ.get(TOKEN_VARIABLE) or secrets.token_urlsafe(24)
    principal = arguments.principal or _user()
    proxies = frozenset(arguments.trusted_proxy or ("127.0.0.1", "::1"))
    for address in proxies:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigurationError(f"--trusted-proxy {address!r} is no IP address") from None
    settings = ConsoleSettings(
        tokens={token: principal},
        principal_header=arguments.principal_header,
        trusted_proxies=proxies,
        operators=configured_operators(),
        trace_url=arguments.trace_url or JAEGER_TRACE_URL,
        page_size=arguments.page_size,
    )
    config = Config()
    config.bind = [_bind(arguments.host, arguments.port)]
    config.accesslog = None
    config.graceful_timeout = 1.0
    async with open_log(url, create=False) as log:
        console = Console(log, settings)
        async with console.running(), trio.open_nursery() as nursery:
            try:
                binds: list[str] = await nursery.start(
                    partial(serve, cast(Framework, console.app), config)
                )
            except* OSError as errors:
                raise _cannot_listen(config.bind[0], errors) from None
            role = "an operator" if settings.is_operator(principal) else "not an operator"
            print(f"inert console on {binds[0]}/?token={token}", flush=True)
            print(
                f"signed in as {principal} ({role}; {OPERATORS_VARIABLE} names the operators);"
                " Ctrl-C stops it",
                file=sys.stderr,
                flush=True,
            )


def _cannot_listen(address: str, errors: BaseExceptionGroup[OSError]) -> InertError:
    """What the server's failure to bind says, and what to do about it."""
    error = _first_leaf(errors)
    advice = _BIND_ADVICE.get(error.errno or 0, "give another --host or --port")
    reason = error.strerror or str(error)
    return CannotListen(f"cannot listen on {address}: {reason.lower()}; {advice}")


def _first_leaf(group: BaseExceptionGroup[OSError]) -> OSError:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError("a port from 0 to 65535")
    return number


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "console"
