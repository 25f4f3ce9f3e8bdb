"""Products, goals and the deterministic synthetic catalog (notebook 01).

``generate_catalog(CatalogConfig)`` builds a WebShop-like shop from ``product_types.PRODUCT_TYPES``: products in
families of near-duplicates (same type, slightly different attributes, options and price) and goals written from
several instruction phrasings. Target products of the train, val and test goals are disjoint. ``save_catalog`` /
``load_catalog`` write and read ``data/catalog.json`` and ``data/goals.json`` byte-for-byte reproducibly.

Beside the three committed splits, ``Catalog.split("practice")`` writes ``PRACTICE_GOALS`` further goals on the
train products alone (``practice_goals``; never saved, the same on every call): fresh instructions for RL once the
demonstrations have used most of the train split (``APOConfig.practice_goals``; docs/experiments.md).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path

from ..config import DATA_DIR, CatalogConfig
from ..files import atomic_write_text
from .product_types import BRANDS, PRODUCT_TYPES, ProductType

SPLITS = ("train", "val", "test")
PRACTICE = "practice"
"""The split of goals written on demand on the train products (``practice_goals``)."""
PRACTICE_GOALS = 3600
"""Goals of the practice split: two for each train goal."""
PRACTICE_SEED = 4099
"""Seed of the practice goals' draws, apart from the catalog's own so its committed goals stay as they are."""
ASIN_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


@dataclass
class Product:
    """One item of the shop, in the shape of WebShop's product records."""

    asin: str
    """Ten-character id, shown on result pages and clicked to open the item."""
    title: str
    """Product name as shown on result and item pages."""
    category: list[str]
    """Category path, most general first."""
    product_type: str
    """What kind of product it is (WebShop's ``query``), e.g. ``t-shirt``."""
    brand: str
    price: float
    """Price in dollars."""
    attributes: list[str]
    """Attribute phrases (WebShop's ``Attributes``) the reward matches goal attributes against."""
    options: dict[str, list[str]]
    """Option name -> values the buyer picks from on the item page."""
    bullets: list[str]
    """Feature bullet points (the ``features`` page)."""
    description: str
    """Free text (the ``description`` page)."""
    reviews: list[dict] = field(default_factory=list)
    """``{"rating": int, "text": str}`` records (the ``reviews`` page)."""

    @property
    def rating(self) -> float | None:
        """Mean review rating, or None without reviews."""
        return round(sum(r["rating"] for r in self.reviews) / len(self.reviews), 1) if self.reviews else None


@dataclass
class Goal:
    """A shopping instruction and what the reward checks (WebShop's goal records)."""

    instruction: str
    """The text the agent sees."""
    asin: str
    """The product the goal was written from; any product that meets it is rewarded as well."""
    product_type: str
    category: list[str]
    attributes: list[str]
    """1-3 attribute phrases the bought product must have."""
    options: dict[str, str]
    """0-2 option name -> value the buyer must select."""
    price_upper: float
    """Most the buyer will pay, in dollars."""
    target_title: str
    """Title of the target product (WebShop's goal ``name``; the type reward compares titles)."""
    split: str = "train"
    index: int = 0
    """Position in its split (``reset(options={"goal_index": i})``)."""


@dataclass
class Catalog:
    """Products plus goals by split; the data an environment is built from."""

    products: list[Product]
    goals: dict[str, list[Goal]]

    def __post_init__(self):
        self.by_asin = {p.asin: p for p in self.products}

    def split(self, name: str) -> list[Goal]:
        if name == PRACTICE and name not in self.goals:
            if "_practice" not in self.__dict__:  # written once per catalog, on first use
                self.__dict__["_practice"] = practice_goals(self)
            return self.__dict__["_practice"]
        if name not in self.goals:
            raise ValueError(f"unknown split {name!r}; this catalog has {sorted(self.goals)} and {PRACTICE!r}")
        return self.goals[name]

    @property
    def categories(self) -> list[str]:
        return sorted({p.category[0] for p in self.products})


# ---------------------------------------------------------------------------------------------- generation

INSTRUCTION_TEMPLATES = (
    "i'm looking for {a} {attrs} {type}{opts}, and price lower than {price} dollars",
    "i need {a} {type} that is {attrs}{opts}, and price lower than {price} dollars",
    "find me {a} {attrs} {type}{opts}, with a price lower than {price} dollars",
    "i want to buy {a} {type} which is {attrs}{opts}, priced under {price} dollars",
    "please get me {a} {attrs} {type}{opts}, for less than {price} dollars",
    "show me {a} {type}: {attrs}{opts}, under {price} dollars",
    "i am shopping for {a} {attrs} {type}{opts}; my budget is {price} dollars",
)
OPTION_PHRASES = {"color": "in {v}", "size": "size {v}"}
BULLET_TEMPLATES = ("{A}: made to last through daily use", "{A} for everyday comfort and value",
                    "{A}, checked by our quality team", "Designed to be {a}")
DESCRIPTION_TEMPLATES = (
    "{brand} makes this {type} for people who care about the details. {attrs}. Ships in recyclable packaging.",
    "Meet the {brand} {type}. Every unit is {attrs}. Backed by a 30 day return policy.",
    "A {type} from {brand} that keeps things simple: {attrs}. Care instructions are on the label.",
)
REVIEW_TEXTS = {5: "exactly as described, would buy again", 4: "good value, arrived quickly",
                3: "does the job, nothing special", 2: "smaller than i expected", 1: "not what i hoped for"}


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _make_product(rng: random.Random, ptype: ProductType, asin: str, brand: str, attributes: list[str],
                  options: dict[str, list[str]], price: float) -> Product:
    shown = attributes[:]
    rng.shuffle(shown)
    title = f"{brand.title()} {ptype.name.title()} - {', '.join(shown)}"
    bullets = [rng.choice(BULLET_TEMPLATES).format(A=a.capitalize(), a=a) for a in attributes]
    description = rng.choice(DESCRIPTION_TEMPLATES).format(brand=brand.title(), type=ptype.name, attrs=_join(attributes))
    reviews = [{"rating": (r := rng.choice((5, 5, 4, 4, 3, 2, 1))), "text": REVIEW_TEXTS[r]} for _ in range(rng.randint(0, 3))]
    return Product(asin, title, list(ptype.category), ptype.name, brand, price, attributes, options, bullets, description, reviews)


def _variant(rng: random.Random, ptype: ProductType, base: Product, asin: str) -> Product:
    """A near-duplicate of ``base``: one attribute swapped, options resampled, price moved by 10-60%."""
    attributes = base.attributes[:]
    spare = [a for a in ptype.attributes if a not in attributes]
    if spare and rng.random() < 0.8:
        attributes[rng.randrange(len(attributes))] = rng.choice(spare)
    options = {name: sorted(rng.sample(values, rng.randint(2, len(values))), key=values.index)
               for name, values in ptype.options.items()}
    price = round(base.price * rng.choice((0.6, 0.75, 1.15, 1.3, 1.6)), 2)
    brand = base.brand if rng.random() < 0.5 else rng.choice(BRANDS)
    return _make_product(rng, ptype, asin, brand, attributes, options, price)


def generate_products(num_products: int, seed: int) -> list[Product]:
    """``num_products`` products in families of 2-5 near-duplicates, cycling through the product types."""
    rng = random.Random(seed)
    taken: set[str] = set()
    products: list[Product] = []
    while len(products) < num_products:
        for ptype in PRODUCT_TYPES:
            if len(products) >= num_products:
                break
            attributes = rng.sample(ptype.attributes, rng.randint(2, min(4, len(ptype.attributes))))
            options = {name: sorted(rng.sample(values, rng.randint(2, len(values))), key=values.index)
                       for name, values in ptype.options.items()}
            price = round(rng.uniform(*ptype.price), 2)
            base = _make_product(rng, ptype, _asin(rng, taken), rng.choice(BRANDS), attributes, options, price)
            family = [base] + [_variant(rng, ptype, base, _asin(rng, taken)) for _ in range(rng.randint(1, 4))]
            products.extend(family[: num_products - len(products)])
    return products


def _price_upper(rng: random.Random, price: float) -> float:
    """A round budget 10-60% above the price (WebShop phrases budgets like ``30.00``)."""
    budget = price * rng.uniform(1.1, 1.6)
    step = 5 if budget < 50 else 10 if budget < 200 else 50
    return float(math.ceil(budget / step) * step)


def make_goal(rng: random.Random, product: Product, split: str, index: int) -> Goal:
    """A goal written from ``product``: some of its attributes and options, a budget above its price."""
    ptype = next(t for t in PRODUCT_TYPES if t.name == product.product_type)
    attributes = rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes))))
    names = rng.sample(sorted(product.options), rng.randint(0, min(2, len(product.options))))
    options = {name: rng.choice(product.options[name]) for name in sorted(names)}
    price_upper = _price_upper(rng, product.price)
    opts = "".join(", " + OPTION_PHRASES.get(n, "{n}: {v}").format(n=n, v=v) for n, v in options.items())
    instruction = rng.choice(INSTRUCTION_TEMPLATES).format(
        a=ptype.article, attrs=_join(attributes), type=ptype.name, opts=opts, price=f"{price_upper:.2f}")
    return Goal(instruction, product.asin, product.product_type, list(product.category), attributes, options,
                price_upper, product.title, split, index)


def practice_goals(catalog: Catalog, count: int = PRACTICE_GOALS, seed: int = PRACTICE_SEED) -> list[Goal]:
    """``count`` goals of the ``practice`` split, written by ``make_goal`` on the target products of the train goals
    in turn (a seeded order): instructions no committed goal and no earlier practice goal has, on products RL may
    practise on, none on a val or test product."""
    products = [catalog.by_asin[a] for a in sorted({g.asin for g in catalog.split("train")})]
    if not products:
        raise ValueError("the catalog has no train goals to write practice goals from")
    rng = random.Random(seed)
    rng.shuffle(products)
    seen = {g.instruction for goals in catalog.goals.values() for g in goals}
    goals, draws = [], 0
    while len(goals) < count:  # an instruction already written is drawn again: every practice goal is new
        goal = make_goal(rng, products[draws % len(products)], PRACTICE, len(goals))
        draws += 1
        if goal.instruction not in seen:
            seen.add(goal.instruction)
            goals.append(goal)
        elif draws > 10 * count:
            raise ValueError(f"could not write {count} distinct practice goals from {len(products)} train products")
    return goals


def generate_catalog(config: CatalogConfig = CatalogConfig()) -> Catalog:
    """The synthetic shop: products plus train / val / test goals whose target products are disjoint."""
    needed = config.test_targets + config.val_targets + 1
    if config.num_products < needed:
        raise ValueError(f"num_products={config.num_products} is too small for {config.test_targets} test and "
                         f"{config.val_targets} val targets; use at least {needed}")
    products = generate_products(config.num_products, config.seed)
    rng = random.Random(config.seed + 1)
    order = list(range(len(products)))
    rng.shuffle(order)
    targets = {"test": order[: config.test_targets],
               "val": order[config.test_targets: config.test_targets + config.val_targets],
               "train": order[config.test_targets + config.val_targets:]}
    goals: dict[str, list[Goal]] = {}
    for split in SPLITS:
        per_product = config.train_goals_per_product if split == "train" else 1
        picks = [i for i in sorted(targets[split]) for _ in range(per_product)]
        goals[split] = [make_goal(rng, products[i], split, k) for k, i in enumerate(picks)]
    return Catalog(products, goals)


# ---------------------------------------------------------------------------------------------- files

CATALOG_FILE = "catalog.json"
GOALS_FILE = "goals.json"


def _dumps(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def catalog_to_json(catalog: Catalog) -> tuple[str, str]:
    """The text of ``catalog.json`` and ``goals.json``."""
    products = [asdict(p) for p in catalog.products]
    goals = {split: [asdict(g) for g in goals] for split, goals in catalog.goals.items()}
    return _dumps(products), _dumps(goals)


def save_catalog(catalog: Catalog, directory: Path = DATA_DIR) -> list[Path]:
    """Write ``catalog.json`` and ``goals.json`` under ``directory``; returns their paths."""
    paths = [Path(directory) / CATALOG_FILE, Path(directory) / GOALS_FILE]
    for path, text in zip(paths, catalog_to_json(catalog)):
        atomic_write_text(path, text)
    return paths


class DataFileError(ValueError):
    """A data file is malformed; the message names the file, the record and the field."""


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataFileError(f"{path}: file not found (regenerate it with `python -m apo_helpers data`)") from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON ({e})") from None


def _build(cls, record, path, where):
    """``cls(**record)`` with an error that names the file, the record and the field when it does not fit."""
    if not isinstance(record, dict):
        raise DataFileError(f"{path}: {where} should be an object, got {type(record).__name__}")
    fields = cls.__dataclass_fields__
    for name, spec in fields.items():
        if spec.default is MISSING and spec.default_factory is MISSING and name not in record:
            raise DataFileError(f"{path}: {where} has no field {name!r}")
    unknown = set(record) - set(fields)
    if unknown:
        raise DataFileError(f"{path}: {where} has unknown field(s) {sorted(unknown)}")
    return cls(**record)


def load_catalog(directory: Path = DATA_DIR) -> Catalog:
    """Read ``catalog.json`` and ``goals.json`` written by ``save_catalog``."""
    directory = Path(directory)
    products_path, goals_path = directory / CATALOG_FILE, directory / GOALS_FILE
    raw_products, raw_goals = _read_json(products_path), _read_json(goals_path)
    if not isinstance(raw_products, list):
        raise DataFileError(f"{products_path}: expected a list of products")
    if not isinstance(raw_goals, dict):
        raise DataFileError(f"{goals_path}: expected an object split -> list of goals")
    products = [_build(Product, r, products_path, f"product #{i}") for i, r in enumerate(raw_products)]
    for split, records in raw_goals.items():
        if not isinstance(records, list):
            raise DataFileError(f"{goals_path}: split {split!r} should be a list of goals, got {type(records).__name__}")
    goals = {split: [_build(Goal, r, goals_path, f"goal {split}#{i}") for i, r in enumerate(records)]
             for split, records in raw_goals.items()}
    catalog = Catalog(products, goals)
    for split, split_goals in goals.items():
        for g in split_goals:
            if g.asin not in catalog.by_asin:
                raise DataFileError(f"{goals_path}: goal {split}#{g.index} targets asin {g.asin!r}, not in {products_path}")
    return catalog


_DEFAULT: Catalog | None = None


def default_catalog() -> Catalog:
    """The committed catalog under ``data/``, generated on the fly when the files are missing (cached)."""
    global _DEFAULT
    if _DEFAULT is None:
        if (DATA_DIR / CATALOG_FILE).exists() and (DATA_DIR / GOALS_FILE).exists():
            _DEFAULT = load_catalog(DATA_DIR)
        else:
            _DEFAULT = generate_catalog()
    return _DEFAULT
