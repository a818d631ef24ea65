"""The operator console: one page per question an operator asks of a log during an incident.

``inert console --log URL`` serves it (Starlette on Hypercorn's Trio worker; ``pip install
'inert[console]'``). It reads the log as the runtimes that own it write, and appends operator
controls through the runtime's own authorizer; it decides no call itself. ``console_app`` gives
the ASGI application to serve or mount; ``Console`` keeps one running inside a host's lifespan.
"""

from ._app import CONTENT_SECURITY_POLICY, Console, console_app
from ._settings import JAEGER_TRACE_URL, ConsoleSettings

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "JAEGER_TRACE_URL",
    "Console",
    "ConsoleSettings",
    "console_app",
]
