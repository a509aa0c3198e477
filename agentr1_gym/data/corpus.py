"""Passages and corpora for retrieval."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1_gym.errors import DataError

__all__ = ["Corpus", "Passage", "split_contents"]


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable passage. ``score`` is the retriever's score (0 outside search results)."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def contents(self) -> str:
        """FlashRAG/Search-R1 ``contents`` field: ``"Title"\\ntext``."""
        return f'"{self.title}"\n{self.text}'


def split_contents(contents: str) -> tuple[str, str]:
    """Split a FlashRAG ``"Title"\\ntext`` field into ``(title, text)``."""
    first, sep, rest = contents.partition("\n")
    if sep and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return "", contents


class Corpus(Sequence[Passage]):
    """An ordered, immutable list of passages with a content hash (the key of on-disk index caches).

    ``source`` records where it came from (a file path or a bundled dataset name); ``rebuild`` is a
    ``(callable, args)`` pair that re-reads it, and a corpus that has one pickles as that call instead of its
    passages.
    """

    def __init__(
        self,
        passages: Iterable[Passage],
        *,
        source: str | None = None,
        rebuild: tuple[Callable[..., Corpus], tuple[Any, ...]] | None = None,
    ) -> None:
        self.passages: tuple[Passage, ...] = tuple(passages)
        if not self.passages:
            raise DataError("a corpus needs at least one passage")
        self.source = source
        self.rebuild = rebuild
        self._key: str | None = None

    @property
    def key(self) -> str:
        """SHA-256 over ids, titles and texts (computed once)."""
        if self._key is None:
            h = hashlib.sha256()
            for p in self.passages:
                h.update(p.id.encode("utf-8", "surrogatepass"))
                h.update(b"\x00")
                h.update(p.title.encode("utf-8", "surrogatepass"))
                h.update(b"\x00")
                h.update(p.text.encode("utf-8", "surrogatepass"))
                h.update(b"\x01")
            self._key = h.hexdigest()
        return self._key

    def __len__(self) -> int:
        return len(self.passages)

    def __getitem__(self, i):  # type: ignore[override]
        return self.passages[i]

    def __repr__(self) -> str:
        return f"Corpus({len(self)} passages, source={self.source!r})"

    def __reduce__(self):  # small pickles for corpora that can be re-read
        if self.rebuild is not None:
            return self.rebuild
        return (_plain_corpus, (self.passages, self.source))

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Corpus:
        """Read a JSONL corpus: ``{"id", "contents"}`` (FlashRAG/Search-R1 wiki-18, ``"Title"\\ntext``),
        ``{"id", "title", "text"}``, or KILT's knowledge source (``{"_id", "wikipedia_title", "text": [paragraphs]}``,
        one passage per page).

        A ``.json`` file holding a list of such objects (or ``{"title", "text"}`` without ids) is read too.
        """
        path = Path(path)
        if not path.exists():
            raise DataError(f"corpus file not found: {path}")
        try:
            with _open_text(path) as f:
                if path.name.endswith((".json", ".json.gz")):
                    try:
                        records = json.load(f)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
                    if not isinstance(records, list):
                        raise DataError(f"{path}: a .json corpus must hold a list of passages")
                    passages = [_record_to_passage(r, f"passage {i}", path) for i, r in enumerate(records)]
                else:
                    passages = []
                    for lineno, line in enumerate(f, 1):
                        if not line.strip():
                            continue
                        try:
                            record = json.loads(line)
                        except (ValueError, RecursionError) as exc:
                            raise DataError(f"{path}, line {lineno}: not valid JSON ({exc})") from None
                        passages.append(_record_to_passage(record, f"line {lineno}", path, len(passages)))
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise DataError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
        return cls(passages, source=str(path), rebuild=(Corpus.from_jsonl, (str(path),)))


def _record_to_passage(record: Any, where: str, path: Path, index: int | None = None) -> Passage:
    if not isinstance(record, dict):
        raise DataError(f"{path}, {where}: not a JSON object but {type(record).__name__}")
    pid = str(record.get("id", record.get("_id", where.split()[-1] if index is None else index)))
    if "wikipedia_title" in record:  # the KILT knowledge source: one page, its paragraphs as a list
        text = record.get("text", "")
        text = " ".join(str(t).strip() for t in text) if isinstance(text, list) else str(text)
        return Passage(id=pid, title=str(record["wikipedia_title"]), text=text)
    if "contents" in record:
        if not isinstance(record["contents"], str):
            raise DataError(f"{path}, {where}: field 'contents' must be a string")
        title, text = split_contents(record["contents"])
        title = str(record.get("title", title))
    elif "text" in record:
        if not isinstance(record["text"], str):
            raise DataError(f"{path}, {where}: field 'text' must be a string")
        title, text = str(record.get("title", "")), record["text"]
    else:
        raise DataError(
            f"{path}, {where}: a passage needs 'contents' or 'text'; its keys: {sorted(record)[:20]}"
        )
    return Passage(id=pid, title=title, text=text)


def _open_text(path: Path):
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _plain_corpus(passages: tuple[Passage, ...], source: str | None) -> Corpus:
    return Corpus(passages, source=source)
