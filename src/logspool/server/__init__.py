"""The daemon (``logspool serve``) and its wire protocol. See docs/PROTOCOL.md."""

from ._server import Limits, Server

__all__ = ["Limits", "Server"]
