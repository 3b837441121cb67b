"""The SDK's reply parser on random and mutated daemon replies (hypothesis, derandomized).

Whatever the daemon sends, a run ends in a RunResult (or the info dict) or in a
ForkboxError; a reply that breaks the protocol (not a final '!' error object) gives a
ProtocolError. Never another exception type, and never a hang. The parser under test is
Exchange.feed/result with RunResult.from_reply and error_from_reply, as both clients use them.
"""

import json
import signal
from contextlib import contextmanager
from typing import Any, Iterator, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkbox import ProtocolError, RunResult
from forkbox._protocol import Exchange
from forkbox.errors import ForkboxError

# Deterministic (CI runs the same inputs every time) and with no example database in the
# working tree. max_examples keeps the whole file to a few seconds.
FUZZ = settings(
    derandomize=True,
    database=None,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

HANG_SECONDS = 5

# Integers beyond a float's range too (the SDK's defect below, fixed).
MAX_INT = 10**400


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"the reply parser took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def final_error_object(messages: List[bytes]) -> bool:
    """True when the exchange ends in a '!' message carrying a JSON object: the one case
    where the daemon's own error (InvalidRequest, SandboxError, SandboxBusy) is raised."""
    for m in messages:
        if not m:
            return False
        if m[0] in b"12":
            continue
        if m[0] != ord("!"):
            return False
        try:
            return isinstance(json.loads(m[1:].decode("utf-8")), dict)
        except ValueError:
            return False
    return False


def outcome(messages: List[bytes], verb: str = "run") -> Any:
    """Feeds the messages as a client receives them and reads the result. Returns the
    result or the ForkboxError raised; any other exception propagates and fails the test."""
    ex = Exchange(verb)
    try:
        with time_limit(HANG_SECONDS):
            for m in messages:
                if ex.feed(m):
                    break
            r = ex.result()
            if isinstance(r, RunResult):
                # What a caller reads of a result.
                repr(r)
                _ = (r.stdout, r.stderr, r.ok, r.stdout_truncated, r.stderr_truncated)
            return r
    except ForkboxError as e:
        str(e)
        if not isinstance(e, ProtocolError):
            assert final_error_object(messages), f"{type(e).__name__} for {messages!r}"
        return e


# ---- generated replies ----

json_scalars = st.none() | st.booleans() | st.integers(-MAX_INT, MAX_INT) | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
RESULT_KEYS = ["exit_code", "signal", "timed_out", "oom_killed", "duration_ms", "stdout_bytes", "stderr_bytes",
               "stdout_dropped", "stderr_dropped", "cpu_ms", "peak_memory_bytes", "limits", "exec_error"]
ERROR_KEYS = ["error", "message"]
objects = st.dictionaries(st.sampled_from(RESULT_KEYS + ERROR_KEYS) | st.text(max_size=8), json_values, max_size=10)
data_messages = st.builds(lambda tag, body: tag + body, st.sampled_from([b"1", b"2"]), st.binary(max_size=64))


def encode(obj: Any) -> bytes:
    # allow_nan: Python's json (the SDK's decoder) reads NaN and Infinity, so a daemon bug could send them.
    return json.dumps(obj, allow_nan=True).encode("utf-8")


final_messages = st.builds(lambda tag, obj: tag + encode(obj), st.sampled_from([b"X", b"!"]), objects | json_values)
exchanges = st.builds(lambda data, final, extra: data + [final] + extra,
                      st.lists(data_messages, max_size=3), final_messages, st.lists(st.binary(max_size=16), max_size=2))


@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=5), st.sampled_from(["run", "info"]))
def test_random_bytes_give_a_result_or_a_forkbox_error(messages: List[bytes], verb: str) -> None:
    outcome(messages, verb)


@FUZZ
@given(exchanges, st.sampled_from(["run", "info"]))
def test_replies_with_any_json_give_a_result_or_a_forkbox_error(messages: List[bytes], verb: str) -> None:
    outcome(messages, verb)


# ---- mutated real replies ----

GOOD_RESULT = (
    b'X{"exit_code":0,"signal":null,"timed_out":false,"oom_killed":false,"duration_ms":1.25,'
    b'"stdout_bytes":3,"stderr_bytes":0,"stdout_dropped":0,"stderr_dropped":0,"cpu_ms":0.5,'
    b'"peak_memory_bytes":1048576,"limits":{"memory":"cgroup","pids":"cgroup","cpu":"none"},"exec_error":null}'
)
GOOD_ERROR = b'!{"error":"invalid_request","message":"run: \\"argv\\" must be a non-empty array of strings"}'

mutation = st.tuples(st.sampled_from(["flip", "insert", "delete", "truncate", "swap"]),
                     st.integers(0, 1 << 16), st.integers(0, 255))


def mutate(data: bytes, ops: List[Any]) -> bytes:
    b = bytearray(data)
    for op, pos, byte in ops:
        i = pos % (len(b) + 1)
        if op == "flip" and b:
            b[i % len(b)] ^= 1 << (byte % 8)
        elif op == "insert":
            b[i:i] = bytes([byte])
        elif op == "delete" and b:
            del b[i % len(b)]
        elif op == "truncate":
            del b[i:]
        elif op == "swap" and len(b) > 1:
            j = byte % len(b)
            k = i % len(b)
            b[j], b[k] = b[k], b[j]
    return bytes(b)


@FUZZ
@given(st.sampled_from([GOOD_RESULT, GOOD_ERROR]), st.lists(mutation, min_size=1, max_size=8),
       st.booleans())
def test_mutated_replies_give_a_result_or_a_forkbox_error(reply: bytes, ops: List[Any], with_output: bool) -> None:
    messages = [b"1hi\n"] if with_output else []
    outcome(messages + [mutate(reply, ops)])


def test_the_unmutated_replies_decode():
    r = outcome([b"1hi\n", GOOD_RESULT])
    assert isinstance(r, RunResult) and r.exit_code == 0 and r.stdout == "hi\n"
    assert type(outcome([GOOD_ERROR])).__name__ == "InvalidRequest"


# ---- defects the fuzzing found in the SDK, each the smallest input, fixed since ----


def test_a_huge_integer_duration_is_a_protocol_error():
    assert isinstance(outcome([b'X{"exit_code":0,"duration_ms":1' + b"0" * 400 + b"}"]), ProtocolError)


def test_deeply_nested_json_is_a_protocol_error():
    assert isinstance(outcome([b"X" + b"[" * 5000]), ProtocolError)
