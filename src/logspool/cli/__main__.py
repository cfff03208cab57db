"""``python -m logspool.cli``: the same command as ``logspool`` (the tests and the daemon's
fixtures start it so)."""

from ._main import main

raise SystemExit(main())
