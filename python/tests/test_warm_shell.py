"""The warm shell: a shell line (``Forkbox.run(cmd)``, ``argv=["/bin/sh", "-c", cmd]`` in
the default environment and cwd, without stdin) runs in a ``/bin/sh`` the sandbox started
while it waited for the request. It must read exactly as a ``/bin/sh -c`` started for the
request: the same output, exit code and signal, and only its own messages' "eval: " and its
command line differ. The reference is the same line with stdin given (b""), which the
sandbox runs the ordinary way.
"""

import os
import shutil
import time
from typing import Iterator, Tuple

import pytest

from fbtest_helpers import CLIENT_TIMEOUT_S, DaemonProc, make_tmp, procs_with
from forkbox import Forkbox, RunResult as Result


@pytest.fixture(scope="module")
def fb(daemon: DaemonProc) -> Iterator[Forkbox]:
    """A daemon of this module's alone: its pool holds the default kind only, so a settled
    pool has a warm shell for the next line."""
    tmp = make_tmp("fbws-")
    d = DaemonProc(daemon.binary, os.path.join(tmp, "forkbox.sock"), os.path.join(tmp, "daemon.log"))
    try:
        d.start()
        assert d.wait_ready() is not None, d.log_tail()
        yield Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)

LINES = [
    "true",
    "false",
    "exit 7",
    "echo out; echo err >&2; exit 3",
    "kill -TERM $$; echo survived",
    "sh -c 'kill -SEGV $$'",
    "echo \"it's\" 'a \"b\"' \\\\ $HOME '$HOME' `echo tick` $(echo dollar)",
    "printf '%s\\n' \"$0\" \"$#\" \"$*\"",
    "cat <<EOF\nline one\n$HOME and 'quotes'\nEOF\necho after",
    "cat <<'EOF'\n$HOME stays\nEOF",
    "echo a \\",
    "set -e; false; echo not reached",
    "trap 'echo bye' EXIT; echo hi",
    "f() { return 4; }; f; echo $?; return 5",
    "exec echo replaced; echo not reached",
    "sleep 0.05 & echo background; wait; echo waited",
    "read x; echo \"[$x] $?\"",
    "umask; pwd; echo \"$PWD\" \"${OLDPWD-unset}\"",
    "env | sort",
    "grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status",
    "ulimit -a",
    "for i in 1 2 3; do echo $i; done | tail -1",
    "case x in x) echo matched;; esac",
    "x=1; { x=2; }; (x=3); echo $x",
    "echo '\u00e9t\u00e9 \u2603'",
    "echo tab\there",
    "\n\n# a comment\necho after blank lines",
    "if true; then\n  echo nested\nfi",
    # The warm shell says how its line ended before it exits (fd 4, hidden from the line):
    # what it runs after the line must not show.
    "set -x; echo traced",
    "printf() { echo shadowed; }; printf 'x\\n'",
    "readonly x=1; echo read-only",
    "trap '' INT; echo ignored",
    "trap 'echo bye >&2; exit 9' EXIT; echo hi",
    "echo a; (sleep 0.3; echo late) & echo b",
    "ls /proc/self/fd",
    # Aliases the line makes apply to what is parsed after it, never to what ends the script.
    "alias return='echo no' set='echo no' printf='echo no'; echo yes",
]


def settle(fb: Forkbox) -> None:
    """Waits for a pooled sandbox: only one made before the request has a warm shell (a
    run that finds the pool empty starts its shell as the reference does)."""
    until = time.monotonic() + 10
    while time.monotonic() < until:
        pool = fb.info()["pool"]
        if pool["ready"] >= 2 and pool["building"] == 0 and pool["kinds"] == 1:
            return
        time.sleep(0.01)


def both(fb: Forkbox, line: str, **options) -> Tuple[Result, Result]:
    settle(fb)
    warm = fb.run(line, timeout_ms=10_000, **options)
    cold = fb.run(argv=["/bin/sh", "-c", line], stdin=b"", timeout_ms=10_000, **options)
    return warm, cold


@pytest.mark.parametrize("line", LINES)
def test_a_line_reads_the_same_in_the_warm_shell(fb: Forkbox, line: str) -> None:
    warm, cold = both(fb, line)
    assert (warm.stdout, warm.exit_code, warm.signal) == (cold.stdout, cold.exit_code, cold.signal), (warm, cold)
    assert warm.stderr == cold.stderr, (warm, cold)


@pytest.mark.parametrize("cwd", ["/tmp", "/bin", "/usr/share/doc", "/proc"])
def test_a_line_in_another_cwd_reads_the_same(fb: Forkbox, cwd: str) -> None:
    # /bin is a symlink on a merged /usr: a shell started there has the physical path as PWD.
    line = "pwd; echo \"$PWD\" \"${OLDPWD-unset}\"; /bin/pwd; ls -d . ..; cd ..; pwd; tr '\\0' ' ' </proc/$$/cmdline"
    warm, cold = both(fb, line, cwd=cwd)
    assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1], (warm, cold)
    assert (warm.stderr, warm.exit_code) == (cold.stderr, cold.exit_code), (warm, cold)
    assert warm.stdout.splitlines()[-1].startswith("/bin/sh -c . /"), warm


ENVS = [
    {"FOO": "bar"},
    {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "QUOTED": "it's \"quoted\" $HOME `x`", "MULTI": "two\nlines"},
    {"LANG": "C", "EMPTY": "", "TERM": "dumb"},
    # Many names: the order of a child's environment is dash's hash chains', in which a
    # variable's place follows when it was set.
    {f"V{i}_{chr(65 + i % 26)}": str(i) for i in range(60)},
    {"HOME": "/root", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM": "xterm",
     "LANG": "C.UTF-8", "A": "1"},
]


@pytest.mark.parametrize("env", ENVS, ids=range(len(ENVS)))
def test_a_line_in_another_environment_reads_the_same(fb: Forkbox, env) -> None:
    line = "env; echo \"$HOME|${LANG-unset}|$PWD|${OLDPWD-unset}\"; export -p; cd; pwd; tr '\\0' ' ' </proc/$$/cmdline"
    for cwd in ("/", "/tmp"):
        warm, cold = both(fb, line, env=env, cwd=cwd)
        assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1], (cwd, warm, cold)
        assert (warm.stderr, warm.exit_code) == (cold.stderr, cold.exit_code), (warm, cold)
        assert warm.stdout.splitlines()[-1].startswith("/bin/sh -c . /"), warm


@pytest.mark.parametrize("env", [{"IFS": ":"}, {"A-B": "1"}, {"PPID": "1"}, {"PWD": "/tmp"}], ids=str)
def test_an_environment_a_shell_cannot_make_starts_its_own(fb: Forkbox, env) -> None:
    line = "env | sort; tr '\\0' ' ' </proc/$$/cmdline"
    warm, cold = both(fb, line, env=env)
    assert warm.stdout == cold.stdout.replace("/bin/sh -c", "/bin/sh -c"), (warm, cold)
    assert "/bin/sh -c env" in warm.stdout, warm


def test_a_cwd_that_is_not_there_reads_the_same(fb: Forkbox) -> None:
    warm, cold = both(fb, "echo never", cwd="/no/such/dir")
    assert (warm.stdout, warm.stderr, warm.exit_code, warm.exec_error) == (
        cold.stdout, cold.stderr, cold.exit_code, cold.exec_error), (warm, cold)
    assert warm.exit_code == 127 and "/no/such/dir" in warm.exec_error, warm


def test_the_warm_shell_is_what_runs_a_line(fb: Forkbox) -> None:
    # Its command line says so; the reference's is the line.
    warm, cold = both(fb, "tr '\\0' ' ' </proc/$$/cmdline")
    assert warm.stdout.startswith("/bin/sh -c . /"), warm
    assert cold.stdout.startswith("/bin/sh -c tr"), cold


@pytest.mark.parametrize("line, message", [
    ("nosuch-command", "nosuch-command: not found"),
    ("set -u; echo $unset_variable", "unset_variable: parameter not set"),
])
def test_the_shell_s_own_messages_gain_only_eval(fb: Forkbox, line: str, message: str) -> None:
    warm, cold = both(fb, line)
    assert warm.exit_code == cold.exit_code and warm.stdout == cold.stdout, (warm, cold)
    assert message in cold.stderr and "eval" not in cold.stderr, cold
    assert warm.stderr == cold.stderr.replace(message, "eval: " + message), (warm, cold)


def test_a_syntax_error_gains_eval_too(fb: Forkbox) -> None:
    warm, cold = both(fb, "echo \"unterminated")
    assert cold.stderr == "/bin/sh: 1: Syntax error: Unterminated quoted string\n" and cold.exit_code == 2, cold
    assert warm.stderr == "/bin/sh: 1: eval: Syntax error: Unterminated quoted string\n" and warm.exit_code == 2, warm


def test_lines_the_warm_shell_does_not_take_run_as_before(fb: Forkbox) -> None:
    # Stdin, another argv[0], no capabilities: each runs
    # in a shell started for it, whose command line is the line.
    me = "$(tr '\\0' ' ' </proc/$$/cmdline)"
    cases = [
        (dict(cmd=f"echo {me} $(cat)", stdin=b"in"), "in"),
        (dict(argv=["sh", "-c", f"echo {me} $0"]), "sh"),
        (dict(cmd=f"echo {me} $(grep CapEff /proc/self/status | tr -d '\\t')", caps=[]), "CapEff:0000000000000000"),
    ]
    for kw, last in cases:
        r = fb.run(timeout_ms=10_000, **kw)
        assert r.ok and r.stdout.split()[-1] == last, (kw, r)
        assert ". /dev/fd/3" not in r.stdout and "-c echo" in r.stdout, (kw, r)


def test_a_long_line_reaches_the_warm_shell_whole(fb: Forkbox) -> None:
    # Longer than a pipe's buffer: the init's writes wait for the shell's reads.
    body = "".join(f"echo line {i} 'with '\\''quotes'\\'' and \\\\ slashes'\n" for i in range(2000))
    settle(fb)
    r = fb.run(body + "echo done", timeout_ms=20_000)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert len(lines) == 2001 and lines[-1] == "done", lines[-3:]
    assert lines[7] == "line 7 with 'quotes' and \\ slashes", lines[7]


# Writes WHAT to the warm shell's own sockets and pipes to the daemon but stdout and stderr:
# its fd 4 (its line's end), which the line does not see as fd 4 but its shell keeps under
# another number, in /proc.
FORGE = ("n=$(ls -l /proc/$$/fd | awk '(/socket:/ || (/^l-wx/ && /pipe:/)) && $9 > 2 {print $9}'); "
         "test -n \"$n\" || echo no fd to forge on >&2; "
         "for n in $n; do printf 'WHAT' > /proc/$$/fd/$n; done; ")


@pytest.mark.parametrize("what", ["S7\\n", "x\\n"])
def test_a_line_cannot_say_its_end_for_its_shell(fb: Forkbox, what: str) -> None:
    # A warm shell says its line's status on a socket to the daemon before its exit, and the
    # daemon ends the run on it. A socket is not opened again through /proc (ENXIO), so
    # neither a status nor anything else reaches the daemon from the line, and the run ends
    # as the line does.
    settle(fb)
    r = fb.run("echo before; " + FORGE.replace("WHAT", what) + "echo after; exit 3", timeout_ms=60_000)
    assert (r.exit_code, r.stdout) == (3, "before\nafter\n"), r
    assert "No such device or address" in r.stderr and "no fd to forge on" not in r.stderr, r


def test_the_watchdog_and_limits_hold_in_the_warm_shell(fb: Forkbox) -> None:
    settle(fb)
    r = fb.run("sleep 1000 & sleep 1000", timeout_ms=200)
    assert r.timed_out and r.exit_code == 124, r
    settle(fb)
    # The bomb hits the pids limit the warm shell got as its line's (dash: "Cannot fork");
    # the line goes on and ends by itself, well before its deadline.
    r = fb.run("b() { b | b & }; b; sleep 2; echo contained", timeout_ms=60_000, pids=32)
    assert not r.timed_out and "contained" in r.stdout and "Cannot fork" in r.stderr, r
    r = fb.run("echo after the bomb")
    assert r.ok and r.stdout == "after the bomb\n", r


def test_what_a_line_leaves_running_dies_with_its_sandbox(fb: Forkbox) -> None:
    # The run ends at its line's end, with a process it started still running; the daemon
    # kills the sandbox a moment after the reply (its client's turn), and with it that
    # process: none stays on the host, and the daemon counts nothing exiting then.
    settle(fb)
    r = fb.run("sleep 9876543 & echo started")
    assert r.ok and r.stdout == "started\n", r
    until = time.monotonic() + 10
    while (procs_with("9876543") or fb.info()["exiting"]) and time.monotonic() < until:
        time.sleep(0.01)
    assert procs_with("9876543") == [] and fb.info()["exiting"] == 0, fb.info()


SESSION_LINES = [
    "echo out; echo err >&2; exit 3",
    "sh -c 'kill -SEGV $$'",
    "cat <<EOF\n$HOME and 'quotes'\nEOF",
    "trap 'echo bye' EXIT; echo hi",
    "umask; pwd; env | sort",
    "read x; echo \"[$x] $?\"",
    "alias return='echo no'; echo yes; false",
]


def test_a_session_s_lines_read_the_same_in_its_warm_shell(fb: Forkbox) -> None:
    with fb.create(timeout_ms=30_000) as sb:
        for line in SESSION_LINES:
            time.sleep(0.05)  # the next warm shell starts after the reply
            warm = sb.run(line)
            cold = sb.run(argv=["/bin/sh", "-c", line], stdin=b"")
            assert (warm.stdout, warm.stderr, warm.exit_code, warm.signal) == (
                cold.stdout, cold.stderr, cold.exit_code, cold.signal), (line, warm, cold)
        time.sleep(0.05)
        me = sb.run("tr '\\0' ' ' </proc/$$/cmdline; echo; ps -o pgid= -p $$; echo $$")
        cmdline, pgid, pid = me.stdout.splitlines()
        assert cmdline.startswith("/bin/sh -c . /") and pgid.strip() == pid, me  # a group of its own


def test_a_session_s_line_in_another_cwd(fb: Forkbox) -> None:
    with fb.create(timeout_ms=30_000) as sb:
        sb.run("mkdir -p /work/sub && ln -s /work/sub /work/link")
        line = "pwd; env; echo \"$PWD\" \"${OLDPWD-unset}\"; tr '\\0' ' ' </proc/$$/cmdline"
        for cwd in ("/work/sub", "/work/link", "/tmp"):
            time.sleep(0.05)
            warm = sb.run(line, cwd=cwd)
            cold = sb.run(argv=["/bin/sh", "-c", line], stdin=b"", cwd=cwd)
            assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1], (cwd, warm, cold)
            assert warm.stdout.splitlines()[-1].startswith("/bin/sh -c . /"), warm
        for env in ENVS[:2]:
            time.sleep(0.05)
            warm = sb.run(line, cwd="/work/link", env=env)
            cold = sb.run(argv=["/bin/sh", "-c", line], stdin=b"", cwd="/work/link", env=env)
            assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1], (env, warm, cold)
            assert warm.stdout.splitlines()[-1].startswith("/bin/sh -c . /"), warm
        time.sleep(0.05)
        warm = sb.run("echo never", cwd="/no/such/dir")  # not a line for the warm shell: it stays
        cold = sb.run(argv=["/bin/sh", "-c", "echo never"], stdin=b"", cwd="/no/such/dir")
        assert (warm.stdout, warm.stderr, warm.exit_code, warm.exec_error) == (
            cold.stdout, cold.stderr, cold.exit_code, cold.exec_error), (warm, cold)
        assert warm.exit_code == 127 and "/no/such/dir" in warm.exec_error, warm
        assert sb.run("tr '\\0' ' ' </proc/$$/cmdline").stdout.startswith("/bin/sh -c . /")


def test_a_session_s_state_and_files_reach_its_warm_shell(fb: Forkbox) -> None:
    with fb.create(timeout_ms=30_000) as sb:
        sb.write_file("/tmp/data", b"from a file\n")
        assert sb.run("echo kept > /root/state").ok
        time.sleep(0.05)
        r = sb.run("cat /tmp/data /root/state")
        assert r.stdout == "from a file\nkept\n", r


def test_a_run_that_kills_the_session_s_warm_shell_leaves_the_next_line_served(fb: Forkbox) -> None:
    with fb.create(timeout_ms=30_000) as sb:
        time.sleep(0.05)
        r = sb.run("kill -9 -1; echo killed the rest")  # the next warm shell too
        assert r.ok and r.stdout == "killed the rest\n", r
        for i in range(3):
            time.sleep(0.05)
            r = sb.run(f"echo line {i}")
            assert r.ok and r.stdout == f"line {i}\n", r
        time.sleep(0.05)
        assert sb.run("tr '\\0' ' ' </proc/$$/cmdline").stdout.startswith("/bin/sh -c . /")


def test_a_session_s_warm_shell_is_not_one_of_its_processes(fb: Forkbox) -> None:
    # pids=6: a line's shell and five children, as in a shell started for the run; beside a
    # run that is not a line, the idle warm shell does not count against it either.
    line = "p=; for i in 1 2 3 4 5; do sleep 5 & p=\"$p $!\"; done; echo started; kill $p"
    with fb.create(timeout_ms=30_000, pids=6) as sb:
        time.sleep(0.05)
        r = sb.run(line)
        assert r.ok and r.stdout == "started\n" and r.stderr == "", r
        r = sb.run(line, env={"A": "b"})
        assert r.ok and r.stdout == "started\n" and r.stderr == "", r
        r = sb.run(line.replace("1 2 3 4 5", "1 2 3 4 5 6 7 8"), env={"A": "b"})
        assert "Cannot fork" in r.stderr, r


def test_a_session_s_warm_shell_killed_or_stopped_by_another_run(fb: Forkbox) -> None:
    # A run that is not a line (another environment) runs beside the idle warm shell: when
    # it kills everyone else, the next line runs in a shell started for it, on the same
    # pipes; when it stops everyone, the warm shell is continued for its line.
    with fb.create(timeout_ms=30_000) as sb:
        for i in range(5):
            time.sleep(0.05)
            r = sb.run("kill -9 -1; echo killed", env={"A": "b"})
            assert r.ok and r.stdout == "killed\n", r
            r = sb.run(f"echo line {i}")  # at once: the kill may not be reaped yet
            assert r.ok and r.stdout == f"line {i}\n", r
        time.sleep(0.05)
        r = sb.run("kill -STOP -1; echo stopped", env={"A": "b"})
        assert r.ok and r.stdout == "stopped\n", r
        r = sb.run("echo continued")
        assert r.ok and r.stdout == "continued\n", r


def test_a_fork_s_children_get_warm_shells_of_their_own(fb: Forkbox) -> None:
    with fb.create(timeout_ms=30_000) as sb:
        assert sb.run("echo parent > /tmp/state").ok
        children = sb.fork(2)
        try:
            time.sleep(0.1)  # started once the fork has answered
            for child in children:
                r = child.run("cat /tmp/state; tr '\\0' ' ' </proc/$$/cmdline")
                assert r.ok and r.stdout.startswith("parent\n/bin/sh -c . /"), r
        finally:
            for child in children:
                child.close()
