"""Prints the phases of one `make test` (hack/test.sh) as a timeline: when each started, how
long it took, and which ran side by side, so that a cold run explains itself; with --markdown,
the figures of recorded runs (their phases files) as one table, computed, never typed.
usage: python3 hack/phases.py PHASES_FILE T0
       python3 hack/phases.py --markdown PHASES_FILE...   (a run's name: its file's stem)"""
import sys
import time
from pathlib import Path


def main(path: str, t0: str) -> None:
    rows, cpu = [], {}
    for line in Path(path).read_text().splitlines():
        name, start, seconds, status = line.split()
        if status == CORE_S:
            cpu[name] = int(seconds)
        else:
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
    if cpu:
        print(f"  CPU: {_cpu(cpu)}", file=sys.stderr)


CORE_S = "core-s"  # rows of hack/cpu_sample.py: core-seconds in the `took` column


def _cpu(cpu: dict[str, int]) -> str:
    busy, available = cpu.get("cpu-busy", 0), max(cpu.get("cpu-available", 0), 1)
    out = (f"busy {busy / available:.0%} of the run ({busy:,} of {available:,} core-s); the bed's containers "
           f"(the cluster's node and its pods, image builds) {cpu.get('cpu-containers', 0):,} core-s")
    if "cpu-pods-ended" in cpu:  # runs since the split was recorded
        out += (f": pods that ended during the run {cpu['cpu-pods-ended']:,}, pods that lasted "
                f"{cpu['cpu-pods-lasting']:,}, the rest {cpu['cpu-containers-other']:,}")
    return out


def _read(path: str) -> dict[str, tuple[int, int, str]]:
    out = {}
    for line in Path(path).read_text().splitlines():
        name, start, seconds, status = line.split()
        out[name] = (int(start), int(seconds), status)
    return out


def _min(seconds: int | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min ({seconds:,} s)"


def markdown(paths: list[str]) -> str:
    """One row a run: its result and wall time (the `make-test` row hack/test.sh appends; a file
    without it, the last phase's end), pytest's time, when the cluster and Kueue were ready, when
    the last unit lane and the last lane of all ended (rows `lane-*` of tests/lanes.py), and the CPU
    it used (rows `cpu-*` of hack/cpu_sample.py, in runs that have them)."""
    rows = ["<!-- made by `make loop-figures` from docs/results/test-loop/*.txt (hack/phases.py): do not edit -->",
            "# `make test`, cold and warm: the recorded runs", "",
            "Each row is one run's phases file (`~/.cache/grappa/kind-bed/logs/phases.txt` after it), named "
            "`<cold|warm>-<commit>`; how the runs were made: docs/testing.md.", "",
            "| run | result | make test | pytest | cluster ready | Kueue ready | unit lanes ended | last lane ended | CPU |",
            "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        p = _read(path)
        end = {name: start + took for name, (start, took, _) in p.items()}
        total = p["make-test"][1] if "make-test" in p else max(end.values())
        result = p["make-test"][2] if "make-test" in p else p.get("command", (0, 0, "?"))[2]
        lanes = [n for n in p if n.startswith("lane-")]
        unit = [end[n] for n in lanes if "unit" in n]
        rows.append(f"| {Path(path).stem} | {'passed' if result == 'ok' else result} | {_min(total)} | "
                    f"{_min(p['command'][1] if 'command' in p else None)} | {_min(end.get('cluster'))} | "
                    f"{_min(end.get('kueue-install'))} | {_min(max(unit) if unit else None)} | "
                    f"{_min(max(end[n] for n in lanes) if lanes else None)} | "
                    f"{_cpu({n: took for n, (_, took, st) in p.items() if st == CORE_S}) if 'cpu-busy' in p else '-'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--markdown"]:
        sys.stdout.write(markdown(sys.argv[2:]))
    else:
        main(*sys.argv[1:3])
