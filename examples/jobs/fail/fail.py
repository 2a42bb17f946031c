"""A job that fails deterministically, for testing retries and failure reporting.

Usage::

    python examples/jobs/fail/fail.py                      # fails at once with exit code 3
    python examples/jobs/fail/fail.py --after-steps 5      # prints 5 progress steps first
    python examples/jobs/fail/fail.py --exit-code 7 --step-seconds 0.5

Output: ``start`` and ``step N`` lines on stdout, then ``failing on purpose after N steps`` on
stdout and ``error: simulated failure (exit code 3)`` on stderr, then it exits with the code
(default 3). It uses only the standard library, so it starts in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after-steps", type=int, default=0, help="progress steps before failing")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step")
    parser.add_argument("--exit-code", type=int, default=3)
    args = parser.parse_args(argv)

    print(f"start after_steps={args.after_steps}", flush=True)
    for step in range(1, args.after_steps + 1):
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
        print(f"step {step}", flush=True)
    print(f"failing on purpose after {args.after_steps} steps", flush=True)
    print(f"error: simulated failure (exit code {args.exit_code})", file=sys.stderr, flush=True)
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
