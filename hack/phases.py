"""Prints the phases of one `make test` (hack/test.sh) as a timeline: when each started, how
long it took, and which ran side by side, so that a cold run explains itself.
usage: python3 hack/phases.py PHASES_FILE T0"""
import sys
import time
from pathlib import Path


def main(path: str, t0: str) -> None:
    rows = []
    for line in Path(path).read_text().splitlines():
        name, start, seconds, status = line.split()
        rows.append((int(start), int(seconds), name, status))
    if not rows:
        return
    rows.sort()
    total = int(time.time()) - int(t0)
    width = 48  # characters for the whole run in the bar column
    print(f"\nmake test: phases, seconds from the start ({total} s = {total / 60:.1f} min in all)", file=sys.stderr)
    print(f"  {'phase':<26} {'start':>6} {'took':>6} {'end':>6}  status    timeline", file=sys.stderr)
    for start, seconds, name, status in rows:
        a = round(start / max(total, 1) * width)
        b = max(a + 1, round((start + seconds) / max(total, 1) * width))
        bar = " " * a + "#" * (b - a)
        print(f"  {name:<26} {start:>6} {seconds:>6} {start + seconds:>6}  {status:<9} |{bar:<{width}}|",
              file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:3])
