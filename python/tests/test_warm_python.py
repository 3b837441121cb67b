"""Warm Python against a real ``forkbox daemon`` (as root): ``Forkbox.run_python`` runs code
in a fresh sandbox whose interpreter started before the call; ``Sandbox.run_python`` is
``python3 -c`` in a session."""

import asyncio

import pytest

from forkbox import AsyncForkbox, Forkbox, InvalidRequest, SandboxError

SNIPPET = "import math; print(math.factorial(20))"


def test_the_snippet_and_python3s_own_semantics(fb: Forkbox) -> None:
    r = fb.run_python(SNIPPET)
    assert (r.exit_code, r.stdout) == (0, "2432902008176640000\n")
    r = fb.run_python("import sys; print(sys.argv, __name__)")
    assert r.stdout == "['-c'] __main__\n"
    r = fb.run_python("x = 1\nraise ValueError('no')")
    assert r.exit_code == 1
    assert 'File "<string>", line 2, in <module>' in r.stderr
    assert r.stderr.rstrip().endswith("ValueError: no")
    assert "exec(compile" not in r.stderr
    assert fb.run_python("import sys; sys.exit(5)").exit_code == 5
    assert fb.run_python("raise SystemExit('bye')").stderr == "bye\n"


def test_each_call_is_a_sandbox_of_its_own(fb: Forkbox) -> None:
    fb.run_python("import json; json.leak = 1; open('/tmp/left', 'w').write('x')", preload=["json"])
    r = fb.run_python("import json, os; print(hasattr(json, 'leak'), os.path.exists('/tmp/left'))", preload=["json"])
    assert r.stdout == "False False\n"
    # Not the host's processes, nor another call's.
    r = fb.run_python("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.stdout == "[1, 2]\n"


def test_stdin_env_cwd_timeout_and_limits(fb: Forkbox) -> None:
    r = fb.run_python("import os, sys; print(sys.stdin.read(), os.getcwd(), os.environ['X'])",
                      stdin=b"in", env={"X": "42"}, cwd="/tmp")
    assert r.stdout == "in /tmp 42\n"
    r = fb.run_python("while True: pass", timeout_ms=300)
    assert (r.timed_out, r.exit_code) == (True, 124)
    # The memory limit holds for the warm interpreter too.
    r = fb.run_python("b = bytearray(400 << 20); print('allocated')", memory_mb=64)
    assert r.exit_code != 0 and "allocated" not in r.stdout


def test_cpu_ms_leaves_out_the_interpreters_start_up(fb: Forkbox) -> None:
    cold = fb.run(argv=["python3", "-c", "pass"])
    warm = fb.run_python("pass")
    assert cold.cpu_ms is not None and warm.cpu_ms is not None
    assert warm.cpu_ms < cold.cpu_ms


def test_a_preload_that_fails_is_named(fb: Forkbox) -> None:
    with pytest.raises(SandboxError) as e:
        fb.run_python("print(1)", preload=["no_such_module_for_forkbox"])
    assert "no_such_module_for_forkbox" in str(e.value)


def test_bad_arguments_are_refused_before_sending(fb: Forkbox) -> None:
    with pytest.raises(InvalidRequest):
        fb.run_python(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        fb.run_python("a\0b")
    with pytest.raises(InvalidRequest):
        fb.run_python("print(1)", preload=["os; import x"])
    with pytest.raises(InvalidRequest):
        fb.run_python("print(1)", preload="json")  # type: ignore[arg-type]


def test_async_and_in_a_session(fb: Forkbox) -> None:
    client = AsyncForkbox(socket=fb.socket_path, autostart=False)

    async def both() -> list:
        return list(await asyncio.gather(*(client.run_python("print(%d)" % i) for i in range(4))))

    assert [r.stdout for r in asyncio.run(both())] == ["0\n", "1\n", "2\n", "3\n"]
    with fb.create() as sb:
        sb.write_file("/tmp/m.py", b"X = 7\n")
        r = sb.run_python("import sys; sys.path.insert(0, '/tmp'); import m; print(m.X)")
        assert r.stdout == "7\n"


def test_a_sessions_warm_python_forks_per_call(fb: Forkbox) -> None:
    with fb.create(timeout_ms=10_000) as sb:
        # Files stay between calls, the interpreter's state does not.
        assert sb.run_python("import json; json.leak = 1; g = 5; open('/tmp/k', 'w').write('1')",
                             preload=["json"]).exit_code == 0
        r = sb.run_python("import json, os; print(os.path.exists('/tmp/k'), hasattr(json, 'leak'), 'g' in globals())",
                          preload=["json"])
        assert r.stdout == "True False False\n"
        assert sb.run_python("import sys; sys.exit(3)").exit_code == 3
        r = sb.run_python("1/0")
        assert r.exit_code == 1 and r.stderr.endswith("ZeroDivisionError: division by zero\n")
        # Its deadline kills the call's process group; the session and its warm Python go on.
        r = sb.run_python("import os; os.fork(); import time; time.sleep(60)", timeout_ms=300)
        assert (r.timed_out, r.exit_code) == (True, 124)
        assert sb.run_python("print('after')").stdout == "after\n"
        r = sb.run_python("import os, sys; print(sys.stdin.read(), os.getcwd(), os.environ['Y'])",
                          stdin="in", cwd="/tmp", env={"Y": "y"})
        assert r.stdout == "in /tmp y\n"
        # A warm Python that is killed is started again by the next call.
        warm = sb.run_python("import os; print(os.getppid())").stdout.strip()
        sb.run("kill -KILL %s" % warm)
        again = sb.run_python("import os; print(os.getppid())").stdout.strip()
        assert again.isdigit() and again != warm
        r = sb.run_python("print(1)", preload=["no_such_module_for_forkbox"])
        assert r.exit_code != 0 and "no_such_module_for_forkbox" in r.stderr
        # Forked children do not share their parent's warm Python (processes are not forked).
        (kid,) = sb.fork(1)
        with kid:
            assert kid.run_python("print(open('/tmp/k').read())").stdout == "1\n"
