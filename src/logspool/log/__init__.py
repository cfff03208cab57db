"""The log: a directory of segments, written by many threads and processes, read without locks.

One module per responsibility (docs/DESIGN.md has the map): ``_directory`` (the meta file and
the listing of segments), more to come as ``logspool._log`` is split (issue 30).
"""
