"""Products and shopping goals for the WebShop-style world: a procedural catalog, and the official WebShop files.

:func:`generate_catalog` builds a catalog the way WebShop's scraped one is shaped: products with a category path,
a search query they were found under, a title, a price, attributes (``"sulfate free"``), options to choose
(``size: 16 fl oz``), bullet points, a description and reviews. Several brands sell every product type with
overlapping attributes, and most products are listed a second time by another seller (a knock-off: the same
attributes under a title that repeats them, overpriced or with one value per option), so the first hit of a
search rarely meets a goal: buying it with the options the instruction names met 3.5% of 200 held-out goals,
against 52.5% in the catalog without knock-offs (``benchmarks/results/shop_shortcuts.json``); the agent has to
read prices and options. Goals are made from the original products as WebShop's synthetic instructions are (some
of the target's attributes, one value of each option, and a price bound just above its price): ``"i am looking
for a sulfate free shampoo for dry hair, with size: 16 fl oz, and price lower than 20.00 dollars"``.

:func:`load_webshop` reads WebShop's own files (``items_shuffle*.json`` with ``items_ins_v2*.json``, or
``items_human_ins.json`` for human goals) where a user has them, with WebShop's rules for prices and goals.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.errors import DataError

__all__ = [
    "KNOCKOFF_SHARE",
    "Product",
    "ShopGoal",
    "catalog_corpus",
    "generate_catalog",
    "generate_goals",
    "load_webshop",
]


class Product(BaseModel):
    """One product, in WebShop's fields."""

    model_config = ConfigDict(frozen=True)

    asin: str
    title: str
    category: str  # top level ("beauty")
    product_category: str  # "Beauty & Personal Care › Hair Care › Shampoo"
    query: str  # the search it was found under (WebShop's scrape query)
    price: float
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, values) in display order
    bullet_points: tuple[str, ...] = ()
    description: str = ""
    reviews: tuple[str, ...] = ()
    rating: float = 0.0
    type_words: tuple[
        str, ...
    ] = ()  # the product type's nouns (WebShop parses them from the title with spaCy)
    #: another seller's listing of a catalog product (procedural catalog): the same attributes and bullets under a
    #: keyword-heavy title, but overpriced or with one value per option; no goal is made from it (see
    #: :func:`generate_catalog`)
    knockoff: bool = False

    def option_dict(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)

    def search_text(self) -> str:
        """What the shop's search engine indexes (title, attributes, bullet points)."""
        return " ".join((self.title, " ".join(self.attributes), " ".join(self.bullet_points)))


class ShopGoal(BaseModel):
    """A shopping instruction and what it asks for (WebShop's goal fields)."""

    model_config = ConfigDict(frozen=True)

    id: str
    asin: str  # the product it was made from (any product meeting it scores as well)
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # option values (human goals carry no option names)
    option_names: tuple[str, ...] = ()  # parallel to ``options`` where known (synthetic goals)
    price_upper: float
    query: str
    category: str
    product_category: str
    name: str  # the target's title (type reward)
    type_words: tuple[str, ...] = ()


# ---- the procedural catalog ---------------------------------------------------------------------------------
#: category -> (department path, attribute vocabulary, product types); a type is (noun phrase, option schemes,
#: price range)
_SIZES_LIQUID = ("size", ("4 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"))
_SIZES_CLOTHES = ("size", ("small", "medium", "large", "x-large", "xx-large"))
_SIZES_SHOES = ("size", ("7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12"))
_COLORS = ("color", ("black", "white", "navy blue", "grey", "red", "beige", "dark brown", "pink", "green"))
_SCENTS = ("scent", ("lavender", "citrus", "unscented", "coconut", "eucalyptus", "rose", "vanilla"))
_FLAVORS = ("flavor", ("original", "sea salt", "chocolate", "vanilla", "honey", "spicy", "lemon"))
_COUNTS = ("pack size", ("1 count", "2 count", "3 count", "6 count", "12 count", "24 count"))
_CAPACITY = ("capacity", ("32gb", "64gb", "128gb", "256gb"))
_MATERIALS = ("material", ("cotton", "polyester", "wool blend", "linen", "bamboo"))

CATEGORIES: dict[str, tuple[str, tuple[str, ...], tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...], tuple[int, int]], ...]]] = {
    "beauty": (
        "Beauty & Personal Care",
        (
            "sulfate free", "paraben free", "cruelty free", "long lasting", "natural ingredients",
            "for dry skin", "for sensitive skin", "for dry hair", "travel size", "vegan", "fragrance free",
            "dermatologist tested", "moisturizing", "easy to apply",
        ),
        (
            ("shampoo", (_SIZES_LIQUID, _SCENTS), (6, 30)),
            ("conditioner", (_SIZES_LIQUID, _SCENTS), (6, 30)),
            ("body lotion", (_SIZES_LIQUID, _SCENTS), (5, 25)),
            ("face serum", (_SIZES_LIQUID,), (10, 60)),
            ("lip balm", (_COUNTS, _FLAVORS), (3, 15)),
            ("hair extension", (_COLORS,), (15, 80)),
            ("nail polish", (_COLORS,), (4, 18)),
        ),
    ),
    "grocery": (
        "Grocery & Gourmet Food",
        (
            "gluten free", "non gmo", "organic", "keto friendly", "low sugar", "high protein", "sugar free",
            "kosher", "individually wrapped", "ready to eat", "plant based", "caffeine free",
        ),
        (
            ("protein bar", (_FLAVORS, _COUNTS), (8, 40)),
            ("beef jerky", (_FLAVORS, _COUNTS), (6, 35)),
            ("green tea", (_FLAVORS, _COUNTS), (4, 25)),
            ("trail mix", (_FLAVORS, _COUNTS), (5, 30)),
            ("dark chocolate", (_FLAVORS, _COUNTS), (4, 28)),
            ("coffee beans", (_FLAVORS, _COUNTS), (9, 45)),
        ),
    ),
    "fashion": (
        "Clothing, Shoes & Jewelry",
        (
            "machine washable", "slim fit", "relaxed fit", "moisture wicking", "quick drying", "long sleeve",
            "short sleeve", "button closure", "elastic waist", "water resistant", "non slip", "breathable",
        ),
        (
            ("t-shirt", (_COLORS, _SIZES_CLOTHES), (8, 35)),
            ("hoodie", (_COLORS, _SIZES_CLOTHES), (18, 60)),
            ("running shoes", (_COLORS, _SIZES_SHOES), (30, 120)),
            ("yoga pants", (_COLORS, _SIZES_CLOTHES), (15, 50)),
            ("rain jacket", (_COLORS, _SIZES_CLOTHES), (30, 110)),
            ("wool socks", (_COLORS, _SIZES_CLOTHES, _MATERIALS), (6, 25)),
        ),
    ),
    "electronics": (
        "Electronics",
        (
            "fast charging", "wireless", "noise cancelling", "waterproof", "bluetooth", "usb c",
            "long battery life", "easy to install", "high definition", "compact design", "dual band",
        ),
        (
            ("phone case", (_COLORS,), (6, 30)),
            ("wireless earbuds", (_COLORS,), (20, 150)),
            ("power bank", (_COLORS, _CAPACITY), (15, 70)),
            ("usb cable", (_COLORS, _COUNTS), (5, 20)),
            ("memory card", (_CAPACITY,), (6, 45)),
            ("bluetooth speaker", (_COLORS,), (20, 120)),
        ),
    ),
    "home": (
        "Home & Kitchen",
        (
            "dishwasher safe", "bpa free", "easy to clean", "non stick", "space saving", "heavy duty",
            "stainless steel", "eco friendly", "machine washable", "wall mounted", "lightweight",
        ),
        (
            ("water bottle", (_COLORS, _SIZES_LIQUID), (8, 40)),
            ("throw pillow cover", (_COLORS, _MATERIALS), (7, 30)),
            ("frying pan", (_COLORS,), (15, 70)),
            ("storage basket", (_COLORS, _COUNTS), (10, 45)),
            ("bath towel", (_COLORS, _MATERIALS, _COUNTS), (10, 55)),
            ("scented candle", (_SCENTS, _COUNTS), (8, 35)),
        ),
    ),
}  # fmt: skip

_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ra",
    "ve",
    "to",
    "sa",
    "no",
    "zi",
    "pe",
    "qu",
    "lu",
    "bri",
    "dex",
    "fo",
    "ma",
)
_REVIEW_TEMPLATES = (
    "Exactly as described, I would buy it again.",
    "Good value for the price.",
    "It arrived quickly and works well.",
    "Not bad, but the {attr} claim is a stretch.",
    "Love that it is {attr}.",
    "Smaller than I expected.",
)


def _brands(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    while len(names) < n:
        names.add("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 3))).capitalize())
    return sorted(names)


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


#: the share of the procedural catalog's products that another seller also lists (:attr:`Product.knockoff`)
KNOCKOFF_SHARE = 0.9


def generate_catalog(
    num_products: int = 2000, seed: int = 0, knockoff_share: float = KNOCKOFF_SHARE
) -> tuple[Product, ...]:
    """A deterministic catalog of ``num_products`` products over 31 product types in 5 departments, plus
    knock-off listings.

    As in a real marketplace, ``knockoff_share`` of the products are listed a second time by another seller
    (:attr:`Product.knockoff`): the same attributes and bullets, every attribute in its title and once more in a
    bullet, so the knock-off ranks at or near the top of a search for the product's words, but it costs far more
    than any goal made from the original allows, or offers a single value of each option. Buying the first hit of the bare instruction
    and clicking the options it names therefore rarely meets the goal (``benchmarks/shop_shortcuts.py`` measures
    how rarely); reading the price and the options does. Goals are made from the originals only."""
    if num_products < 1:
        raise DataError(f"num_products must be >= 1, got {num_products}")
    if not 0.0 <= knockoff_share <= 1.0:
        raise DataError(f"knockoff_share must be in [0, 1], got {knockoff_share}")
    rng = random.Random(seed)
    brands = _brands(rng, 60)
    types = [
        (cat, dept, vocab, noun, schemes, prices)
        for cat, (dept, vocab, kinds) in CATEGORIES.items()
        for noun, schemes, prices in kinds
    ]
    taken: set[str] = set()
    products = []
    for i in range(num_products):
        cat, dept, vocab, noun, schemes, (lo, hi) = types[i % len(types)]
        brand = rng.choice(brands)
        attrs = tuple(sorted(rng.sample(vocab, rng.randint(2, 4))))
        options = [
            (name, tuple(rng.sample(values, rng.randint(2, min(5, len(values)))))) for name, values in schemes
        ]
        price = round(rng.uniform(lo, hi), 2)
        shown = attrs[: rng.randint(1, len(attrs))]  # the title names some attributes
        title = f"{brand} {' '.join(a.title() for a in shown)} {noun.title()}"
        if rng.random() < 0.5:
            title += f" - {attrs[-1].capitalize()}"
        bullets = tuple(f"{a.capitalize()}: {_bullet(noun, a)}" for a in attrs)
        description = (
            f"The {brand} {noun} is {', '.join(attrs[:-1]) + ' and ' + attrs[-1] if len(attrs) > 1 else attrs[0]}. "
            f"Available in {len(options[0][1])} {options[0][0]} options."
        )
        reviews = tuple(t.format(attr=attrs[0]) for t in rng.sample(_REVIEW_TEMPLATES, 2))
        products.append(
            Product(
                asin=_asin(rng, taken),
                title=title,
                category=cat,
                product_category=f"{dept} › {cat.title()} › {noun.title()}",
                query=noun,
                price=price,
                attributes=attrs,
                options=tuple(options),
                bullet_points=bullets,
                description=description,
                reviews=reviews,
                rating=round(rng.uniform(3.0, 5.0), 1),
                type_words=tuple(noun.replace("-", " ").split()),
            )
        )
    knockoffs = [_knockoff(p, rng, brands, taken) for p in products if rng.random() < knockoff_share]
    return tuple(products) + tuple(knockoffs)


def _knockoff(p: Product, rng: random.Random, brands: Sequence[str], taken: set[str]) -> Product:
    """Another seller's listing of ``p``: every attribute in the title (in the form original titles have), and either a price far above any goal's
    bound for ``p`` (a bound is at most 40 above its price) or one value of each option."""
    brand = rng.choice([b for b in brands if not p.title.startswith(b)])
    noun = p.query
    title = f"{brand} {' '.join(a.title() for a in p.attributes)} {noun.title()}"  # the originals' own form
    if rng.random() < 0.5:
        title += f" - {p.attributes[-1].capitalize()}"
    if rng.random() < 0.5:
        price, options = round(p.price + rng.uniform(45, 90), 2), p.options
    else:
        price, options = p.price, tuple((name, (rng.choice(values),)) for name, values in p.options)
    bullets = (*p.bullet_points, f"{p.query.capitalize()}: {', '.join(p.attributes)}.")  # its keywords, again
    return p.model_copy(update={"asin": _asin(rng, taken), "title": title, "price": price, "options": options,
                                "bullet_points": bullets, "knockoff": True,
                                "rating": round(rng.uniform(3.0, 5.0), 1)})  # fmt: skip


def _bullet(noun: str, attr: str) -> str:
    return f"this {noun} is {attr}, as tested by our team."


def price_bound(price: float, rng: random.Random) -> float:
    """WebShop's price bound for a goal: the larger of two of the next four multiples of 10 above ``price``, or
    no bound (1,000,000) near the top of the range."""
    above = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
    if len(above) < 2:
        return 1_000_000.0
    return max(rng.sample(above, 2))


def generate_goals(products: Sequence[Product], seed: int = 0, per_product: int = 1) -> tuple[ShopGoal, ...]:
    """WebShop-style synthetic goals: per product, some of its attributes, one value of each of its options,
    and a price bound above its price."""
    rng = random.Random(seed + 1)
    goals = []
    for p in products:
        if p.knockoff:
            continue
        for j in range(per_product):
            attrs = tuple(rng.sample(p.attributes, rng.randint(1, min(3, len(p.attributes)))))
            chosen = [(name, rng.choice(values)) for name, values in p.options]
            upper = price_bound(p.price, rng)
            text = f"i am looking for {_article(attrs[0])} {attrs[0]}"
            text += "".join(f", {a}" for a in attrs[1:-1]) + (f" and {attrs[-1]}" if len(attrs) > 1 else "")
            text += f" {p.query}"
            text += "".join(f", with {name}: {value}" if i == 0 else f", and {name}: {value}"
                            for i, (name, value) in enumerate(chosen))  # fmt: skip
            goals.append(
                _goal(p, f"{p.asin}-{j}", text, attrs, [v for _, v in chosen], [n for n, _ in chosen], upper)
            )
    return tuple(goals)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def catalog_corpus(products: Sequence[Product], source: str) -> Corpus:
    """The search engine's corpus: one passage per product (title, then attributes and bullet points)."""
    return Corpus((Passage(id=p.asin, title=p.title, text=p.search_text()) for p in products), source=source)


# ---- WebShop's own files -----------------------------------------------------------------------------------
def _price(pricing: Any) -> float:
    """WebShop's ``pricing`` string (``"$12.99"`` or ``"$10.00$20.00"``): the lowest price; 100 when missing."""
    if not isinstance(pricing, str) or "$" not in pricing:
        return 100.0
    prices = []
    for part in pricing.split("$")[1:]:
        try:
            prices.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    return min(prices) if prices else 100.0


_STOP = frozenset(
    ("a", "an", "the", "and", "or", "of", "for", "with", "in", "on", "to", "by", "from", "at", "as", "is", "are",
     "this", "that", "these", "those", "your", "our", "its", "it", "be", "pack", "set", "count", "size", "color",
     "oz", "fl", "inch", "inches", "ft", "cm", "mm", "new")
)  # fmt: skip


def type_words(title: str) -> tuple[str, ...]:
    """The words of a title that can name a product type (spaCy's noun parse in WebShop; here: alphabetic words
    of three letters or more, stop words and measurement words left out)."""
    return tuple(w for w in re.findall(r"[a-z][a-z\-]{2,}", title.lower()) if w not in _STOP)


def load_webshop(
    data_path: str | Path, *, human_goals: bool = False, seed: int = 0, num_products: int | None = None
) -> tuple[tuple[Product, ...], tuple[ShopGoal, ...]]:
    """Products and goals from WebShop's files in ``data_path`` (a directory): ``items_shuffle*.json`` (the
    products), ``items_ins_v2*.json`` (attributes and synthetic instructions) and, for ``human_goals``,
    ``items_human_ins.json``. Synthetic goals are expanded over option combinations as WebShop does, capped at
    the first 10 per product."""
    root = Path(data_path)
    if not root.is_dir():
        raise DataError(
            f"{root}: expected a directory holding WebShop's items_shuffle*.json and items_ins_v2*.json"
        )
    items = _one(root, "items_shuffle*.json")
    attrs_file = _one(root, "items_ins_v2*.json")
    try:
        raw_items = json.loads(items.read_text())
        raw_attrs = json.loads(attrs_file.read_text())
        raw_human = json.loads(_one(root, "items_human_ins*.json").read_text()) if human_goals else {}
    except (OSError, ValueError) as exc:
        raise DataError(f"{root}: cannot read WebShop files ({exc})") from None
    if not isinstance(raw_items, list) or not isinstance(raw_attrs, dict):
        raise DataError(f"{items.name} must hold a JSON list and {attrs_file.name} a JSON object")
    products: list[Product] = []
    seen: set[str] = set()
    for i, p in enumerate(raw_items[:num_products] if num_products else raw_items):
        try:
            asin = str(p["asin"])
            if asin == "nan" or len(asin) > 10 or asin in seen:
                continue
            seen.add(asin)
            options = []
            for name, contents in (p.get("customization_options") or {}).items():
                if contents:
                    values = tuple(
                        _not_a_button(str(c["value"]).strip().replace("/", " | ").lower(), name.lower())
                        for c in contents
                    )
                    options.append((name.lower(), values))
            small = p.get("small_description") or []
            bullets = tuple(small if isinstance(small, list) else [small])
            title = str(p["name"])
            products.append(
                Product(
                    asin=asin,
                    title=title,
                    category=str(p.get("category", "")),
                    product_category=str(p.get("product_category", "")),
                    query=str(p.get("query", "")),
                    price=_price(p.get("pricing")),
                    attributes=_strings(raw_attrs.get(asin, {}).get("attributes")) or ("DUMMY_ATTR",),
                    options=tuple(options),
                    bullet_points=tuple(str(b) for b in bullets),
                    description=str(p.get("full_description") or ""),
                    type_words=type_words(title),
                )
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(
                f"{items}: product {i} is not in WebShop's format ({type(exc).__name__}: {exc})"
            ) from None
    if not products:
        raise DataError(f"{items} holds no products")
    try:
        goals = _webshop_goals(products, raw_attrs, raw_human, human_goals, seed)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise DataError(
            f"{root}: a goal is not in WebShop's format ({type(exc).__name__}: {exc})"[:300]
        ) from None
    if not goals:
        raise DataError(f"{root}: no product has an instruction with attributes (no goals)")
    return tuple(products), tuple(goals)


def _webshop_goals(
    products: Sequence[Product], raw_attrs: dict[str, Any], raw_human: Any, human_goals: bool, seed: int
) -> list[ShopGoal]:
    rng = random.Random(seed)
    goals: list[ShopGoal] = []
    for p in products:
        if human_goals:
            for j, ins in enumerate(raw_human.get(p.asin, [])):
                if not ins.get("instruction_attributes"):
                    continue
                goals.append(_goal(p, f"{p.asin}-h{j}", ins["instruction"].strip("."), ins["instruction_attributes"],
                                   ins.get("instruction_options") or [], (), price_bound(p.price, rng)))  # fmt: skip
            continue
        info = raw_attrs.get(p.asin, {})
        if not info.get("instruction") or not info.get("instruction_attributes"):
            continue
        names = [n for n, _ in p.options]
        combos: list[list[str]] = [[]]
        for _, values in sorted(p.options):
            combos = [[*c, v] for c in combos for v in values][:10]
        for j, combo in enumerate(combos):
            chosen = list(zip(sorted(names), combo))
            text = info["instruction"] + (
                " with " + ", and ".join(f"{n}: {v}" for n, v in chosen) if chosen else ""
            )
            goals.append(_goal(p, f"{p.asin}-{j}", text, info["instruction_attributes"],
                               [v for _, v in chosen], [n for n, _ in chosen], price_bound(p.price, rng)))  # fmt: skip
    return goals


def _strings(value: Any) -> tuple[str, ...]:
    """A field that should list strings: a single string is one item (``"organic"``, not its letters)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


#: the shop's page buttons (an option value spelled like one would be clicked as the button instead)
BUTTONS = frozenset(("next >", "< prev", "back to search", "buy now", "description", "features", "reviews"))


def _not_a_button(value: str, name: str) -> str:
    """An option value that reads like a page button gets its option's name appended, so it stays clickable."""
    return f"{value} ({name})" if value.strip().lower() in BUTTONS else value


def _goal(p: Product, gid: str, text: str, attributes, options, names, upper: float) -> ShopGoal:
    """A goal made from product ``p``; the price bound ``upper`` is appended to the instruction's text."""
    if upper < 1_000_000:
        text += f", and price lower than {upper:.2f} dollars"
    return ShopGoal(
        id=gid,
        asin=p.asin,
        instruction=text,
        attributes=_strings(attributes),
        options=_strings(options),
        option_names=tuple(names),
        price_upper=upper,
        query=p.query,
        category=p.category,
        product_category=p.product_category,
        name=p.title,
        type_words=p.type_words,
    )


def _one(root: Path, pattern: str) -> Path:
    found = sorted(root.glob(pattern))
    if not found:
        raise DataError(f"{root}: no file matching {pattern!r} (WebShop's data layout)")
    return found[0]
