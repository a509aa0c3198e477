"""Reading dataset files: JSON or JSONL records (plain or gzip), with errors that name the file, the record and
the field (a malformed file is one :class:`~agentr1_gym.errors.DataError`, never a traceback)."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentr1_gym.errors import ConfigError, DataError

__all__ = [
    "gold_field",
    "load_rows",
    "need_fields",
    "parse_json",
    "read_records",
    "read_records_with_location",
    "read_text",
    "record_errors",
    "text_field",
    "unique",
]


def read_text(path: Path, what: str = "data file") -> str:
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # ValueError: numbers of more than 4,300 digits
        raise DataError(f"{where}: not valid JSON ({exc})") from None


def read_records_with_location(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each JSON object of a JSON-array or JSONL file (``where`` is ``"line N"`` or
    ``"record N"``); a file that is not valid JSON raises :class:`DataError` naming the file and line."""
    path = Path(path)
    text = read_text(path)
    if text.lstrip().startswith("["):
        records = parse_json(text, f"{path}")
        located = [(f"record {i}", r) for i, r in enumerate(records)]
    else:
        located = [  # split on newlines only, not splitlines(): U+2028 and U+0085 are text inside a JSON string
            (f"line {n}", parse_json(line, f"{path}, line {n}"))
            for n, line in enumerate(text.split("\n"), 1)
            if line.strip()
        ]
    for where, r in located:
        if not isinstance(r, dict):
            raise DataError(f"{path}, {where}: not a JSON object but {type(r).__name__}")
        yield where, r


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Each JSON object of a JSON-array or JSONL file."""
    for _, record in read_records_with_location(path):
        yield record


@contextmanager
def record_errors(path: Any, where: str, dataset: str) -> Iterator[None]:
    """Turn any error while interpreting one record into a DataError naming the file, the record and the cause."""
    try:
        yield
    except DataError as exc:
        raise DataError(f"{path}, {where}: {exc}") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise DataError(f"{path}, {where}: a malformed {dataset} record ({what})") from None


def need_fields(record: dict[str, Any], keys: Iterable[str], dataset: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise DataError(f"a {dataset} record lacks {missing}; its keys are {sorted(record)[:20]}")


def text_field(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def gold_field(record: dict[str, Any], key: str, aliases: str | None = None) -> tuple[str, ...]:
    """The gold answers of a record: refused when null, empty, or not strings/numbers (a null answer once became
    the gold answer "None")."""
    value = record.get(key)
    values = value if isinstance(value, list) else [value]
    if aliases and isinstance(record.get(aliases), list):
        values = [*values, *record[aliases]]
    out = []
    for v in values:
        if v is None or isinstance(v, (dict, list, bool)) or not str(v).strip():
            raise DataError(f"field {key!r} holds {v!r:.60}; every task needs non-empty gold answers")
        out.append(str(v))
    if not out:
        raise DataError(f"field {key!r} is an empty list; every task needs a gold answer")
    return unique(out)


def unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def load_rows(dataset: Any) -> list[dict[str, Any]]:
    """The rows of a dataset as dicts: a list or iterable of mappings, a JSONL (or JSON list) file path, or a
    Hugging Face ``datasets.Dataset`` (a task's ``dataset=``, :func:`agentr1_gym.make_task`). Bad files raise a
    one-line :class:`~agentr1_gym.errors.ConfigError` naming the line."""
    if isinstance(dataset, (str, Path)):
        path = Path(dataset)
        if not path.is_file():
            where = (
                ""
                if path.is_absolute()
                else f" (a relative path is read from the working directory, {Path.cwd()})"
            )
            raise ConfigError(f"dataset file not found: {path}{where}")
        try:  # a JSON list or JSONL, as every dataset file is read
            rows = [record for _, record in read_records_with_location(path)]
        except DataError as exc:  # the one-line error names the file and the line
            raise ConfigError(str(exc)) from None
        source = str(path)
    elif isinstance(dataset, Mapping):
        raise ConfigError("dataset: a list of rows (dicts), not a single dict")
    elif isinstance(dataset, Iterable):
        rows = list(dataset)
        source = "dataset"
    else:
        raise ConfigError(
            f"dataset: a list of dicts, a JSONL path or a datasets.Dataset, got {type(dataset).__name__}"
        )
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"{source}: row {i} is a {type(row).__name__}, not an object with named fields")
        out.append(dict(row))
    if not out:
        raise ConfigError(f"{source}: the dataset has no rows")
    return out
