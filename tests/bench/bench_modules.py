"""bench/ is a folder of scripts, not a package: load one of them as a module by name."""
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # the scripts import each other by these names
    spec.loader.exec_module(mod)
    return mod
