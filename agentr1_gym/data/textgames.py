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

import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1_gym.cache import cache_dir
from agentr1_gym.errors import ConfigError, DataError

__all__ = ["FAMILIES", "GameSpec", "ensure_games", "game_path", "game_specs", "require_textworld"]

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


def game_path(spec: GameSpec) -> Path:
    """The compiled game file of ``spec``, generated now if the cache does not have it (about 1-3 s)."""
    path = _file(spec)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            _generate(spec, str(path))
        except Exception as exc:  # TextWorld's own errors are many; name the game
            raise DataError(
                f"generating the text game {spec.id} failed: {type(exc).__name__}: {exc}"
            ) from None
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
