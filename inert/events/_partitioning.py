"""Where operator controls live on a partitioned log: names every layer shares."""

from __future__ import annotations

CONTROL_PARTITION = 0
"""The partition every process reads whole; in a log of one partition, the only one."""

CONTROL_COPY = "control:"
"""What the id of a control's copy in a partition of calls starts with, before the control's own
id: the copy a runtime process makes where it folds (the same id in every partition, so that
processes copying one control into one partition write it once)."""
