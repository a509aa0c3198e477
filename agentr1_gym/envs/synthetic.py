"""``AgentR1/SyntheticMultihop-v0``: k-hop questions over a procedurally generated world.

A world (fixed by ``world_seed``) holds people, cities, countries, companies and universities with functional
relations between them (born in, works for, capital of, founded by, ...). Each entity has one document that
states its relations. A task starts at a random entity and follows ``k`` random relations (1 <= k <= 4); the
question nests them ("What is the capital of the country of the birthplace of Arlo Venn?"). Solving it takes
exactly k searches (one per entity on the chain) and an answer, which is what :meth:`oracle_action` does.

It exists so that tiny models can learn multi-hop tool use on a CPU and tests have unlimited fresh tasks.
Everything is deterministic given ``world_seed`` and the reset seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from agentr1_gym.data import Corpus, Passage, QATask
from agentr1_gym.envs.qa import QAEnvBase
from agentr1_gym.errors import ConfigError

__all__ = ["RELATIONS", "SyntheticMultihopEnv", "World", "make_world"]

_ONSETS = [
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "r",
    "s",
    "st",
    "t",
    "tr",
    "v",
    "z",
    "th",
    "sh",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
_CODAS = ["", "", "n", "r", "l", "m", "rk", "nd", "th", "x"]

TYPES = ("person", "city", "country", "company", "university")


@dataclass(frozen=True)
class Relation:
    name: str
    source: str  # entity type
    target: str  # entity type
    phrase: str  # "the {phrase} of X"
    sentence: str  # "{s} ... {o}"


RELATIONS: tuple[Relation, ...] = (
    Relation("born_in", "person", "city", "birthplace", "{s} was born in the city of {o}."),
    Relation("works_for", "person", "company", "employer", "{s} works for the company {o}."),
    Relation("studied_at", "person", "university", "alma mater", "{s} studied at {o}."),
    Relation("mother", "person", "person", "mother", "The mother of {s} is {o}."),
    Relation("city_country", "city", "country", "country", "{s} is a city in the country of {o}."),
    Relation("mayor", "city", "person", "mayor", "The mayor of {s} is {o}."),
    Relation("capital", "country", "city", "capital", "The capital of {s} is {o}."),
    Relation("leader", "country", "person", "leader", "The leader of {s} is {o}."),
    Relation("founder", "company", "person", "founder", "{s} was founded by {o}."),
    Relation("headquarters", "company", "city", "headquarters city", "{s} has its headquarters in {o}."),
    Relation("campus_city", "university", "city", "campus city", "The campus of {s} is in {o}."),
    Relation("university_founder", "university", "person", "founder", "{s} was founded by {o}."),
)
_BY_SOURCE = {t: [r for r in RELATIONS if r.source == t] for t in TYPES}


@dataclass(frozen=True)
class World:
    names: tuple[str, ...]  # entity id -> name
    types: tuple[str, ...]  # entity id -> type
    relations: dict[tuple[int, str], int]  # (entity, relation name) -> entity
    corpus: Corpus


def _word(rng: np.random.Generator, syllables: int) -> str:
    parts = [str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) for _ in range(syllables)]
    return ("".join(parts) + str(rng.choice(_CODAS))).capitalize()


_SUFFIX = {"city": "", "country": "", "company": " Corp", "university": " University"}


@lru_cache(maxsize=16)
def make_world(world_seed: int = 0, entities_per_type: int = 40) -> World:
    """Generate (and cache per process) the world for a seed."""
    rng = np.random.default_rng(world_seed)
    names: list[str] = []
    types: list[str] = []
    used: set[str] = set()
    for etype in TYPES:
        count = entities_per_type if etype != "country" else max(4, entities_per_type // 4)
        for _ in range(count):
            while True:
                if etype == "person":
                    name = f"{_word(rng, 1 + int(rng.integers(2)))} {_word(rng, 2)}"
                else:
                    name = _word(rng, 2 + int(rng.integers(2))) + _SUFFIX[etype]
                if name.lower() not in used:
                    used.add(name.lower())
                    break
            names.append(name)
            types.append(etype)
    by_type = {t: [i for i, x in enumerate(types) if x == t] for t in TYPES}
    relations: dict[tuple[int, str], int] = {}
    for e, etype in enumerate(types):
        for rel in _BY_SOURCE[etype]:
            targets = by_type[rel.target]
            target = e
            while target == e:  # never related to itself
                target = targets[int(rng.integers(len(targets)))]
            relations[(e, rel.name)] = target
    passages = []
    for e, (name, etype) in enumerate(zip(names, types)):
        facts = [f"{name} is a {etype}."]
        facts += [rel.sentence.format(s=name, o=names[relations[(e, rel.name)]]) for rel in _BY_SOURCE[etype]]
        passages.append(Passage(id=f"e{e}", title=name, text=" ".join(facts)))
    return World(tuple(names), tuple(types), relations, Corpus(passages, source=None))


class SyntheticMultihopEnv(QAEnvBase):
    """k-hop questions over a generated world, searchable with BM25 over one document per entity.

    Args:
        min_hops, max_hops: each task has k hops with k drawn uniformly from [min_hops, max_hops] (1..4).
        world_seed: the world; tasks are drawn from it with the reset seed.
        entities_per_type: world size (people, cities, companies, universities; a quarter as many countries).
        Search settings: see :class:`~agentr1_gym.envs.qa.QAEnvBase`; the rest:
        :class:`~agentr1_gym.settings.EnvSettings`.

    Tasks are generated: a reset draws one from ``self.np_random``; ``reset(options={"task_index": i})`` is the
    task generated from seed ``i`` (the same task for every env over the same world), ``options={"hops": k}``
    fixes the number of hops.
    """

    reset_options = ("hops",)

    def __init__(
        self,
        *,
        min_hops: int = 1,
        max_hops: int = 2,
        world_seed: int = 0,
        entities_per_type: int = 40,
        **settings: Any,
    ) -> None:
        if not 1 <= min_hops <= max_hops <= 4:
            raise ConfigError(
                f"need 1 <= min_hops <= max_hops <= 4, got min_hops={min_hops}, max_hops={max_hops}"
            )
        if entities_per_type < 4:
            raise ConfigError(f"entities_per_type must be >= 4, got {entities_per_type}")
        max_turns = settings.get("max_turns", self.default_max_turns)
        if isinstance(max_turns, int) and max_turns < max_hops + 1:
            raise ConfigError(
                f"max_turns={max_turns} cannot fit {max_hops} searches and an answer; "
                f"use max_turns >= {max_hops + 1}"
            )
        self.min_hops, self.max_hops = int(min_hops), int(max_hops)
        self.world_seed, self.entities_per_type = int(world_seed), int(entities_per_type)
        self.world = make_world(self.world_seed, self.entities_per_type)
        super().__init__(self.world.corpus, **settings)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("world")  # regenerated from world_seed
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.world = make_world(self.world_seed, self.entities_per_type)

    def _oracle_query(self, title: str, attempt: int) -> str:
        return title  # an entity's name finds its document; the oracle reads nothing it could not know

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> QATask:
        drawn = int(
            rng.integers(self.min_hops, self.max_hops + 1)
        )  # drawn either way: seeds keep their tasks
        hops = options.get("hops", drawn)
        if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or not 1 <= hops <= 4:
            raise ConfigError(f"options['hops'] must be an int in 1..4, got {hops!r}")
        hops = int(hops)
        world = self.world
        for _ in range(1000):
            chain = [int(rng.integers(len(world.names)))]
            rels: list[Relation] = []
            for _ in range(hops):
                candidates = _BY_SOURCE[world.types[chain[-1]]]
                rel = candidates[int(rng.integers(len(candidates)))]
                rels.append(rel)
                chain.append(world.relations[(chain[-1], rel.name)])
            if len(set(chain)) == len(chain):  # no entity twice: every hop is needed
                break
        phrase = world.names[chain[0]]
        for rel in rels:
            phrase = f"the {rel.phrase} of {phrase}"
        question = f"What is {phrase}?"
        return QATask(
            id=f"synthetic-w{self.world_seed}-" + "-".join([str(chain[0]), *(r.name for r in rels)]),
            question=question,
            answers=(world.names[chain[-1]],),
            supporting_titles=tuple(world.names[e] for e in chain[:-1]),
            type=f"{hops}-hop",
            hops=hops,
            dataset="synthetic",
        )
