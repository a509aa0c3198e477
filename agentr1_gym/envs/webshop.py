"""``AgentR1/WebShop-v0``: find and buy the product an instruction describes, in a simulated web shop.

WebShop's mechanics (Yao et al., 2022), reimplemented as a world env: a search box, result pages of ten products
(fifty results per search, ``Next >`` / ``< Prev``), item pages with option buttons (``size``, ``color``, ...), a
product's ``Description``, ``Features`` and ``Reviews`` pages, ``Back to Search`` and ``Buy Now``. The agent acts
with two tools, ``search(query)`` and ``click(button)``, whose results are the new page as text; clickable
buttons are shown in brackets. ``Buy Now`` ends the episode, and the world scores the purchase with WebShop's
reward: the share of the goal's attributes, options and price bound the bought product meets, times a type
factor (1 when the product is of the right type, less when it is not)::

    reward = r_type * (attributes matched + options matched + [price <= bound]) / (attributes + options + 1)

An episode succeeds when the reward is 1 (WebShop's success rate). The outcome pays for success
(``full_match``, the default answer metric); WebShop's graded reward is paid on the buying step as the
``purchase`` process reward (0.2 x reward), so partial credit guides learning without outweighing the task (a
policy that buys the first search result earns about 0.6 of WebShop's reward and never succeeds).
``RewardConfig(answer_metric="reward")`` makes the graded reward the outcome instead, as WebShop's papers train. Attributes and options match by token-set
similarity above 85 (WebShop's threshold; :func:`token_set_ratio` computes it with ``difflib``), attributes also by
appearing in the title, bullet points or description. The type factor compares the bought product's search query,
category path and type words with the goal's (WebShop parses type words with spaCy; here they are the catalog's
product-type nouns, or a title's content words for WebShop's own files).

The catalog is procedural by default (:func:`~agentr1_gym.data.webshop.generate_catalog`: 2,000 products over 31
types), searched with the embedded BM25; ``data_path=`` reads WebShop's own product and instruction files. Goals
are split into ``train`` and ``test`` (the first ``num_test`` goals, as WebShop holds out its first 500).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from agentr1_gym.cache import shared
from agentr1_gym.data.webshop import (
    KNOCKOFF_SHARE,
    Product,
    ShopGoal,
    catalog_corpus,
    generate_catalog,
    generate_goals,
    load_webshop,
)
from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError
from agentr1_gym.formats import ToolCall
from agentr1_gym.rewards import ProcessReward
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.function import tool
from agentr1_gym.tools.search.bm25 import shared_bm25

__all__ = ["ShopWorld", "WebShopEnv", "token_set_ratio", "webshop_reward"]

SEARCH_RESULTS = 50
PAGE_SIZE = 10
NEXT, PREV, BACK, BUY = "Next >", "< Prev", "Back to Search", "Buy Now"
#: how WebShopEnv's oracle chooses the product to open (its ``oracle`` argument)
ORACLES = ("direct", "browse")
SUBPAGES = ("Description", "Features", "Reviews")


# ---- WebShop's reward ----------------------------------------------------------------------------------------
def _tokens(text: str) -> list[str]:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).split()


def _ratio(a: str, b: str) -> float:
    if not a and not b:
        return 0.0
    return 100.0 * difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def token_set_ratio(a: str, b: str) -> float:
    """Token-set similarity in [0, 100] (the measure WebShop takes from ``fuzzywuzzy``): the shared words,
    and each side's shared words plus its own, compared pairwise; the best pair wins."""
    ta, tb = set(_tokens(a)), set(_tokens(b))
    if not ta or not tb:
        return 0.0
    common = " ".join(sorted(ta & tb))
    one = (common + " " + " ".join(sorted(ta - tb))).strip()
    two = (common + " " + " ".join(sorted(tb - ta))).strip()
    if common and (one == common or two == common):
        return 100.0  # one side's words are all in the other
    return max(_ratio(common, one), _ratio(common, two), _ratio(one, two))


def _type_reward(product: Product, goal: ShopGoal) -> tuple[float, dict[str, float]]:
    query_match = bool(goal.query) and product.query == goal.query
    bought_path = {x.strip() for x in product.product_category.split("›") if x.strip()}
    goal_path = {x.strip() for x in goal.product_category.split("›") if x.strip()}
    category_match = len(bought_path & goal_path) >= 2
    wanted = set(goal.type_words)
    title_score = len(set(product.type_words) & wanted) / len(wanted) if wanted else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, {"query_match": float(query_match), "category_match": float(category_match)}


def _attribute_matches(product: Product, goal: ShopGoal) -> int:
    text = " ".join((product.title, " ".join(product.bullet_points), product.description)).lower()
    matched = 0
    for want in goal.attributes:
        if any(token_set_ratio(have, want) > 85 for have in product.attributes) or want.lower() in text:
            matched += 1
    return matched


def _option_matches(chosen: Sequence[str], goal: ShopGoal) -> int:
    return sum(any(token_set_ratio(c, want) > 85 for c in chosen) for want in goal.options)


def webshop_reward(
    product: Product, goal: ShopGoal, chosen: dict[str, str]
) -> tuple[float, dict[str, float]]:
    """WebShop's reward for buying ``product`` with the ``chosen`` options (name -> value) against ``goal``;
    returns ``(reward, parts)`` with ``r_type``, ``r_att``, ``r_option``, ``r_price``."""
    r_type, flags = _type_reward(product, goal)
    attrs = _attribute_matches(product, goal)
    options = _option_matches(list(chosen.values()), goal)
    price_ok = product.price <= goal.price_upper
    total = (attrs + options + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1) * r_type
    parts = {
        "r_type": r_type,
        "r_att": attrs / len(goal.attributes) if goal.attributes else 1.0,
        "r_option": options / len(goal.options) if goal.options else 1.0,
        "r_price": float(price_ok),
        **flags,
    }
    return round(total, 6), parts


# ---- the world -----------------------------------------------------------------------------------------------
class ShopWorld:
    """The shop's browser state and its pages. Plain data plus a shared catalog and search engine."""

    def __init__(self, products: Sequence[Product], retriever: Any, mark_visited: bool = False) -> None:
        self.products = {p.asin: p for p in products}
        self.retriever = retriever
        self.mark_visited = mark_visited
        self.goal: ShopGoal | None = None
        self.reset(None)

    def reset(self, goal: ShopGoal | None) -> None:
        self.goal = goal
        self.page = "search"  # search | results | item | sub | done
        self.query = ""
        self.results: list[str] = []
        self.page_no = 1
        self.asin = ""
        self.chosen: dict[str, str] = {}
        self.sub = ""
        self.bought: tuple[str, dict[str, str]] | None = None
        self.visited: list[str] = []  # the products whose item page this episode opened, in order

    # the agent's two actions (the env's tools: their docstrings are what the model reads) --------------------
    def search(self, query: Annotated[str, Field(min_length=1, max_length=300)]) -> ToolResult:
        """Search the shop (from the search page); returns the first page of results.

        Args:
            query: Words to search the shop for.
        """
        if self.page == "done":
            return ToolResult("The purchase is done; nothing more can be searched.", success=False)
        if self.page != "search":
            return ToolResult(
                f"There is no search box on this page. Click [{BACK}] first.\n\n{self.render()}",
                success=False,
            )
        hits = self.retriever.search([query], SEARCH_RESULTS)[0]
        self.query, self.results, self.page_no, self.page = query, [p.id for p in hits], 1, "results"
        return ToolResult(self.render(), success=bool(hits))

    def click(self, button: Annotated[str, Field(min_length=1, max_length=300)]) -> ToolResult:
        """Click a button shown in [brackets] on the current page (a product id, an option, Next >, Buy Now, ...).

        Args:
            button: The text of a button shown in [brackets] on the page.
        """
        target = button.strip().strip("[]").strip()
        options = self.clickables()
        match = next((b for b in options if b.lower() == target.lower()), None)
        if match is None:
            shown = ", ".join(f"[{b}]" for b in options) or "none"
            return ToolResult(
                f"There is no button {button[:80]!r} on this page. Clickable: {shown}.", success=False
            )
        if match == BACK:
            self.page, self.asin, self.chosen, self.sub = "search", "", {}, ""
        elif match == NEXT:
            self.page_no += 1
        elif match == PREV and self.page == "results":
            self.page_no -= 1
        elif match == PREV:  # from an item page to its results, from a sub page to its item
            self.page, self.sub = ("results", "") if self.page == "item" else ("item", "")
            if self.page == "results":
                self.asin, self.chosen = "", {}
        elif self.page == "results":
            self.page, self.asin, self.chosen = "item", match, {}
            if match not in self.visited:
                self.visited.append(match)
        elif match in SUBPAGES:
            self.page, self.sub = "sub", match
        elif match == BUY:
            self.page = "done"
            self.bought = (self.asin, dict(self.chosen))
            score = webshop_reward(self.products[self.asin], self.goal, self.chosen)[0] if self.goal else 0.0
            return ToolResult(self.render(), terminal=True, metadata={"purchase": score})
        else:  # an option value
            name = next(n for n, values in self.products[self.asin].options if match in values)
            self.chosen[name] = match
        return ToolResult(self.render())

    # pages -------------------------------------------------------------------------------------------------
    def clickables(self) -> list[str]:
        if self.page == "results":
            out = [BACK]
            out += [PREV] if self.page_no > 1 else []
            out += [NEXT] if self.page_no * PAGE_SIZE < len(self.results) else []
            return out + self._page_asins()
        if self.page == "item":
            values = [v for _, vals in self.products[self.asin].options for v in vals]
            return [BACK, PREV, *values, *SUBPAGES, BUY]
        if self.page == "sub":
            return [BACK, PREV]
        return []

    def _page_asins(self) -> list[str]:
        start = (self.page_no - 1) * PAGE_SIZE
        return self.results[start : start + PAGE_SIZE]

    def render(self) -> str:
        if self.page == "search":
            return "[Search]"
        if self.page == "results":
            lines = [
                f"[{BACK}]"
                + (f" [{PREV}]" if self.page_no > 1 else "")
                + (f" [{NEXT}]" if self.page_no * PAGE_SIZE < len(self.results) else ""),
                f"Page {self.page_no} (Total results: {len(self.results)})",
            ]
            for asin in self._page_asins():
                p = self.products[asin]
                seen = " (visited)" if self.mark_visited and asin in self.visited else ""
                lines.append(f"[{asin}] {p.title} | ${p.price:.2f}{seen}")
            if not self.results:
                lines.append("No product matches this search.")
            return "\n".join(lines)
        p = self.products[self.asin] if self.asin else None
        if self.page == "item" and p is not None:
            lines = [f"[{BACK}] [{PREV}]", p.title, f"Price: ${p.price:.2f} | Rating: {p.rating or 'N.A.'}"]
            for name, values in p.options:
                shown = " ".join(f"[*{v}*]" if self.chosen.get(name) == v else f"[{v}]" for v in values)
                lines.append(f"{name}: {shown}")
            lines.append(" ".join(f"[{b}]" for b in (*SUBPAGES, BUY)))
            return "\n".join(lines)
        if self.page == "sub" and p is not None:
            body = {
                "Description": p.description or "(no description)",
                "Features": "\n".join(p.bullet_points) or "(no features)",
                "Reviews": "\n".join(p.reviews) or "(no reviews)",
            }[self.sub]
            return f"[{BACK}] [{PREV}]\n{body}"
        if self.page == "done" and p is not None:
            chosen = ", ".join(f"{k}: {v}" for k, v in self.chosen.items()) or "no options"
            return f"You bought {p.title} ({chosen}) for ${p.price:.2f}. The episode is over."
        return "[Search]"

    def state_key(self) -> tuple:
        key = (self.page, self.query, self.page_no, self.asin, tuple(sorted(self.chosen.items())), self.sub)
        return (*key, tuple(sorted(self.visited))) if self.mark_visited else key  # the marks are on the page


SHOP_PROMPT = (
    "You are shopping in a web shop. Find the product that matches the instruction below and buy it: search, "
    "open products, check their options and details, select the options the instruction asks for, then click "
    "[Buy Now]. Buying ends the episode.\n\nInstruction: {instruction}\n\n[Search]"
)


def _catalog(
    num_products: int, seed: int, knockoff_share: float
) -> tuple[tuple[Product, ...], tuple[ShopGoal, ...]]:
    def build():
        products = generate_catalog(num_products, seed, knockoff_share)
        return products, generate_goals(products, seed)

    return shared("shop-catalog", (num_products, seed, knockoff_share), build)


class WebShopEnv(ToolEnv):
    """A WebShop-style shop: search, browse, pick options, buy.

    Args:
        split: ``"train"`` or ``"test"`` (the first ``num_test`` goals).
        num_products: size of the procedural catalog (one goal per product).
        catalog_seed: the procedural catalog and its goals.
        num_test: how many goals are held out.
        knockoff_share: the share of the procedural catalog's products another seller lists again, overpriced or
            with one value per option (:func:`~agentr1_gym.data.webshop.generate_catalog`; 0: the catalog before
            0.4, in which buying the first hit with the instruction's options met about half the goals).
        data_path: a directory with WebShop's own ``items_shuffle*.json`` and ``items_ins_v2*.json`` (and
            ``items_human_ins.json`` with ``human_goals=True``) instead of the procedural catalog.
        oracle: how :meth:`oracle_action` chooses the product to open. ``"direct"`` (the default) opens the first
            listed product that meets the whole instruction, a choice the results page does not show (which
            listing offers the instruction's options is seen only on its item page). ``"browse"`` decides from
            what the pages show: it opens the first listing of the instruction's product type within its price,
            and on the item page goes back (``< Prev``) to the next one when the product lacks an option the
            instruction asks for or does not meet it, so its transcripts teach checking a product and going back.
        oracle_thoughts: with ``oracle="browse"``, each oracle turn opens with a short ``<think>`` that says why,
            from what the page shows (``<think>$23.63, under $40.00: open it</think>``, ``<think>no original
            here: back</think>``), so a warm start imitates the check as well as the click. A ConfigError with
            the direct oracle, whose choice rests on what the pages do not show.
        mark_visited: the results page marks each listing whose item page this episode opened ``(visited)``, as a
            browser shows visited links, so a policy that went back from a product can see it on the page (under
            ``context="state"`` the only place it can) instead of opening it again. Off by default: WebShop's
            pages have no such mark.
        oracle_skip_thought: with ``oracle_thoughts`` and ``mark_visited``, an oracle turn that passes over a
            marked listing says so first (``<think>skip visited; $18.99, under $40.00: open it</think>``). Off by
            default: a warm start on these transcripts learned the words, not the choice (0.045 held-out against
            0.105 without them, ``learning_shop_browse_skip_amx.json``).
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings` (default ``max_turns=15``, WebShop's budget).

    Metrics: ``full_match`` (the purchase meets the whole instruction: WebShop's reward is 1; the default answer
    score and the success rule), ``reward`` (WebShop's score of the purchase, 0 without one), ``r_type``,
    ``r_att``, ``r_option``, ``r_price``, ``bought``.
    """

    default_max_turns = 15  # WebShop's budget

    process_rewards = (
        ProcessReward("purchase", 0.2, "WebShop's reward of the purchase, on the step that buys"),
    )
    answer_metrics = ("full_match", "reward")
    success_metric = "full_match"
    final_answer = False

    def __init__(
        self,
        *,
        split: str = "train",
        num_products: int = 2000,
        catalog_seed: int = 0,
        num_test: int = 500,
        data_path: str | Path | None = None,
        human_goals: bool = False,
        knockoff_share: float = KNOCKOFF_SHARE,
        oracle: str = "direct",
        oracle_thoughts: bool = False,
        mark_visited: bool = False,
        oracle_skip_thought: bool = False,
        **settings: Any,
    ) -> None:
        if split not in ("train", "test"):
            raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
        if oracle not in ORACLES:
            raise ConfigError(f"oracle must be one of {', '.join(map(repr, ORACLES))}, got {oracle!r}")
        if not isinstance(oracle_thoughts, bool):
            raise ConfigError(f"oracle_thoughts must be True or False, got {oracle_thoughts!r}")
        if not isinstance(mark_visited, bool):
            raise ConfigError(f"mark_visited must be True or False, got {mark_visited!r}")
        if not isinstance(oracle_skip_thought, bool):
            raise ConfigError(f"oracle_skip_thought must be True or False, got {oracle_skip_thought!r}")
        if oracle_skip_thought and not (oracle_thoughts and mark_visited):
            raise ConfigError(
                "oracle_skip_thought=True needs oracle_thoughts=True and mark_visited=True: it is a thought about "
                "the marks on the page"
            )
        if oracle_thoughts and oracle != "browse":
            raise ConfigError(
                f"oracle_thoughts=True needs oracle='browse' (got {oracle!r}): the direct oracle's choice rests on "
                "what the pages do not show, so it has no reason to give"
            )
        self.oracle, self.oracle_thoughts = oracle, oracle_thoughts
        self.oracle_skip_thought = oracle_skip_thought
        if human_goals and data_path is None:
            raise ConfigError("human_goals=True reads WebShop's items_human_ins.json: pass data_path= too")
        if data_path is not None:
            products, goals = load_webshop(data_path, human_goals=human_goals, seed=catalog_seed)
            source = f"webshop:{Path(data_path).resolve()}"
        else:
            if num_products < 2:
                raise ConfigError(f"num_products must be >= 2, got {num_products}")
            if not 0.0 <= knockoff_share <= 1.0:
                raise ConfigError(f"knockoff_share must be in [0, 1], got {knockoff_share!r}")
            products, goals = _catalog(num_products, catalog_seed, knockoff_share)
            source = f"shop:{num_products}:{catalog_seed}:{knockoff_share}"
        held = min(num_test, len(goals) // 2)
        self.tasks = goals[:held] if split == "test" else goals[held:]
        if not self.tasks:
            raise ConfigError(f"the {split!r} split has no goals (num_test={num_test}, {len(goals)} goals)")
        self.split = split
        corpus = shared("shop-corpus", source, lambda: catalog_corpus(products, source))
        self.world = ShopWorld(products, shared_bm25(corpus), mark_visited=mark_visited)
        # the world's moves as tools; they answer every input themselves, so an exception there is a bug: it raises
        super().__init__(
            [tool(self.world.search, errors="raise"), tool(self.world.click, errors="raise")], **settings
        )
        # the oracle's own state: searching the goal product's title (after the last results page), and the
        # products the browsing oracle opened and went back from
        self._oracle_by_title = False
        self._oracle_rejected: set[str] = set()

    def split_kwargs(self, split: str) -> dict[str, Any]:
        """The shop's own split: the first ``num_test`` goals are held out."""
        return {"split": split}

    def task_prompt(self, task: ShopGoal) -> str:
        return SHOP_PROMPT.format(instruction=task.instruction)

    def on_reset(self) -> None:
        self.world.reset(self.task)
        self._oracle_by_title = False
        self._oracle_rejected = set()

    def task_answers(self, task: ShopGoal) -> tuple[str, ...]:
        return ()

    def score_answer(self, answer: str | None) -> dict[str, float]:
        keys = ("full_match", "reward", "r_type", "r_att", "r_option", "r_price", "bought")
        if self.world.bought is None:
            return dict.fromkeys(keys, 0.0)
        asin, chosen = self.world.bought
        reward, parts = webshop_reward(self.world.products[asin], self.task, chosen)
        parts = {k: parts[k] for k in ("r_type", "r_att", "r_option", "r_price")}
        return {"full_match": float(reward >= 1.0), "reward": reward, **parts, "bought": 1.0}

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        return {"purchase": result.metadata["purchase"]} if "purchase" in result.metadata else {}

    def process_reward_caps(self) -> dict[str, float]:
        return {"purchase": 1.0}

    def state_key(self) -> tuple:
        return self.world.state_key()

    def state_text(self) -> str:
        """The current page, the options chosen and the last action's result where it was not the page (an
        error): what ``context='state'`` shows instead of the history (the instruction is in the task message)."""
        w = self.world
        page = w.render()
        chosen = ", ".join(f"{k}: {v}" for k, v in w.chosen.items()) or "none"
        last = self.last_feedback()
        note = f"Last result: {last.splitlines()[0][:300]}\n" if last and page not in last else ""
        query = f" for '{w.query}'" if w.query and w.page in ("results", "item", "sub") else ""
        return f"{note}Page: {w.page}{query}\nOptions chosen: {chosen}\n{page}"

    def _missing_options(self, asin: str) -> list[str]:
        """The instruction's option values that ``asin``'s item page does not offer."""
        offered = {v for _, values in self.world.products[asin].options for v in values}
        return [v for v in self.task.options if v not in offered]

    def _meets(self, asin: str) -> bool:
        """Whether buying ``asin`` with the goal's option values earns WebShop's full reward."""
        product, goal = self.world.products[asin], self.task
        if self._missing_options(asin):
            return False
        chosen = {n: v for n, values in product.options for v in goal.options if v in values}
        return webshop_reward(product, goal, chosen)[0] >= 1.0

    def _looks_right(self, asin: str) -> bool:
        """What a results line shows of ``asin`` fits the instruction: its title names the instruction's product
        type (every type word) and its price is within the bound ("browse" oracle)."""
        product, goal = self.world.products[asin], self.task
        title = product.title.lower()
        return product.price <= goal.price_upper and all(w.lower() in title for w in goal.type_words)

    def random_action(self) -> str:
        """On the search page, search the instruction; elsewhere, click a random button of the page."""
        self._require_task("random_action()")
        buttons = self.world.clickables()
        if not buttons:
            return self.call_text("search", query=self.task.instruction)
        return self.call_text("click", button=buttons[int(self.np_random.integers(len(buttons)))])

    def _said(self, thought: str, name: str, **arguments: Any) -> str:
        """An oracle turn: the call, after ``<think>thought</think>`` where the env gives its oracle's reasons."""
        call = self.call_text(name, **arguments)
        return f"<think>{thought}</think>\n{call}" if self.oracle_thoughts else call

    def _why_not(self, asin: str) -> str:
        """What the item page of ``asin`` shows against the instruction (the browsing oracle's reason to leave)."""
        product, goal = self.world.products[asin], self.task
        if product.price > goal.price_upper:
            return f"${product.price:.2f} is over ${goal.price_upper:.2f}"
        missing = self._missing_options(asin)
        if missing:
            return f"no {missing[0]} here"
        return "it does not fit the instruction"

    def _results_choice(self, bound: str) -> tuple[str, str]:
        """The oracle's thought and button on a results page."""
        goal, w = self.task, self.world
        if self.oracle == "browse":  # the first listing that looks right and was not opened already
            meets = [a for a in w._page_asins() if a not in self._oracle_rejected and self._looks_right(a)]
        else:  # the first product on the page that meets the whole instruction
            meets = [a for a in w._page_asins() if self._meets(a)]
        if meets:
            return f"${w.products[meets[0]].price:.2f}, under {bound}: open it", meets[0]
        if self.oracle == "direct" and goal.asin in w._page_asins():
            return "", goal.asin  # (the direct oracle has no thoughts)
        if NEXT in w.clickables():
            return f"nothing else under {bound} here: next page", NEXT
        if self._oracle_by_title and self.oracle == "browse" and goal.asin in w._page_asins():
            self._oracle_rejected.discard(goal.asin)  # searched by its title: the goal's own product
            return "the title's product: open it", goal.asin
        self._oracle_by_title = True
        return "nothing fits: search again", BACK

    def _passed_visited(self, button: str) -> str:
        """``"skip visited; "`` where the results page marks ``(visited)`` a listing above the one ``button`` opens
        (every listing on it, for a page button). Only with ``oracle_skip_thought`` (which needs marked pages),
        and read off the world's own visited list, so the thought says exactly what the page marks; else ``""``."""
        if not self.oracle_skip_thought:
            return ""
        page = self.world._page_asins()
        above = page[: page.index(button)] if button in page else page
        return "skip visited; " if any(a in self.world.visited for a in above) else ""

    def oracle_action(self) -> str:
        """Search the goal's attributes and product type, open the first listed product that meets the whole
        instruction (paging on; after the last page, search the goal product's title instead), pick the
        instruction's options, buy it. With ``oracle="browse"`` it opens the first listing of the right type
        within the price instead, and goes back to the next one from a product that does not meet the
        instruction (one lacking an asked-for option, mostly: the item page shows it); with ``oracle_thoughts``
        each turn says why first."""
        self._require_task("oracle_action()")
        goal: ShopGoal = self.task
        w = self.world
        bound = f"${goal.price_upper:.2f}"  # (thoughts stay short: a turn has max_new_tokens)
        if w.page == "search":
            if self._oracle_by_title:
                return self._said("none fit: search the title", "search", query=goal.name)
            query = f"{' '.join(goal.attributes)} {goal.query}"
            return self._said(f"under {bound}: search", "search", query=query)
        if w.page == "results":
            thought, button = self._results_choice(bound)
            return self._said(self._passed_visited(button) + thought, "click", button=button)
        if w.page == "sub":
            return self._said("back to the product", "click", button=PREV)
        if w.asin != goal.asin and not self._meets(w.asin):
            self._oracle_rejected.add(w.asin)
            return self._said(f"{self._why_not(w.asin)}: back", "click", button=PREV)
        product = w.products[w.asin]
        names = goal.option_names or tuple(
            next((n for n, vals in product.options if v in vals), "") for v in goal.options
        )
        for name, value in zip(names, goal.options):
            if w.chosen.get(name) != value:
                return self._said(f"{value} is offered: choose it", "click", button=value)
        return self._said("all chosen: buy", "click", button=BUY)
