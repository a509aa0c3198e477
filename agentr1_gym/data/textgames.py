"""Text games (TextWorld): seeded pools of generated games, made offline on first use and cached.

TextWorld (Côté et al., 2018; MIT licence) generates interactive-fiction games from a seed: a map, objects, a
quest, its walkthrough and a score. The four challenge families it ships are the kinds of game ALFWorld builds on:

* ``simple``: one house; fetch an item and put it somewhere (levels 1-4: dense to sparse rewards, a detailed to
  no stated goal);
* ``cooking`` (the *First TextWorld Problems* competition): find the kitchen, read the cookbook, gather and
  prepare the ingredients, eat the meal (levels 1-5: more ingredients, rooms, containers to open, cooking and
  cutting, a limited inventory);
* ``treasure_hunter``: find a named object among distractors (levels 1-30);
* ``coin_collector``: find a coin along a chain of rooms (levels 1-300).

A game is identified by ``(family, level, split, seed)``. Train and test games come from disjoint seed ranges,
and for the families that have one, from TextWorld's own held-out distribution (``cooking``: unseen foods and
preparations; ``simple``: its test games). :func:`ensure_games` generates missing games in parallel worker
processes with a progress bar; :func:`game_path` generates one on demand.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1_gym.cache import cache_dir
from agentr1_gym.errors import ConfigError, DataError

__all__ = [
    "FAMILIES",
    "GameSpec",
    "check_game_file",
    "ensure_games",
    "game_path",
    "game_specs",
    "require_textworld",
]

#: family -> (TextWorld challenge, number of levels)
FAMILIES: dict[str, tuple[str, int]] = {
    "simple": ("tw-simple", 4),
    "cooking": ("tw-cooking", 5),
    "treasure_hunter": ("tw-treasure_hunter", 30),
    "coin_collector": ("tw-coin_collector", 300),
}
#: where the test split's seeds start (train seeds count up from 1)
TEST_SEED_BASE = 1_000_000

_SIMPLE = {
    1: ("dense", "detailed"),
    2: ("balanced", "detailed"),
    3: ("sparse", "brief"),
    4: ("sparse", "none"),
}
#: cooking level -> (ingredients in the recipe, to find, rooms, open, cook, cut, drop)
_COOKING = {
    1: (1, 1, 1, False, False, False, False),
    2: (1, 1, 6, True, False, False, False),
    3: (2, 2, 6, True, False, True, False),
    4: (3, 3, 9, True, True, True, False),
    5: (3, 3, 12, True, True, True, True),
}


def require_textworld() -> Any:
    try:
        import textworld
    except ImportError:
        raise ConfigError(
            'the text-game envs need TextWorld: pip install "agentr1-gym[worlds]" (textworld==1.7.0)'
        ) from None
    return textworld


@dataclass(frozen=True)
class GameSpec:
    """One game of a pool."""

    family: str
    level: int
    split: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}-L{self.level}-{self.split}-{self.seed}"

    def settings(self) -> dict[str, Any]:
        """The TextWorld challenge's settings for this game."""
        test = self.split == "test"
        if self.family == "simple":
            rewards, goal = _SIMPLE[self.level]
            return {"rewards": rewards, "goal": goal, "test": test}
        if self.family == "cooking":
            recipe, take, go, open_, cook, cut, drop = _COOKING[self.level]
            return {
                "recipe": recipe, "take": take, "go": go, "open": open_, "cook": cook, "cut": cut,
                "drop": drop, "recipe_seed": self.seed, "split": "test" if test else "train",
            }  # fmt: skip
        return {"level": self.level}


def check_family(family: str, level: int) -> None:
    if family not in FAMILIES:
        raise ConfigError(f"unknown text-game family {family!r}; choose one of {sorted(FAMILIES)}")
    top = FAMILIES[family][1]
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= top:
        raise ConfigError(f"{family} levels are 1 to {top}, got {level!r}")


def game_specs(
    family: str, levels: Sequence[int], split: str, num_games: int, pool_seed: int = 0
) -> tuple[GameSpec, ...]:
    """The pool: ``num_games`` games per level, with seeds that never overlap between splits or pool seeds."""
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
    if num_games < 1:
        raise ConfigError(f"num_games must be >= 1, got {num_games}")
    base = (TEST_SEED_BASE if split == "test" else 1) + pool_seed * 100_000
    specs = []
    for level in levels:
        check_family(family, level)
        specs += [GameSpec(family, level, split, base + i) for i in range(num_games)]
    return tuple(specs)


def _directory() -> Path:
    textworld = require_textworld()
    return cache_dir() / "textworld" / f"tw{textworld.__version__}"


def _file(spec: GameSpec) -> Path:
    return _directory() / spec.family / f"L{spec.level}" / spec.split / f"{spec.seed}.z8"


def _generate(spec: GameSpec, target: str) -> str:
    """Generate and compile one game into ``target`` (``.z8``, with its ``.json``); atomic."""
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    make = textworld.challenges.CHALLENGES[FAMILIES[spec.family][0]][1]
    tmp = tempfile.mkdtemp(prefix=".gen-", dir=os.path.dirname(target))
    try:
        options = textworld.GameOptions()
        options.seeds = spec.seed
        options.path = os.path.join(tmp, "game.z8")
        options.file_ext = ".z8"
        options.force_recompile = True
        with warnings.catch_warnings():  # jericho calls TextWorld's own games "not fully supported"
            warnings.simplefilter("ignore")
            game = make(spec.settings(), options)
            compiled = compile_game(game, options)
        base = os.path.splitext(target)[0]
        os.replace(os.path.splitext(compiled)[0] + ".json", base + ".json")
        os.replace(compiled, target)  # last: the .z8 existing means the game is complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---- checking a game file before the interpreter sees it ----------------------------------------------------
#: files already checked, by (path, size, mtime): the check reads the whole file once per process
_CHECKED: set[tuple[str, int, int]] = set()
_CHECKED_LOCK = threading.Lock()


def _zmachine_problem(data: bytes) -> str | None:
    """What is wrong with a Z-machine story file (None: its header, length and checksum hold)."""
    if len(data) < 64:
        return f"{len(data)} bytes, shorter than a Z-machine header"
    version = data[0]
    if not 1 <= version <= 8:
        return f"not a Z-machine story (version byte {version})"
    scale = 2 if version <= 3 else 4 if version <= 5 else 8
    length = int.from_bytes(data[0x1A:0x1C], "big") * scale
    if length == 0 or length > len(data):
        return f"cut short: its header says {length} bytes, the file has {len(data)}"
    if version >= 3:
        want = int.from_bytes(data[0x1C:0x1E], "big")
        got = sum(memoryview(data)[0x40:length]) & 0xFFFF
        if want != got:
            return f"damaged: checksum {got:#06x}, its header says {want:#06x}"
    return None


def _glulx_problem(data: bytes) -> str | None:
    """What is wrong with a Glulx story file (None: its magic, length and checksum hold)."""
    if len(data) < 36 or data[:4] != b"Glul":
        return "not a Glulx story (no 'Glul' header)"
    length = int.from_bytes(data[12:16], "big")  # EXTSTART: the end of the file's contents
    if length < 36 or length % 4 or length > len(data):
        return f"cut short: its header says {length} bytes, the file has {len(data)}"
    want = int.from_bytes(data[32:36], "big")
    total = sum(int.from_bytes(data[i : i + 4], "big") for i in range(0, length, 4)) - want
    if total & 0xFFFFFFFF != want:
        return "damaged: its checksum does not match its contents"
    return None


def check_game_file(path: str | Path) -> None:
    """Check a game file before an interpreter loads it, raising a one-line :class:`DataError` that names the
    file and what is wrong. TextWorld's interpreter is C code in this process: a truncated, emptied or garbage
    story file made it print "Fatal error: Story file read error" and exit the whole process. Story files
    (``.z1``-``.z8``, ``.ulx``) must have an intact header, length and checksum and a readable TextWorld ``.json``
    beside them (the score, goal and walkthrough come from it); ALFWorld's ``.tw-pddl`` must be JSON."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise DataError(f"text game {path}: cannot read it ({exc.strerror or exc})") from None
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key in _CHECKED:
        return
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"text game {path}: cannot read it ({exc.strerror or exc})") from None
    if path.suffix == ".tw-pddl":
        _read_json(path, data, "an ALFWorld game (JSON)")
    else:
        problem = (
            _glulx_problem(data) if path.suffix == ".ulx" or data[:4] == b"Glul" else _zmachine_problem(data)
        )
        if problem:
            raise DataError(f"text game {path}: {problem}; regenerate or replace the file")
        meta = path.with_suffix(".json")
        if not meta.is_file():
            raise DataError(
                f"text game {path}: no {meta.name} beside it (TextWorld writes one when it compiles a game; the "
                "score, goal and walkthrough come from it)"
            )
        try:
            _read_json(meta, meta.read_bytes(), "TextWorld's game description")
        except OSError as exc:
            raise DataError(f"text game {path}: cannot read {meta.name} ({exc.strerror or exc})") from None
    with _CHECKED_LOCK:
        _CHECKED.add(key)


def _read_json(path: Path, data: bytes, what: str) -> Any:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not valid JSON, so not {what} ({str(exc)[:120]})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: a JSON {type(value).__name__}, not {what}")
    return value


def game_path(spec: GameSpec) -> Path:
    """The compiled game file of ``spec``, generated now if the cache does not have it (about 1-3 s), and
    generated again if the cached file is damaged (:func:`check_game_file`)."""
    path = _file(spec)
    if path.exists():
        try:
            check_game_file(path)
            return path
        except DataError as exc:
            try:
                path.unlink(missing_ok=True)  # a damaged cache entry (a full disk, a killed copy): made again
            except OSError:
                raise DataError(f"{exc}; the cache is read-only, so it cannot be made again here") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _generate(spec, str(path))
    except Exception as exc:  # TextWorld's own errors are many; name the game
        raise DataError(f"generating the text game {spec.id} failed: {type(exc).__name__}: {exc}") from None
    check_game_file(path)
    return path


def ensure_games(specs: Sequence[GameSpec], workers: int | None = None, progress: bool = True) -> float:
    """Generate every game of ``specs`` the cache lacks, in parallel worker processes, with a progress bar.
    Returns the seconds it took (0 when everything was cached)."""
    import time

    missing = [s for s in specs if not _file(s).exists()]
    if not missing:
        return 0.0
    start = time.perf_counter()
    for s in missing:
        _file(s).parent.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(workers or os.cpu_count() or 1, len(missing)))
    from tqdm.auto import tqdm

    bar = tqdm(total=len(missing), desc="generating text games", unit="game", disable=not progress)
    try:
        if workers == 1:
            for s in missing:
                game_path(s)
                bar.update()
        else:
            with ProcessPoolExecutor(workers) as pool:
                futures = {pool.submit(_generate, s, str(_file(s))): s for s in missing}
                for fut in as_completed(futures):
                    try:
                        fut.result()
                    except Exception as exc:
                        raise DataError(
                            f"generating the text game {futures[fut].id} failed: {type(exc).__name__}: {exc}"
                        ) from None
                    bar.update()
    finally:
        bar.close()
    return time.perf_counter() - start
