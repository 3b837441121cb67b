"""forkbox: run commands in sandboxes served by a ``forkbox daemon``.

>>> from forkbox import Forkbox
>>> r = Forkbox.run("echo hi")
>>> r.stdout, r.exit_code
('hi\\n', 0)

One-shot runs get a fresh sandbox each (:meth:`Forkbox.run`). A session keeps one sandbox
for many runs and file verbs, streams output, and forks its state
(:meth:`Forkbox.create` gives a :class:`Sandbox`). :class:`Forkbox` is the blocking
client, :class:`AsyncForkbox` the asyncio one (:class:`AsyncSandbox`); both speak the
daemon's sandbox protocol (version 1) on its unix socket. See README.md.
"""

from ._version import __version__
from .async_sandbox import AsyncProcess, AsyncSandbox
from .client import AsyncForkbox, Forkbox
from .errors import (
    DaemonNotRunning,
    FileError,
    ForkboxError,
    InvalidRequest,
    ProtocolError,
    SandboxBusy,
    SandboxClosed,
    SandboxError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxFileTimeoutError,
    SandboxIsADirectoryError,
    SandboxNotADirectoryError,
    SandboxPermissionError,
    WaitTimeout,
)
from .result import Change, FileInfo, OutputChunk, RunResult, SandboxInfo
from .sandbox import Process, Sandbox
from ._daemon import default_socket_path

__all__ = [
    "__version__",
    "Forkbox",
    "AsyncForkbox",
    "Sandbox",
    "AsyncSandbox",
    "Process",
    "AsyncProcess",
    "RunResult",
    "OutputChunk",
    "FileInfo",
    "Change",
    "SandboxInfo",
    "ForkboxError",
    "DaemonNotRunning",
    "SandboxError",
    "SandboxBusy",
    "SandboxClosed",
    "InvalidRequest",
    "ProtocolError",
    "WaitTimeout",
    "FileError",
    "SandboxFileNotFoundError",
    "SandboxFileExistsError",
    "SandboxIsADirectoryError",
    "SandboxNotADirectoryError",
    "SandboxPermissionError",
    "SandboxFileTimeoutError",
    "default_socket_path",
]
