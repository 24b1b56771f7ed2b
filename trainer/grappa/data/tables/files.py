"""The files of a table and reading them in record batches, each row known by file and row.

A table is one file, several, a folder (its .parquet / .pq / .csv / .csv.gz files) or glob
patterns, in Parquet or CSV with a header line; its rows are those of its files in sorted path
order. Reading goes through pyarrow's datasets (Parquet, CSV) one file at a time, a bounded batch
of rows at a time, only the columns asked for: no table is ever read whole.
"""
from __future__ import annotations

import fnmatch
import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from grappa.data.errors import DatasetError

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".gz": "csv"}
BATCH_ROWS = 1 << 18


def release_arrow_memory() -> None:
    """Hand Arrow's freed pages back to the system. Its allocator (mimalloc) keeps them for
    reuse: after staging 30M edges the prepare process held 537 MB with no Arrow buffer alive,
    184 MB after this, through the whole store pass that follows."""
    pa.default_memory_pool().release_unused()


def _format_of(path: Path) -> Optional[str]:
    name = path.name.lower()
    if name.endswith(".csv.gz") or name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    return None


def resolve(folder: Path, specs: list[str], what: str) -> list[Path]:
    """The files of a table: each spec a file, a folder or a glob pattern (relative to `folder`),
    in sorted path order, each file once."""
    out: list[Path] = []
    for spec in specs:
        path = Path(spec) if Path(spec).is_absolute() else folder / spec
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and _format_of(p))
            if not found:
                raise DatasetError(f"{what}: folder {path} holds no .parquet, .pq, .csv or .csv.gz file")
        elif any(c in spec for c in "*?["):
            found = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
            if not found:
                raise DatasetError(f"{what}: no file matches {path}")
        elif path.is_file():
            found = [path]
        else:
            raise DatasetError(f"{what}: {path} does not exist (paths are relative to dataset.path, "
                               f"{folder})")
        out += found
    return list(dict.fromkeys(out))


@dataclass
class Batch:
    """A record batch of one file: rows [first_row, first_row + num_rows) of `file`."""

    file: str
    first_row: int
    data: pa.RecordBatch

    def column(self, name: str) -> pa.Array:
        return self.data.column(name)

    def where(self, i: int) -> str:
        return f"{self.file} row {self.first_row + int(i)}"


class Table:
    """A table's files, their format and column names (from the first file's schema; every file
    must have the columns read). Picklable: files are opened per read."""

    def __init__(self, folder: Path, specs: list[str], fmt: Optional[str], what: str,
                 string_columns: tuple[str, ...] = ()) -> None:
        self.what = what
        self.files = resolve(folder, specs, what)
        formats = {fmt or _format_of(p) for p in self.files}
        if None in formats:
            bad = next(p for p in self.files if _format_of(p) is None)
            raise DatasetError(f"{what}: cannot tell the format of {bad} from its name; set "
                               f"{what}.format: parquet or csv")
        if len(formats) > 1:
            raise DatasetError(f"{what}: its files mix Parquet and CSV ({', '.join(map(str, self.files[:4]))}); "
                               "give one format per table")
        self.format = formats.pop()
        self.string_columns = string_columns  # CSV: read as text whatever they look like (ids)
        self.schema = self._schema(self.files[0])

    def _dataset(self, path: Path) -> pads.Dataset:
        """A CSV file as a dataset (Parquet files are read by `_parquet`)."""
        try:
            convert = pacsv.ConvertOptions(column_types={c: pa.string() for c in self.string_columns},
                                           strings_can_be_null=True)
            return pads.dataset(str(path), format=pads.CsvFileFormat(convert_options=convert))
        except (pa.ArrowInvalid, OSError) as err:
            raise DatasetError(f"{path} cannot be read as {self.format} ({err}); check the file "
                               f"or set {self.what}.format") from None

    def _parquet(self, path: Path) -> pq.ParquetFile:
        try:  # pages through a 1 MiB buffered stream, not each column chunk read whole
            return pq.ParquetFile(str(path), buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowInvalid, OSError) as err:
            raise DatasetError(f"{path} cannot be read as parquet ({err}); check the file "
                               f"or set {self.what}.format") from None

    def _record_batches(self, path: Path, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Parquet by its own reader, which decodes a batch at a time: the dataset scanner decodes
        whole row groups (a 1M-row group of the nodes table held 240 MB of Arrow memory against
        91 MB, measured on bench/tables_scale.py's 100M graph)."""
        if self.format == "parquet":
            return self._parquet(path).iter_batches(batch_size=batch_rows, columns=columns, use_threads=False)
        return self._dataset(path).to_batches(columns=columns, batch_size=batch_rows, use_threads=False,
                                              batch_readahead=0, fragment_readahead=0)

    def _schema(self, path: Path) -> pa.Schema:
        return self._parquet(path).schema_arrow if self.format == "parquet" else self._dataset(path).schema

    @property
    def names(self) -> list[str]:
        return list(self.schema.names)

    def require(self, column: str, setting: str) -> None:
        """A named column must exist: else the error lists the columns there are."""
        if column not in self.schema.names:
            import difflib
            close = difflib.get_close_matches(column, self.schema.names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DatasetError(
                f"{self.files[0]}: no column {column!r} ({setting}){hint}; its columns are "
                f"{', '.join(self.schema.names)}. Set {setting} to one of them")

    def expand(self, patterns: list[str], setting: str) -> list[str]:
        """Column names for names or glob patterns, in the table's column order."""
        out: list[str] = []
        for pat in patterns:
            if any(c in pat for c in "*?["):
                hits = [n for n in self.schema.names if fnmatch.fnmatchcase(n, pat)]
                if not hits:
                    raise DatasetError(f"{self.files[0]}: no column matches {pat!r} ({setting}); its "
                                       f"columns are {', '.join(self.schema.names)}")
                out += hits
            else:
                self.require(pat, setting)
                out.append(pat)
        order = {n: i for i, n in enumerate(self.schema.names)}
        return sorted(dict.fromkeys(out), key=order.__getitem__)

    def count_rows(self) -> Optional[int]:
        """Rows of every file from Parquet metadata; None for CSV (known only by reading)."""
        if self.format != "parquet":
            return None
        return sum(self._parquet(p).metadata.num_rows for p in self.files)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    def value_at(self, file: str, row: int, column: str) -> object:
        """`column` of row `row` of `file` (a read of that file up to the row: error paths only)."""
        for b in self._batches([column], BATCH_ROWS, files=[Path(file)]):
            if b.first_row <= row < b.first_row + b.data.num_rows:
                return b.column(column)[row - b.first_row].as_py()
        raise IndexError(f"{file} has no row {row}")

    def batches(self, columns: list[str], batch_rows: int = BATCH_ROWS) -> Iterator[Batch]:
        """The rows of every file in order, `columns` only, at most `batch_rows` rows a batch."""
        try:
            yield from self._batches(columns, batch_rows)
        finally:
            release_arrow_memory()

    def _batches(self, columns: list[str], batch_rows: int, files: Optional[list[Path]] = None) -> Iterator[Batch]:
        for path in files or self.files:
            names = self._schema(path).names
            missing = [c for c in columns if c not in names]
            if missing:
                raise DatasetError(
                    f"{path}: no column {missing[0]!r} ({self.what}); its columns are "
                    f"{', '.join(names)}. Every file of a table needs the same columns")
            row = 0
            try:
                for rb in self._record_batches(path, columns, batch_rows):
                    if rb.num_rows:
                        yield Batch(str(path), row, rb)
                        row += rb.num_rows
            except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as err:
                raise DatasetError(f"{path}: cannot read the rows after row {row} ({err}); fix the "
                                   "file there (CSV: every row needs the header's columns, one type "
                                   "per column)") from None
