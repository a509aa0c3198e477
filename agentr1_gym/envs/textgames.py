"""``AgentR1/TextWorld-<Family>-v0``: text games (the kind ALFWorld is), played with an ``act`` tool.

The agent types game commands (``go north``, ``take old key from antique trunk``) through one tool, ``act``;
the game's reply is the observation, followed by the score and, as ALFWorld agents see them, the admissible
commands of the new state. An inadmissible or malformed command is an observation too (the game says what it did
not understand). The game decides when the episode ends: it is won (the quest is done) or lost.

Rewards: each score gain the game awards is a ``points`` process reward, as a share of the game's maximum score
(0.2 for all of it; a point lost and regained is paid once); winning is the outcome (``won``, the answer score).
The oracle is the game's walkthrough from the current state (TextWorld plans it). Games come from seeded pools
(:mod:`agentr1_gym.data.textgames`): ``split="train"`` or ``"test"`` (disjoint seeds, and TextWorld's own held-out
distribution where the family has one), ``level`` (one or several; ``reset(options={"level": 2})`` draws from
one, for curricula), ``num_games`` per level; a game is generated the first time an episode needs it
(:func:`~agentr1_gym.data.textgames.ensure_games` makes a whole pool in parallel).
``game_files=`` plays a user's own games instead: compiled TextWorld games (``.z8``/``.ulx``) or ALFWorld's
(``.tw-pddl``: a PDDL domain, problem and grammar, played through TextWorld's PDDL env and ALFWorld's name
demangler, with the planner's walkthrough as the oracle).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.data.textgames import (
    FAMILIES,
    GameSpec,
    check_game_file,
    game_path,
    game_specs,
    require_textworld,
)
from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError, DataError
from agentr1_gym.formats import ToolCall
from agentr1_gym.rewards import ProcessReward
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.function import tool

__all__ = ["GameFile", "TextGame", "TextGameEnv"]


class GameFile(BaseModel):
    """A user's own compiled game."""

    model_config = ConfigDict(frozen=True)

    path: str

    @property
    def id(self) -> str:
        return Path(self.path).stem


_BANNER = re.compile(r"^.*?(?=-= )", re.DOTALL)
#: Inform's meta-commands: they act on the interpreter (restart, restore a saved state, undo a move, quit), not on
#: the game, and desynchronise TextWorld's tracking of the game state from the game, so they are refused
META_COMMANDS = frozenset(
    ("quit", "q", "restart", "restore", "save", "undo", "script", "unscript", "transcript", "noscript", "verbose",
     "brief", "superbrief", "notify", "version", "pronouns", "nouns", "oops", "o", "again", "g")
)  # fmt: skip


#: longer input is cut (Inform reads about 120 characters a line)
MAX_COMMAND_CHARS = 120


def game_command(text: str) -> str:
    """What reaches the game: printable ASCII only (accents folded, everything else dropped), no backslash,
    whitespace collapsed, at most ``MAX_COMMAND_CHARS``. The interpreter is C code in this process: a NUL byte hung
    it, ``"look\\x00x"`` crashed it with a segfault, a long non-ASCII command raised inside it, and a command
    starting with a backslash (an interpreter command to dumb-frotz) put it in an endless loop."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    # a backslash starts a command of the interpreter itself (dumb-frotz), and an unknown one loops forever
    printable = "".join(c if 32 <= ord(c) < 127 and c != "\\" else " " for c in folded)
    return " ".join(printable.split())[:MAX_COMMAND_CHARS].strip()


#: what chains several moves into one line for Inform's parser: sentence punctuation and "then" (each part is a
#: move), and the words that make one command act on several objects ("take coin and key", "take all")
_CHAIN = re.compile(r"\s*(?:[.,;!?]+|\bthen\b)\s*", re.IGNORECASE)
_MULTI_OBJECT = re.compile(r"\b(?:and|all|everything|except|but)\b", re.IGNORECASE)


def chained_commands(command: str) -> list[str]:
    """The moves one typed line would make: ``"look. restart"``, ``"look then restart"`` and ``"look, restart"``
    are two each (a trailing full stop is not a second move)."""
    return [part for part in _CHAIN.split(command) if part.strip()]


def _room(feedback: str) -> str:
    """The room description of the game's first reply (after its title banner and introduction)."""
    text = _clean(feedback)
    at = text.find("-= ")
    return text[at:] if at >= 0 else text


def _clean(feedback: str) -> str:
    """The game's reply without the title banner, the input prompt and the status line after it."""
    text = feedback.replace("\r", "")
    if "$$" in text and "-= " in text:
        text = _BANNER.sub("", text, count=1)
    text = re.split(r"\n>", "\n" + text, maxsplit=1)[0]  # the prompt, then the status bar ("-= Room =-0/1")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class TextGame:
    """One running game and its progress: the TextWorld env, the last state, the best score, the commands."""

    def __init__(self, show_admissible: bool = True, inventory: bool = False) -> None:
        self.show_admissible = show_admissible
        # TextWorld asks the game for the inventory each move: only when a state context needs it
        self.inventory = inventory
        self.path = ""
        self._env: Any = None
        self.state: Any = None
        self.commands: list[str] = []
        self._intro_text = ""
        self.best = 0
        self.max_score = 1

    def start(self, path: str) -> str:
        textworld = require_textworld()
        if path != self.path or self._env is None:
            self.close()
            check_game_file(path)  # a damaged story file would make the C interpreter exit the process
            infos = textworld.EnvInfos(  # no human-readable facts or descriptions: 2.2 ms a step saved
                admissible_commands=True, policy_commands=True, max_score=True, score=True, won=True,
                lost=True, objective=True, inventory=self.inventory,
            )  # fmt: skip
            try:
                with warnings.catch_warnings():  # jericho: TextWorld's own games are "not fully supported"
                    warnings.simplefilter("ignore")  # (its score detection, which TextWorld does itself)
                    self._env = (
                        _alfworld_env(path, infos)
                        if path.endswith(".tw-pddl")
                        else textworld.start(path, request_infos=infos)
                    )
            except (KeyError, TypeError, ValueError, AttributeError, OSError) as exc:  # a .json it cannot use
                raise DataError(
                    f"text game {path}: TextWorld cannot load it ({type(exc).__name__}: {exc})"[:300]
                ) from None
            self.path = path
        try:
            self.state = self._env.reset()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.close()
            raise DataError(
                f"text game {path}: TextWorld cannot start it ({type(exc).__name__}: {exc})"[:300]
            ) from None
        self.commands, self.best = [], int(self.state.score or 0)
        self._intro_text = self.state.feedback or ""
        self.max_score = max(1, int(self.state.max_score or 1))
        return self.intro()

    def intro(self) -> str:
        s = self.state
        parts = [f"Goal: {s.objective.strip()}" if s.objective else "", _room(s.feedback)]
        return "\n\n".join(p for p in parts if p) + self._footer()

    def _footer(self) -> str:
        out = f"\n\nScore: {int(self.state.score or 0)}/{self.max_score}"
        if self.show_admissible:
            out += "\nAdmissible commands: " + ", ".join(self.state.admissible_commands or [])
        return out

    @property
    def done(self) -> bool:
        return bool(self.state is not None and (self.state.won or self.state.lost))

    def act(self, command: Annotated[str, Field(min_length=1, max_length=200)]) -> ToolResult:
        """Type a command into the game (e.g. 'look', 'go east', 'open door', 'take key').

        Args:
            command: A game command, e.g. 'go north' or 'take key'.
        """
        if self.state is None:
            return ToolResult("No game is running.", success=False)
        if self.done:
            return ToolResult("The game is over.", success=False, terminal=True)
        command = game_command(command)
        if not command:
            return ToolResult(
                f"The command is empty once reduced to plain text (letters, digits, punctuation).{self._footer()}",
                success=False,
            )
        admissible = {c.lower() for c in self.state.admissible_commands or ()}
        parts = chained_commands(command)
        for part in parts:  # a meta command is refused anywhere in a chain ("look. restart")
            verb = part.lower().split(" ", 1)[0]
            if verb in META_COMMANDS:
                return ToolResult(
                    f"'{verb}' is a command of the game engine, not of the game; it is disabled here."
                    f"{self._footer()}",
                    success=False,
                )
        if command.lower() not in admissible:  # admissible commands are single moves, whatever their words
            if len(parts) > 1:
                return ToolResult(
                    f"One command per turn: that line holds {len(parts)} ({'; '.join(p[:40] for p in parts[:4])})."
                    f" Type one, see what it did, then the next.{self._footer()}",
                    success=False,
                )
            command = parts[0] if parts else command  # "go north." is "go north"
            if _MULTI_OBJECT.search(command) and command.lower() not in admissible:
                return ToolResult(
                    f"One object per command: '{command[:60]}' would act on several (and/all/except/but). Name "
                    f"one object, then the next.{self._footer()}",
                    success=False,
                )
        self.state, _, _ = self._env.step(command)
        self.commands.append(command)
        score = int(self.state.score or 0)
        gain = max(0, score - self.best)
        self.best = max(self.best, score)
        text = _clean(self.state.feedback)
        if self.state.won:
            text += "\n\nYou won the game."
        elif self.state.lost:
            text += "\n\nYou lost the game."
        return ToolResult(
            text + ("" if self.done else self._footer()),
            success=command.lower() in admissible,
            metadata={"points": gain / self.max_score},
            terminal=self.done,
        )

    def state_key(self) -> str:
        """A digest of the world's facts (where the player and every object are, what is open, the inventory) and
        the score: equal for equal game states, whatever path led there."""
        if self.state is None:
            return ""
        facts = sorted(str(f) for f in (self.state.get("_facts") or ()))
        return hashlib.sha1("\n".join([str(self.state.score), *facts]).encode()).hexdigest()[:16]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self.path = None, ""

    def location(self) -> str:
        """The room the player is in: the last ``-= Room =-`` header the game printed (its intro included)."""
        for text in (self.state.feedback if self.state is not None else "", self._intro_text):
            rooms = re.findall(r"-= (.+?) =-", text or "")
            if rooms:
                return rooms[-1]
        return "unknown"

    def summary(self) -> str:
        """The game's compact state: location, inventory (when tracked) and score."""
        lines = [f"Location: {self.location()}"]
        if self.inventory and self.state is not None:
            held = _clean(self.state.inventory or "").replace("\n", " ").strip()
            lines.append(f"Inventory: {held or 'nothing'}")
        lines.append(f"Score: {int(self.state.score or 0) if self.state is not None else 0}/{self.max_score}")
        return "\n".join(lines)

    def __getstate__(self) -> dict[str, Any]:  # a pickled game restarts and replays its commands
        return {"show_admissible": self.show_admissible, "path": self.path, "commands": list(self.commands),
                "inventory": self.inventory}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["show_admissible"], state.get("inventory", False))
        if state["path"]:
            self.start(state["path"])
            for command in state["commands"]:
                self.act(command)


def _alfworld_env(path: str, infos: Any) -> Any:
    """An ALFWorld game (``.tw-pddl``: a PDDL domain, problem and text grammar), through TextWorld's PDDL env and
    ALFWorld's name demangler, as ALFWorld's own text env plays it."""
    try:
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv
        from textworld.envs.pddl.pddl import fast_downward_missing
    except ImportError:
        fast_downward_missing = True
    if fast_downward_missing:
        raise ConfigError(
            f"{path} is an ALFWorld game: it needs the alfworld package and TextWorld's PDDL planner "
            '(pip install "agentr1-gym[alfworld]")'
        )
    env = AlfredDemangler(PddlEnv(infos))
    env.load(path)
    return env


GAME_PROMPT = (
    "You are playing a text adventure. Reach the goal by typing game commands with the act tool, one command "
    "per turn; the game answers each one. The game ends when you win or lose.\n\n{intro}"
)


class TextGameEnv(ToolEnv):
    """A pool of TextWorld games of one family.

    Args:
        family: ``"simple"``, ``"cooking"``, ``"treasure_hunter"`` or ``"coin_collector"``.
        level: the difficulty level, or several (a pool per level; ``reset(options={"level": n})`` picks one).
        split: ``"train"`` or ``"test"`` (held-out games).
        num_games: games per level in the pool.
        pool_seed: which pool (pools with different seeds share no game).
        game_files: games of your own instead of a generated pool: a list of paths, or a directory searched
            recursively, of compiled TextWorld games (``.z8``/``.ulx``) or ALFWorld games (``.tw-pddl``, as ALFWorld's
            data ships them; needs ``pip install "agentr1-gym[alfworld]"``).
        show_admissible: list the admissible commands after every move (as ALFWorld agents get them).
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings` (default ``max_turns=20``).

    Metrics: ``won`` (the answer score and the success rule), ``points`` (the best score reached, as a share of
    the maximum), ``lost``.
    """

    default_max_turns = 20  # moves and looks

    process_rewards = (
        ProcessReward(
            "points", 0.2, "the game's score gains, as a share of its maximum score (each point once)"
        ),
    )
    answer_metrics = ("won",)
    success_metric = "won"
    final_answer = False
    reset_options = ("level",)

    def __init__(
        self,
        *,
        family: str = "simple",
        level: int | Sequence[int] = 1,
        split: str = "train",
        num_games: int = 100,
        pool_seed: int = 0,
        game_files: Sequence[str | Path] | str | Path | None = None,
        show_admissible: bool = True,
        **settings: Any,
    ) -> None:
        require_textworld()
        self.family = family
        levels = (level,) if isinstance(level, int) else tuple(level)
        if game_files is not None:
            self.tasks = _user_games(game_files)
            self.levels: tuple[int, ...] = ()
        else:
            if self.family not in FAMILIES:
                raise ConfigError(
                    f"unknown text-game family {self.family!r}; choose one of {sorted(FAMILIES)}"
                )
            self.tasks = game_specs(self.family, levels, split, num_games, pool_seed)
            self.levels = levels
        self.split = split
        self.game = TextGame(show_admissible)
        # the game's one move as a tool; it answers every input itself, so an exception there is a bug: it raises
        super().__init__([tool(self.game.act, errors="raise")], **settings)
        # TextWorld tracks the inventory only for the compact state a `state` context shows (asked of the policy
        # the env parsed, before the first game loads)
        self.game.inventory = self.context_policy.kind == "state"
        self._intro = ""

    def _pick(self, options: dict[str, Any]) -> Any:
        level = options.get("level")
        if level is None or "task_index" in options:
            return super()._pick({k: v for k, v in options.items() if k != "level"})
        pool = [t for t in self.tasks if isinstance(t, GameSpec) and t.level == level]
        if not pool:
            raise ConfigError(
                f"options['level'] must be one of this env's levels {list(self.levels)}, got {level!r}"
            )
        return pool[int(self.np_random.integers(len(pool)))]

    def on_reset(self) -> None:
        path = self.task.path if isinstance(self.task, GameFile) else str(game_path(self.task))
        self._intro = self.game.start(path)

    def task_prompt(self, task: Any) -> str:
        return GAME_PROMPT.format(intro=self._intro)

    def task_answers(self, task: Any) -> tuple[str, ...]:
        return ()

    def score_answer(self, answer: str | None) -> dict[str, float]:
        s = self.game.state
        won = bool(s is not None and s.won)
        return {
            "won": float(won),
            "points": self.game.best / self.game.max_score,
            "lost": float(bool(s is not None and s.lost)),
        }

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        gain = float(result.metadata.get("points", 0.0))
        return {"points": gain} if gain > 0 else {}

    def process_reward_caps(self) -> dict[str, float]:
        return {"points": 1.0}

    def state_key(self) -> str:
        return self.game.state_key()

    def state_text(self) -> str:
        """Location, inventory, score and the last feedback (with the admissible commands, when shown): what
        ``context='state'`` shows instead of the history."""
        last = self.last_feedback()
        return (
            f"{self.game.summary()}\nLast command: {self.game.commands[-1] if self.game.commands else '(none)'}"
            + (f"\nLast feedback:\n{last}" if last else "")
        )

    def oracle_action(self) -> str:
        """The next command of the game's walkthrough from the current state (TextWorld plans it)."""
        self._require_task("oracle_action()")
        plan = list(self.game.state.policy_commands or ()) if self.game.state is not None else []
        return self.call_text("act", command=plan[0] if plan else "look")

    def random_action(self) -> str:
        """A random admissible command of the current state."""
        self._require_task("random_action()")
        options = (
            list(self.game.state.admissible_commands or ["look"]) if self.game.state is not None else ["look"]
        )
        return self.call_text("act", command=options[int(self.np_random.integers(len(options)))])

    def split_kwargs(self, split: str) -> dict[str, Any]:
        """Generated games have their own held-out pool (``split="test"``); a user's game files split like any
        fixed task list."""
        return {"task_split": split} if self.levels == () else {"split": split}

    def close(self) -> None:
        self.game.close()
        super().close()


def _user_games(game_files: Sequence[str | Path] | str | Path) -> tuple[GameFile, ...]:
    if isinstance(game_files, (str, Path)):
        root = Path(game_files)
        if not root.is_dir():
            raise ConfigError(f"game_files: {root} is not a directory (or pass a list of game files)")
        paths = sorted(p for p in root.rglob("*") if p.suffix in (".z8", ".ulx", ".tw-pddl"))
    else:
        paths = [Path(p) for p in game_files]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise ConfigError(f"game_files: no such file(s): {missing[:3]}")
    if not paths:
        raise ConfigError("game_files: no .z8, .ulx or .tw-pddl games found")
    return tuple(GameFile(path=str(p.resolve())) for p in paths)
