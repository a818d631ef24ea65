"""The ``inert`` command: the parser in ``_main``, one module per family of commands beside it.

Nothing it prints carries an argument value: calls are shown by key, tool, counts, sizes,
reasons and digests.
"""

from ._main import main, main_entry

__all__ = ["main", "main_entry"]
