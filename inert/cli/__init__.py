"""The ``inert`` command: one module per family of commands, the parser in ``_cli``."""
