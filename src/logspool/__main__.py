"""``python -m logspool``: the same command as ``logspool`` (the torture tools start children so)."""

from .cli import main

raise SystemExit(main())
