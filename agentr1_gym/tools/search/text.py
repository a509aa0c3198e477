"""Tokenisation for lexical retrieval: lower-case word tokens, English stop words removed, light stemming."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["STOPWORDS", "make_analyzer"]

_TOKEN_RE = re.compile(r"\w+")

# A standard English stop-word list (the Lucene/Snowball core set).
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


def _light_stem(token: str) -> str:
    """Plural folding (S-stemmer of Harman 1991): cities->city, boxes->box, cats->cat; deterministic, no deps."""
    if len(token) > 4 and token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if len(token) > 3 and token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


def make_analyzer(stemmer: str = "light", stopwords: bool = True) -> Callable[[str], list[str]]:
    """Return ``text -> tokens``. ``stemmer``: ``"none"``, ``"light"`` (built in) or ``"snowball"`` (PyStemmer)."""
    if stemmer == "none":
        stem: Callable[[str], str] | None = None
    elif stemmer == "light":
        stem = _light_stem
    elif stemmer == "snowball":
        try:
            import Stemmer  # PyStemmer
        except ImportError:
            from agentr1_gym.errors import MissingDependencyError

            raise MissingDependencyError("PyStemmer", "search", "the snowball stemmer") from None
        stem = Stemmer.Stemmer("english").stemWord
    else:
        from agentr1_gym.errors import ConfigError

        raise ConfigError(f"unknown stemmer {stemmer!r}; use 'none', 'light' or 'snowball'")
    stop = STOPWORDS if stopwords else frozenset()
    cache: dict[str, str] = {}

    def analyze(text: str) -> list[str]:
        tokens = [t for t in _TOKEN_RE.findall(text.lower()) if t not in stop]
        if stem is None:
            return tokens
        out = []
        for t in tokens:
            s = cache.get(t)
            if s is None:
                s = stem(t)
                if len(cache) < 1_000_000:
                    cache[t] = s
            out.append(s)
        return out

    return analyze
