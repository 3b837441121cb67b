"""The exceptions of the forkbox SDK.

Every exception the SDK raises on purpose is a :class:`ForkboxError`. A command that fails
*inside* the sandbox (non-zero exit, killed by a signal, timed out, out of memory, not
found) is never an exception: it is a :class:`forkbox.RunResult`.
"""

from typing import Optional

__all__ = [
    "ForkboxError",
    "DaemonNotRunning",
    "InvalidRequest",
    "SandboxError",
    "SandboxBusy",
    "ProtocolError",
]


class ForkboxError(Exception):
    """Base class of every error of the forkbox SDK.

    Attributes:
        message: the human-readable message (for a daemon's ``!`` reply, the daemon's own).
        code: the daemon's error code (``"invalid_request"``, ``"sandbox_error"``,
            ``"busy"``, ...) when the error came from the daemon, else ``None``.
    """

    def __init__(self, message: str, *, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message: str = message
        self.code: Optional[str] = code

    def __str__(self) -> str:
        return self.message


class DaemonNotRunning(ForkboxError):
    """No daemon answers on the socket (missing socket file, connection refused, ...).

    Attributes:
        socket_path: the socket path that was tried.
    """

    def __init__(self, message: str, *, socket_path: str) -> None:
        super().__init__(message)
        self.socket_path: str = socket_path


class InvalidRequest(ForkboxError):
    """The request is wrong: the daemon answered ``invalid_request``, or the SDK found the
    arguments wrong before connecting (then :attr:`code` is ``None``)."""


class SandboxError(ForkboxError):
    """The daemon could not make or run the sandbox (``sandbox_error``), or the exchange
    with the daemon failed (connection closed without a final message, client-side
    deadline passed, protocol violation)."""


class SandboxBusy(SandboxError):
    """The daemon runs too many sandboxes at once (``busy``): retry later.

    The SDK already retries ``busy`` for up to ``busy_retry_s`` seconds (a constructor
    option of :class:`forkbox.Forkbox`) before raising this.
    """


class ProtocolError(SandboxError):
    """The daemon sent something the protocol does not allow (unknown tag, bad JSON,
    truncated message). A subclass of :class:`SandboxError`."""


def error_from_reply(obj: object) -> ForkboxError:
    """Map the JSON object of a daemon's ``!`` reply to the matching exception."""
    if not isinstance(obj, dict):
        return ProtocolError(f"daemon sent a malformed error reply: {obj!r}")
    code = obj.get("error")
    message = obj.get("message")
    if not isinstance(message, str) or not message:
        message = f"daemon error {code!r}"
    code_s = code if isinstance(code, str) else None
    if code == "invalid_request":
        return InvalidRequest(message, code=code_s)
    if code == "busy":
        return SandboxBusy(message, code=code_s)
    # sandbox_error, and any code a newer daemon may add.
    return SandboxError(message, code=code_s)
