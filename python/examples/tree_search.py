"""A tree search over sandbox states, as an agent would run one.

Each step forks the best state so far into one child per candidate action, runs the
candidates in parallel, scores every child, keeps the best and closes the rest. The
candidates here are toy shell commands and the score a Python script; an agent would
generate patches and run a test suite the same way.

    PYTHONPATH=python python3 python/examples/tree_search.py
"""

from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

from forkbox import Forkbox, Sandbox

# The state's score: the sum of the numbers in /work/moves (0 when there are none).
SCORE = b"""import os
path = "/work/moves"
print(sum(int(line) for line in open(path)) if os.path.exists(path) else 0)
"""


def score(sb: Sandbox) -> int:
    """The sandbox's score, or -1 when scoring fails (a broken state loses)."""
    r = sb.run("python3 /work/score.py", timeout_ms=10_000)
    return int(r.stdout) if r.exit_code == 0 and r.stdout.strip().lstrip("-").isdigit() else -1


def search(actions: Sequence[str], depth: int, fb: Optional[Forkbox] = None) -> Tuple[int, List[str]]:
    """Runs `depth` steps of `actions` from an empty state; returns the best score and the
    moves that reached it (read from the winning sandbox's own files)."""
    fb = fb or Forkbox()
    best = fb.create(ttl_s=600)
    try:
        best.write_file("/work/score.py", SCORE)
        with ThreadPoolExecutor(max_workers=len(actions)) as pool:
            for _ in range(depth):
                children = best.fork(len(actions))  # the parent goes on unchanged

                def attempt(pair: Tuple[Sandbox, str]) -> Tuple[int, Sandbox]:
                    child, action = pair
                    child.run(action, timeout_ms=10_000)
                    return score(child), child

                results = list(pool.map(attempt, zip(children, actions)))
                top = max(results, key=lambda result: result[0])[1]
                for _, child in results:
                    if child is not top:
                        child.close()
                best.close()
                best = top
        moves = best.read_file("/work/moves").decode().split()
        return score(best), moves
    finally:
        best.close()


if __name__ == "__main__":
    candidates = ["echo 3 >> /work/moves", "echo 7 >> /work/moves", "echo -2 >> /work/moves",
                  "rm -f /work/score.py"]  # a candidate that breaks the state
    best_score, moves = search(candidates, depth=3)
    print(f"best score {best_score} after moves {moves}")
