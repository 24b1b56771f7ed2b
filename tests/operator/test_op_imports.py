"""The operator never imports torch or pyarrow (its image has neither)."""
from __future__ import annotations

import pkgutil
import subprocess
import sys

import grappa_operator


def test_no_torch_in_any_operator_module():
    names = [f"grappa_operator.{m.name}" for m in pkgutil.iter_modules(grappa_operator.__path__)]
    assert "grappa_operator.handlers" in names and len(names) >= 10
    code = ("import importlib, sys\n"
            f"for n in {names!r}: importlib.import_module(n)\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.') "
            "or m.startswith('torch_geometric') or m == 'pyarrow' or m.startswith('pyarrow.'))\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_no_module_named_operator():
    assert not any(m.name == "operator" for m in pkgutil.iter_modules(grappa_operator.__path__))
