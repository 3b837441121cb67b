"""forkbox: run commands in throwaway sandboxes served by a ``forkbox daemon``.

>>> from forkbox import Forkbox
>>> r = Forkbox.run("echo hi")
>>> r.stdout, r.exit_code
('hi\\n', 0)

:class:`Forkbox` is the blocking client, :class:`AsyncForkbox` the asyncio one; both
speak the daemon's sandbox protocol (version 1) on its unix socket. See README.md.
"""

from ._version import __version__
from .client import AsyncForkbox, Forkbox
from .errors import (
    DaemonNotRunning,
    ForkboxError,
    InvalidRequest,
    ProtocolError,
    SandboxBusy,
    SandboxError,
)
from .result import RunResult
from ._daemon import default_socket_path

__all__ = [
    "__version__",
    "Forkbox",
    "AsyncForkbox",
    "RunResult",
    "ForkboxError",
    "DaemonNotRunning",
    "SandboxError",
    "SandboxBusy",
    "InvalidRequest",
    "ProtocolError",
    "default_socket_path",
]
