"""The key-value store: ``logspool.kv.open(DIR)``. See ``_store`` and docs/KV.md."""

from ._store import KVStats, Page, Store, Value, open

__all__ = ["KVStats", "Page", "Store", "Value", "open"]
