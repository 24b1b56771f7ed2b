"""Prints the pinned requirements of one image: the core dependencies plus one extra from
pyproject.toml, each replaced by its exact pin from hack/requirements.lock (and the build
backend, so `pip install --no-deps .` works offline). Used by the Dockerfile, standard library only.

    python image-requirements.py pyproject.toml requirements.lock operator
"""

import re
import sys
import tomllib


def name_of(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def main(pyproject: str, lock: str, extra: str) -> None:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)
    pins = {}
    with open(lock) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                pins[name_of(line)] = line
    extras = project["project"]["optional-dependencies"]
    if extra not in extras:
        sys.exit(f"image-requirements: no extra [{extra}] in {pyproject}; have {sorted(extras)}")
    wanted = project["project"]["dependencies"] + extras[extra] + project["build-system"]["requires"]
    missing = [r for r in wanted if name_of(r) not in pins]
    if missing:
        sys.exit(f"image-requirements: {missing} not pinned in {lock}; add them there")
    for name in dict.fromkeys(name_of(r) for r in wanted):
        print(pins[name])


if __name__ == "__main__":
    main(*sys.argv[1:])
