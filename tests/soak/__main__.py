"""``python -m soak`` (with ``tests/`` on ``sys.path``; ``make soak DURATION=30m SEED=1``).

Exit status 1 on any violation; the seed and the schedule are printed first, and again
after a failure; ``--seed`` replays the same schedule.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from soak.bad_input import BUILT_IN, from_module
from soak.checker import check
from soak.history import History
from soak.runner import Settings, run_standalone


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--duration", type=duration, default=60.0, help="e.g. 90s, 30m")
    parser.add_argument("--mean-gap", type=float, default=10.0, help="seconds between faults")
    parser.add_argument("--drain", type=float, default=120.0, help="seconds to catch up")
    parser.add_argument("--hostile", action="append", default=[], help="module:attr")
    parser.add_argument("--history", type=Path, default=None, help="write the history here")
    parser.add_argument("--check", type=Path, default=None, help="only check a history file")
    args = parser.parse_args(argv)
    if args.check is not None:
        report = check(History.load(args.check))
        print(report.format())
        return 0 if report.ok else 1
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    actions = list(BUILT_IN)
    for spec in args.hostile:
        actions += from_module(spec)
    settings = Settings(
        seed, args.duration, args.mean_gap, args.drain, actions=actions, history_out=args.history
    )
    report = run_standalone(settings)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
