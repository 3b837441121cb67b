"""Socket path resolution and the autostart switch: no daemon."""

import os

import pytest

from forkbox import AsyncForkbox, Forkbox, InvalidRequest
from forkbox._daemon import default_socket_path, find_binary, resolve_socket

IDENTITY = "         0          0 4294967295\n"
USERNS = "         0       1000          1\n"


def test_root_in_initial_namespace():
    assert default_socket_path({"XDG_RUNTIME_DIR": "/run/user/0", "USER": "root"}, euid=0, uid=0,
                               uid_map=IDENTITY) == "/run/forkbox/forkbox.sock"
    # Root with a user name that is not root, but not in a user namespace: still root's path.
    assert default_socket_path({"XDG_RUNTIME_DIR": "/x", "USER": "alice"}, euid=0, uid=0,
                               uid_map=IDENTITY) == "/run/forkbox/forkbox.sock"


def test_user_with_xdg():
    assert default_socket_path({"XDG_RUNTIME_DIR": "/run/user/1000"}, euid=1000, uid=1000,
                               uid_map=IDENTITY) == "/run/user/1000/forkbox/forkbox.sock"


def test_user_without_xdg():
    assert default_socket_path({}, euid=1000, uid=1000, uid_map=IDENTITY) == "/run/user/1000/forkbox/forkbox.sock"
    assert default_socket_path({"XDG_RUNTIME_DIR": ""}, euid=1000, uid=1000,
                               uid_map=IDENTITY) == "/run/user/1000/forkbox/forkbox.sock"


def test_root_in_user_namespace_is_a_user():
    env = {"XDG_RUNTIME_DIR": "/run/user/1000", "USER": "alice"}
    assert default_socket_path(env, euid=0, uid=0, uid_map=USERNS) == "/run/user/1000/forkbox/forkbox.sock"


def test_root_in_user_namespace_named_root_is_root():
    env = {"XDG_RUNTIME_DIR": "/run/user/1000", "USER": "root"}
    assert default_socket_path(env, euid=0, uid=0, uid_map=USERNS) == "/run/forkbox/forkbox.sock"


def test_root_in_user_namespace_without_user_variable_is_a_user():
    assert default_socket_path({"XDG_RUNTIME_DIR": "/x"}, euid=0, uid=0, uid_map=USERNS) == "/x/forkbox/forkbox.sock"


def test_unreadable_uid_map_means_initial_namespace():
    assert default_socket_path({"USER": "alice"}, euid=0, uid=0, uid_map=None) == "/run/forkbox/forkbox.sock"


def test_this_process():
    # As root on the test machine (initial namespace): root's path.
    expected = "/run/forkbox/forkbox.sock" if os.geteuid() == 0 else None
    if expected:
        assert default_socket_path({}) == expected


def test_resolution_order():
    env = {"FORKBOX_SOCKET": "/env.sock", "XDG_RUNTIME_DIR": "/x"}
    assert resolve_socket("/given.sock", env) == ("/given.sock", False)
    assert resolve_socket(None, env) == ("/env.sock", False)
    path, is_default = resolve_socket(None, {"XDG_RUNTIME_DIR": "/x"})
    assert is_default and path == default_socket_path({"XDG_RUNTIME_DIR": "/x"})
    # An empty FORKBOX_SOCKET is unset.
    assert resolve_socket(None, {"FORKBOX_SOCKET": ""})[1] is True


def test_client_socket_and_autostart_rules(clean_env):
    assert Forkbox(socket="/a.sock").socket_path == "/a.sock"
    assert Forkbox(socket="/a.sock").autostart is False  # explicit socket: no autostart
    assert Forkbox(socket="/a.sock", autostart=True).autostart is True
    c = Forkbox()
    assert c.socket_is_default and c.autostart is True
    assert Forkbox(autostart=False).autostart is False
    clean_env.setenv("FORKBOX_SOCKET", "/e.sock")
    c = Forkbox()
    assert c.socket_path == "/e.sock" and not c.socket_is_default and c.autostart is False
    clean_env.delenv("FORKBOX_SOCKET")
    clean_env.setenv("FORKBOX_NO_AUTOSTART", "1")
    assert Forkbox().autostart is False
    assert Forkbox(autostart=True).autostart is False  # the environment's opt-out wins
    assert AsyncForkbox().autostart is False
    clean_env.setenv("FORKBOX_NO_AUTOSTART", "0")
    assert Forkbox().autostart is True


def test_pathlike_socket(tmp_path):
    assert Forkbox(socket=tmp_path / "s").socket_path == str(tmp_path / "s")


@pytest.mark.parametrize("kwargs", [{"request_timeout_s": 0}, {"request_timeout_s": "1"}, {"timeout_grace_s": -1},
                                    {"busy_retry_s": None}, {"autostart": "yes"}])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(InvalidRequest):
        Forkbox(socket="/a.sock", **kwargs)


def test_find_binary(tmp_path):
    exe = tmp_path / "forkbox"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert find_binary({"FORKBOX_BIN": str(exe)}) == str(exe)
    assert find_binary({"FORKBOX_BIN": str(tmp_path / "missing")}) is None
    assert find_binary({"PATH": str(tmp_path)}) == str(exe)


def test_class_level_call_uses_a_default_client(clean_env, sockdir):
    # No daemon: the error names the socket from the environment.
    path = os.path.join(sockdir, "none.sock")
    clean_env.setenv("FORKBOX_SOCKET", path)
    from forkbox import DaemonNotRunning

    with pytest.raises(DaemonNotRunning) as e:
        Forkbox.run("true")
    assert e.value.socket_path == path


def test_class_level_signature_has_no_self():
    import inspect

    assert list(inspect.signature(Forkbox.run).parameters)[0] == "cmd"
    assert list(inspect.signature(Forkbox(socket="/x").run).parameters)[0] == "cmd"
    assert inspect.iscoroutinefunction(AsyncForkbox.run)
