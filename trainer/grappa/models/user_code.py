"""The user's model code: where it is found, its factory, its identity, and its own line in an error.

`model.custom.codePath` puts the code on the import path first: a `.py` file's folder (the module
is the file's stem), a package folder's parent (the package is the folder's name), or a folder of
modules itself. Without it the module must be installed (an image built FROM the trainer image).

The factory is `module:qualname`; an import that fails, a name that is missing, or a model whose
forward fails ends the job with `ModelCodeError` (exit 3, `CannotRun` in a GrappaJob), naming the
factory and the deepest frame of the user's own code (file, line, source text).

The code's identity, recorded in the model file and every checkpoint (model_file.py):
`{"module", "file", "sha256"}` where sha256 hashes the module's file, or, for a package folder
given as codePath, every `.py` file under it (relative path and bytes, sorted); plus
`{"distribution", "version"}` when the module belongs to an installed distribution. Loading
compares the version when there is one, else the sha256.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

GRAPPA_DIR = Path(__file__).resolve().parents[1]


class ModelCodeError(RuntimeError):
    """The user's model code cannot run here: it does not import, has no such factory, fails in its
    forward, or differs from the code a model file was trained with. Exit code 3."""


def code_root(code_path: Optional[str]) -> Optional[Path]:
    """The folder that goes on sys.path for `code_path`, or None when none is given."""
    if not code_path:
        return None
    p = Path(code_path).expanduser().resolve()
    if p.is_file():
        return p.parent
    return p.parent if (p / "__init__.py").is_file() else p


def add_code_path(code_path: Optional[str], factory: str) -> None:
    """Put `code_path` first on the import path; refuse one that does not exist."""
    if not code_path:
        return
    p = Path(code_path).expanduser()
    if not p.exists():
        raise ModelCodeError(
            f"model.custom.codePath {code_path} does not exist (factory {factory}): put the model's "
            ".py file or package folder there (on Kubernetes: on the job's volume, a relative path "
            "being under storage.mountPath), or install the module in the image and remove codePath")
    if p.is_file() and p.suffix != ".py":
        raise ModelCodeError(f"model.custom.codePath {code_path} is not a .py file or a folder "
                             f"(factory {factory}): give the module's .py file or its package folder")
    root = str(code_root(code_path))
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)
    importlib.invalidate_caches()


def _inside(path: str, roots: list[Path]) -> bool:
    try:
        p = Path(path).resolve()
    except (OSError, ValueError):
        return False
    return any(p == r or r in p.parents for r in roots)


def _foreign_roots() -> list[Path]:
    """Where code that is not the user's lives: the interpreter's libraries and Grappa itself."""
    paths = sysconfig.get_paths()
    roots = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return [*roots, GRAPPA_DIR]


def user_line(err: BaseException, roots: list[Path]) -> str:
    """'FILE, line N, in FUNCTION: `SOURCE`' of the deepest frame in `roots` (the user's code), or
    else of the deepest frame outside the libraries and Grappa; '' when there is none."""
    if isinstance(err, SyntaxError) and err.filename:
        text = (err.text or "").strip()
        return f"{err.filename}, line {err.lineno}" + (f": `{text}`" if text else "")
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if roots and _inside(f.filename, roots)]
    if not mine:
        foreign = _foreign_roots()
        mine = [f for f in frames if not f.filename.startswith("<") and not _inside(f.filename, foreign)]
    if not mine:
        return ""
    f = mine[-1]
    where = f"{f.filename}, line {f.lineno}, in {f.name}"
    return f"{where}: `{f.line.strip()}`" if f.line else where


def failure(factory: str, what: str, err: BaseException, roots: list[Path]) -> ModelCodeError:
    """One line: the factory, what failed, the error and the user's own line, and the fix."""
    detail = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}".rstrip(": ")
    line = user_line(err, roots)
    at = f" at {line}" if line else ""
    return ModelCodeError(f"model.custom.factory {factory}: {what} failed: {detail}{at}; fix the "
                          "model's code there and run the job again")


def module_roots(module_name: str, code_path: Optional[str]) -> list[Path]:
    """The folders holding the user's code for `module_name` (before or after it imports)."""
    roots = []
    if code_path:
        roots.append(Path(code_path).expanduser().resolve())
    try:
        spec = importlib.util.find_spec(module_name.split(".")[0])
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if origin and origin not in ("built-in", "frozen"):
        top = Path(origin).resolve()
        roots.append(top.parent if top.name == "__init__.py" else top)
    return roots


def load_factory(factory: str, code_path: Optional[str] = None) -> tuple[Callable[..., Any], Any]:
    """(the factory callable, its module), importing the module from `code_path` if given."""
    module_name, _, qualname = factory.partition(":")
    add_code_path(code_path, factory)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name) and err.name.split(".")[0] == module_name.split(".")[0]:
            where = (f"in model.custom.codePath {code_path} (on the import path as {code_root(code_path)})"
                     if code_path else "among the installed packages")
            raise ModelCodeError(
                f"model.custom.factory {factory}: module {err.name} is not {where}: give the folder "
                "or .py file holding it as model.custom.codePath, or install it in the trainer "
                "image (README, \"Bring your own model\")") from None
        raise failure(factory, f"importing {module_name}", err, module_roots(module_name, code_path)) from None
    except Exception as err:  # the module's own code raised (or a SyntaxError)
        raise failure(factory, f"importing {module_name}", err, module_roots(module_name, code_path)) from None
    if code_path and getattr(module, "__file__", None):
        root = Path(code_path).expanduser().resolve()
        if not _inside(module.__file__, [root]):
            raise ModelCodeError(
                f"model.custom.factory {factory}: module {module_name} was imported from "
                f"{module.__file__}, not from model.custom.codePath {code_path}: another module of "
                "that name comes first; rename your module or remove the other one")
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            own = sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                         and getattr(v, "__module__", None) == module_name)
            close = difflib.get_close_matches(qualname, own, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ModelCodeError(
                f"model.custom.factory {factory}: {module_name} ({getattr(module, '__file__', '?')}) "
                f"has no {qualname!r}; {hint}it defines {', '.join(own[:12]) or 'no functions or classes'}: "
                "name one of them after the ':'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelCodeError(f"model.custom.factory {factory}: {qualname} is a "
                             f"{type(obj).__name__}, not a function or class that returns the model")
    return obj, module


def _sha256_of(path: Path) -> str:
    """A file's sha256; a folder's over every .py file under it (relative path and bytes)."""
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.read_bytes())
        return h.hexdigest()
    for f in sorted(path.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(f.relative_to(path).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _distribution(module_name: str) -> Optional[tuple[str, str]]:
    top = module_name.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top) or []
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def code_identity(module: Any, code_path: Optional[str] = None) -> dict[str, Any]:
    """What identifies the code a model was built from (recorded in the model file)."""
    name = module.__name__
    out: dict[str, Any] = {"module": name}
    file = getattr(module, "__file__", None)
    hashed: Optional[Path] = None
    if code_path and Path(code_path).expanduser().is_dir() and (Path(code_path).expanduser() / "__init__.py").is_file():
        hashed = Path(code_path).expanduser().resolve()  # a package: all of it
    elif file:
        hashed = Path(file).resolve()
    if hashed is not None:
        out.update(file=str(hashed), sha256=_sha256_of(hashed))
    if name.split(".")[0] == "grappa":
        from grappa.util.version import __version__
        out.update(distribution="grappa", version=__version__)
    elif not code_path:
        dist = _distribution(name)
        if dist:
            out.update(distribution=dist[0], version=dist[1])
    return out


def check_identity(recorded: dict[str, Any], now: dict[str, Any], what: str, how: str) -> None:
    """Refuse code whose identity `now` differs from `recorded` (a model file's or checkpoint's),
    naming the module and how to provide the right code."""
    name = recorded.get("module", now.get("module"))
    if recorded.get("distribution") and recorded.get("version") is not None:
        if (now.get("distribution"), now.get("version")) != (recorded["distribution"], recorded["version"]):
            have = (f"{now['distribution']} {now['version']}" if now.get("version") is not None
                    else f"{now.get('file', name)} (not an installed distribution)")
            raise ModelCodeError(
                f"{what} was trained with module {name} of {recorded['distribution']} "
                f"{recorded['version']}, but here it is {have}: install "
                f"{recorded['distribution']}=={recorded['version']} {how}")
    elif recorded.get("sha256") and recorded["sha256"] != now.get("sha256"):
        raise ModelCodeError(
            f"{what} was trained with module {name} from {recorded.get('file')} "
            f"(sha256 {recorded['sha256'][:12]}...), but {now.get('file')} differs (sha256 "
            f"{str(now.get('sha256'))[:12]}...): put the original code back {how}")


def describe_callable(obj: Any) -> tuple[str, Optional[str]]:
    """(factory string, codePath) that let another process import `obj` (a function or class
    defined at the top level of a module): the module's file, or its top package's folder, unless
    it is installed."""
    module_name, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module_name or "<locals>" in qualname or "<lambda>" in qualname:
        raise ModelCodeError(f"model factory {obj!r}: define it at the top level of a module "
                             "(a function or class), so the training processes can import it")
    if module_name == "__main__":
        raise ModelCodeError(
            f"model factory {qualname} is defined in __main__ (a notebook or a script): the "
            "training processes cannot import it; put it in a .py file (in a notebook: "
            "%%writefile my_model.py), import it from there and pass that")
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    code_path = None
    if file and not _inside(file, _foreign_roots()[:-1]) and not module_name.startswith("grappa."):
        top = module_name.split(".")[0]
        path = Path(file).resolve()
        if top == module_name:
            code_path = str(path if path.name != "__init__.py" else path.parent)
        else:  # the top package's folder: one folder up per dotted part
            pkg = path.parent
            for _ in range(module_name.count(".") - (0 if path.name == "__init__.py" else 1)):
                pkg = pkg.parent
            code_path = str(pkg)
    return f"{module_name}:{qualname}", code_path


def environment_code_path() -> Optional[str]:
    """$GRAPPA_CODE_PATH: where a predict job finds a model's code instead of the recorded path."""
    return os.environ.get("GRAPPA_CODE_PATH") or None
