"""The log: a directory of segments, written by many threads and processes, read without locks.

One module per responsibility (docs/DESIGN.md has the map): ``_directory`` (the meta file and
the listing of segments), ``_handle`` (closed, failed, usable), ``_active`` (the active segment,
its index and the writer lock), ``_recovery`` (recovery on open and the catch-up before each
write), ``_writer`` (appends, the write queue, group commit, the flush thread). The facade,
``Log``, is still ``logspool._log`` until it moves here (issue 30).
"""
