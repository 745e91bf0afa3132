"""The daemon server: its parts shared by both dialects (``core``), their lifetime
(``lifecycle``), and the ponder protocol dialect (``app``, ``routes``, ``handlers/`` by method group,
``rpc_bridge``).
ACP, the other dialect, lives in ``daemon.acp``. This module only re-exports.
"""

from daemon.server.app import serve
from daemon.server.core import Daemon

__all__ = ["Daemon", "serve"]
