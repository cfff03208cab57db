"""The checkpointed file (``logspool.CheckpointFile``): atomic changes to a memory-mapped file
through a physical undo log (docs/FORMAT.md §13), and its torture tools.

- ``_file``: ``CheckpointFile`` and ``RollbackReport``; the undo log, the rollback on open.
- ``_tools``: ``pound``, ``pummel`` and ``corrupt`` (``logspool ckpt ...``).

A system of its own beside the log: it imports only the ground (``_format``, ``_fs``,
``limits``, ``errors``), and nothing in the log imports it.
"""

from ._file import CheckpointFile, RollbackReport

__all__ = ["CheckpointFile", "RollbackReport"]
