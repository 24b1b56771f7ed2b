"""The CPU each test uses, so that the loop's cost is seen where it is spent: on two cores that
also build the bed, a test's wall time mostly says how busy the machine was, its CPU seconds what
it costs everyone else.

A test's CPU: user + system seconds of its pytest process and of every process it started and
reaped (a launcher reaps its ranks, so theirs are counted too), setup and teardown included. It
goes into the JUnit XML as the test's `cpu` property; what runs in the cluster's pods is not a
test's child and is not counted here (hack/test.sh records the cluster's node as a whole).
  python tests/cpu_use.py <junit.xml> [N]   the N costliest test files and tests
"""
from __future__ import annotations

import resource
import sys
import xml.etree.ElementTree as ET
from collections import Counter

PROPERTY = "cpu"


def now() -> float:
    """CPU seconds so far of this process and its reaped children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def of_cases(junit_xml: str) -> dict[tuple[str, str], float]:
    """(classname, name) -> CPU seconds, for the test cases that carry the property."""
    out = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == PROPERTY:
                out[(case.get("classname", ""), case.get("name", ""))] = float(prop.get("value", 0))
    return out


def report(junit_xml: str, top: int = 15) -> str:
    cases = of_cases(junit_xml)
    files = Counter()
    for (classname, _), cpu in cases.items():
        files[classname] += cpu
    lines = [f"CPU seconds of {len(cases)} tests: {sum(cases.values()):,.0f} in all", "", "by file:"]
    lines += [f"  {cpu:8.1f}  {name}" for name, cpu in files.most_common(top)]
    lines += ["", "by test:"]
    lines += [f"  {cpu:8.1f}  {c}::{n}" for (c, n), cpu in sorted(cases.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 3:
        sys.exit("usage: python tests/cpu_use.py <junit.xml> [N]")
    print(report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 15))
