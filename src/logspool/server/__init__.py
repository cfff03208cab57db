"""The daemon (``logspool serve``) and its wire protocol. See docs/PROTOCOL.md."""

from ._resp import RespOptions
from ._resp_wire import RespLimits
from ._server import Limits, Server

__all__ = ["Limits", "RespLimits", "RespOptions", "Server"]
