"""Did a change make ember faster? The same rows on two source trees, alternated, each against
the raw loop measured beside it.

A shared machine moves a row's ratio by ±15 % from one run of ``user_loops.py`` to the next,
more than most changes to ember's step are worth. Here each round starts one fresh process per
tree (``PYTHONPATH=TREE/src``; the order alternates), and each process runs the raw loop and
ember alternately over the user's torch ``DataLoader`` (the seed workload of ``user_loops.py``,
metrics in memory: ember's own cost, no disk) and the generator-fed tiny step. What a row
prints for each tree is the median of its ember/raw ratios and of its µs a step over the raw
loop; the last figure is the median of the rounds' after/before ratios of ember's seconds.

    python benchmarks/two_trees.py BEFORE_ROOT AFTER_ROOT [--rounds R]
    # e.g. git worktree add /tmp/before <commit>; python benchmarks/two_trees.py /tmp/before .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EPOCHS = 100  # 700 steps of the seed workload
STREAM_STEPS = 2000
PAIRS_IN_PROCESS = 3

CHILD = f"""
import json, torch
torch.set_num_threads(1)
import user_loops

loader = user_loops.torch_loader_runs({EPOCHS})
rows = {{
    "torch loader": (loader["raw"], loader["in memory"]),
    "streaming": tuple(user_loops.generator_runs({STREAM_STEPS}).values()),
}}
out = {{}}
for name, (raw, ember) in rows.items():
    raw(); ember()  # first-run costs, untimed
    times = [(raw(), ember()) for _ in range({PAIRS_IN_PROCESS})]
    out[name] = {{"raw": [a for a, _ in times], "ember": [b for _, b in times]}}
print(json.dumps(out))
"""


def measure(root: Path) -> dict[str, dict[str, list[float]]]:
    """One fresh process of ``root``'s ember: each row's raw and ember seconds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(HERE)]))
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    rows: dict[str, dict[str, list[float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path, help="the root of the tree before the change")
    parser.add_argument("after", type=Path, help="the root of the tree after it")
    parser.add_argument("--rounds", type=int, default=9, help="alternated rounds (default 9)")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"load average {os.getloadavg()[0]:.2f} before; {args.rounds} rounds")
    rounds: list[dict[str, dict[str, dict[str, list[float]]]]] = []
    for index in range(args.rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        rounds.append({name: measure(trees[name]) for name in order})
    for row in rounds[0]["before"]:
        steps = 7 * EPOCHS if row == "torch loader" else STREAM_STEPS
        parts = []
        for name in trees:
            pairs = [
                (raw, ember)
                for r in rounds
                for raw, ember in zip(r[name][row]["raw"], r[name][row]["ember"], strict=True)
            ]
            ratio = statistics.median(ember / raw for raw, ember in pairs)
            over = statistics.median((ember - raw) / steps * 1e6 for raw, ember in pairs)
            parts.append(f"{name} {ratio:.3f}x raw (+{over:.0f} µs a step)")
        change = statistics.median(
            statistics.median(r["after"][row]["ember"])
            / statistics.median(r["before"][row]["ember"])
            for r in rounds
        )
        print(f"{row}: {'; '.join(parts)}; after/before ember {change:.3f}x")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
