"""inert: streamed LLM tool calls that cannot act before they are finished, validated and
still wanted.

Everything public is re-exported here; the modules behind it are private.
"""

from importlib.metadata import PackageNotFoundError, version

from . import events as _events
from .events import *  # noqa: F403

try:
    __version__ = version("inert")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [*_events.__all__, "__version__"]  # noqa: PLE0604
