"""``python -m inert``: the ``inert`` command."""

from .cli._cli import main_entry

if __name__ == "__main__":
    main_entry()
