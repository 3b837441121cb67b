"""The exceptions of the forkbox SDK.

Every exception the SDK raises on purpose is a :class:`ForkboxError`. A command that fails
*inside* the sandbox (non-zero exit, killed by a signal, timed out, out of memory, not
found) is never an exception: it is a :class:`forkbox.RunResult`.
"""

import errno as _errno
import os
from typing import Dict, Optional, Type

__all__ = [
    "ForkboxError",
    "DaemonNotRunning",
    "InvalidRequest",
    "SandboxError",
    "SandboxBusy",
    "SandboxClosed",
    "ProtocolError",
    "WaitTimeout",
    "FileError",
    "SandboxFileNotFoundError",
    "SandboxFileExistsError",
    "SandboxIsADirectoryError",
    "SandboxNotADirectoryError",
    "SandboxPermissionError",
    "SandboxFileTimeoutError",
    "file_error_class",
    "error_from_reply",
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


class SandboxClosed(SandboxError):
    """The session is gone (``no_such_sandbox``): closed, expired (its ``ttl_s`` or
    ``idle_s``), its init died, the daemon restarted, or it never was. Raised by every call
    on a :class:`forkbox.Sandbox` that has ended, without a hang.

    Attributes:
        sandbox_id: the session's id, when known.
        reason: why it ended, as the daemon said (``"closed by its client"``, ``"expired
            (its ttl of 600 s)"``, ``"idle for 600 s"``, ...), or ``None`` when it gave none.
    """

    def __init__(self, message: str, *, code: Optional[str] = None, sandbox_id: Optional[str] = None,
                 reason: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        self.sandbox_id: Optional[str] = sandbox_id
        self.reason: Optional[str] = reason


class WaitTimeout(ForkboxError, TimeoutError):
    """:meth:`forkbox.Process.wait` gave up after its ``timeout``; the process goes on (it
    is also a built-in :class:`TimeoutError`)."""

    def __init__(self, message: str) -> None:
        ForkboxError.__init__(self, message)

    __str__ = ForkboxError.__str__


class FileError(ForkboxError, OSError):
    """A file verb failed inside the sandbox (``file_error``).

    Also an :class:`OSError`: the subclass raised is the one Python raises for the same
    ``errno`` (``except FileNotFoundError`` works), see :func:`file_error_class`.

    Attributes:
        errno: the error's number inside the sandbox (``errno.ENOENT``, ...).
        strerror: its text (``os.strerror``).
        filename: the sandbox path the verb was given.
        message: the daemon's message (``"/path: what: why"``).
    """

    def __init__(self, message: str, *, errno: int, filename: Optional[str] = None,
                 code: Optional[str] = "file_error") -> None:
        OSError.__init__(self, errno, os.strerror(errno), filename)
        self.message: str = message
        self.code: Optional[str] = code

    __str__ = ForkboxError.__str__


class SandboxFileNotFoundError(FileError, FileNotFoundError):
    """``ENOENT`` inside the sandbox: a :class:`FileError` and a :class:`FileNotFoundError`."""


class SandboxFileExistsError(FileError, FileExistsError):
    """``EEXIST`` inside the sandbox: a :class:`FileError` and a :class:`FileExistsError`."""


class SandboxIsADirectoryError(FileError, IsADirectoryError):
    """``EISDIR`` inside the sandbox: a :class:`FileError` and an :class:`IsADirectoryError`."""


class SandboxNotADirectoryError(FileError, NotADirectoryError):
    """``ENOTDIR`` inside the sandbox: a :class:`FileError` and a :class:`NotADirectoryError`."""


class SandboxPermissionError(FileError, PermissionError):
    """``EACCES``/``EPERM`` inside the sandbox: a :class:`FileError` and a
    :class:`PermissionError`."""


class SandboxFileTimeoutError(FileError, TimeoutError):
    """``ETIMEDOUT``: the verb took longer than the daemon allows (60 s); a
    :class:`FileError` and a :class:`TimeoutError`."""


_FILE_ERRORS: Dict[int, Type[FileError]] = {
    _errno.ENOENT: SandboxFileNotFoundError,
    _errno.EEXIST: SandboxFileExistsError,
    _errno.EISDIR: SandboxIsADirectoryError,
    _errno.ENOTDIR: SandboxNotADirectoryError,
    _errno.EACCES: SandboxPermissionError,
    _errno.EPERM: SandboxPermissionError,
    _errno.ETIMEDOUT: SandboxFileTimeoutError,
}


def file_error_class(number: int) -> Type[FileError]:
    """The :class:`FileError` subclass for an errno: the one matching Python's own
    ``OSError`` subclass for it, else :class:`FileError` itself."""
    return _FILE_ERRORS.get(number, FileError)


_ENDED = "has ended: "


def _closed_error(message: str, code: Optional[str], sandbox_id: Optional[str]) -> SandboxClosed:
    # The daemon's messages: "the sandbox sb-... has ended: <why>", "no sandbox "sb-..." here".
    reason = message.split(_ENDED, 1)[1] if _ENDED in message else None
    if sandbox_id is None:
        for word in message.replace('"', " ").split():
            if word.startswith("sb-"):
                sandbox_id = word.rstrip(":.,")
                break
    return SandboxClosed(message, code=code, sandbox_id=sandbox_id, reason=reason)


def error_from_reply(obj: object, *, path: Optional[str] = None, sandbox_id: Optional[str] = None) -> ForkboxError:
    """Map the JSON object of a daemon's ``!`` reply to the matching exception.

    ``path`` is the sandbox path of a file verb (the ``filename`` of a :class:`FileError`),
    ``sandbox_id`` the session the request named.
    """
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
    if code == "no_such_sandbox":
        return _closed_error(message, code_s, sandbox_id)
    if code == "file_error":
        number = obj.get("errno")
        if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
            return ProtocolError(f"daemon sent a file_error without a positive errno: {obj!r}")
        if path is None and message.startswith("/") and ": " in message:
            path = message.split(": ", 1)[0]  # "/path: what: why"
        return file_error_class(number)(message, errno=number, filename=path, code=code_s)
    # sandbox_error, and any code a newer daemon may add.
    return SandboxError(message, code=code_s)
