"""Loading the real WebShop data release into ``Product`` / ``Goal`` / ``Catalog`` (notebook 01's model).

``load_webshop_files(products_path, instructions_path)`` reads the two files of the WebShop paper's data release,
``items_shuffle_1000.json`` (or any ``items_shuffle_*.json``) and ``items_human_ins.json``, and returns a ``Catalog``
that ``WebShopEnv(split=..., catalog=...)``, the agents and the evaluation run on unchanged. No network, no spaCy.

Products file: a JSON list of product objects.

- ``asin`` (str, required): the id. As in WebShop's ``load_products``, records whose asin is ``"nan"`` or longer than
  10 characters are skipped, and so is every later record with an asin already seen (the first one is kept); both are
  counted in the report. An asin must otherwise be letters and digits (it is clicked on the results page).
- ``name`` (str, required): the title.
- ``pricing``: ``"$12.99"``; a range ``"$10.00 - $20.00"`` (or ``"$10.00 to $20.00"``) -> the LOW end (WebShop draws
  a price uniformly inside the range; a fixed price keeps the catalog deterministic); a number; a list of numbers
  (the smallest). Thousands separators are allowed (``"$1,299.00"``). Missing, null, ``""`` or ``[]`` -> 100.0,
  WebShop's own default. Anything else is an error.
- ``product_category``: ``"Beauty & Personal Care › Skin Care › Face"`` split on ``›`` and stripped (a list of strings
  is accepted as well). When missing or empty the coarse ``category`` field (``"beauty"``) is used as a one-level path,
  else ``[product_type]``; a product with none of the three is an error.
- ``query`` -> ``product_type``, lowercased (as WebShop does); absent or empty -> the last category level, lowercased.
- ``small_description`` -> bullets: a list of strings, or one string (one bullet); null -> no bullets.
- ``full_description`` -> description (a string or null).
- ``customization_options``: option name -> list of ``{"value": str, "image": str | null}``, or null / ``{}``; an
  option whose list is null is left out (as in WebShop). Names and values are normalized as WebShop does -- lowercase,
  ``/`` written `` | `` -- and further: whitespace collapsed, control characters removed, ``[`` ``]`` written ``(``
  ``)`` (square brackets cannot be typed inside ``click[...]``).
- ``Attributes`` (list of str, default ``[]``), lowercased. The data release keeps product attributes in a separate
  file (``items_ins_v2_1000.json``) that this loader does not read; without them the reward still finds a goal
  attribute as a substring of the title, bullets or description (WebShop's fallback).
- ``Reviews`` (optional list of ``{"score" | "stars" | "rating": number or "4.0 out of 5 stars", "body" | "review" |
  "text": str}``) -> ``{"rating": int 1-5, "text": str}``. ``average_rating`` is ignored: ``Product.rating`` is
  computed from the reviews, and a product without reviews shows ``N.A.``.
- ``brand`` (str); absent or empty -> the first word of the name. Brand is lowercased.

Every text is cleaned: control and format characters (such as the left-to-right marks of scraped Amazon text)
become spaces and runs of whitespace collapse to one space. Titles also get ``[`` ``]`` -> ``(`` ``)`` because the
oracle agent types the title inside ``search[...]``.

Option values must be unique across ONE product's options, because a click names only the value: when a value repeats
(within an option or in a later option) the FIRST occurrence is kept and the later one dropped. A value equal to one
of the item page's own buttons (``back to search``, ``< prev``, ``description``, ``features``, ``reviews``,
``buy now``) is dropped as well; an option left without values is dropped. All drops are counted in the report.

Instructions file: a JSON object asin -> list of records, each with

- ``instruction`` (non-empty str, required);
- ``instruction_attributes`` (the release's name) or ``attributes``: a list of strings, required, lowercased. As in
  WebShop's ``get_human_goals``, a record with NO attributes is skipped (counted as ``skipped_no_attributes``);
- ``instruction_options`` (the release's name) or ``goal_options`` or ``options``: a dict name -> value, or a list of
  values, which become ``{"option 1": v1, "option 2": v2, ...}`` (the reward compares values only); null -> none.
  Values are normalized like product option values. They are kept even when the product does not offer them
  exactly; the reward's fuzzy match may still credit a close value.
- ``price_upper`` (optional number). When it is missing the budget is the one the instruction states
  (``... 30.00 dollars``), else it is derived from the target's price: ``ceil(price * 1.5)`` whole dollars
  (WebShop instead samples a budget at random from 10-dollar steps above the price).

The instruction text is cleaned, and when it does not already state a budget it gets WebShop's suffix: trailing dots
stripped, then ``", and price lower than {price_upper:.2f} dollars"``, so the agents can read the budget the reward
checks. Records whose asin is not among the loaded products (for instance products cut by ``max_products``; the full
``items_human_ins.json`` covers ~12k asins, far more than ``items_shuffle_1000.json``) are skipped and counted: the
count is ``catalog.skipped_instructions`` and ``catalog.load_report`` (a ``WebShopLoadReport``) has all the counts.
Every record is validated, used or not.

Goals: ``asin`` the target, ``target_title`` its name, ``category`` and ``product_type`` its own. Splits are by TARGET
product: the asins that have at least one goal, in products-file order, are shuffled with ``random.Random(seed)``; the
first ``round(n * test_fraction)`` are test targets, the next ``round(n * val_fraction)`` val targets, the rest train
targets (a split whose fraction is positive gets at least one target when there are 3 or more, and train always keeps
at least one), so the three splits' target products are disjoint. Within a split, goals follow the products file, then
the record order; ``goal.index`` is the position within the split.

Errors: a malformed file raises ``DataFileError`` whose message names the file, the record (``product #i (asin 'X')``
or ``instruction 'X'#k``) and the field. Notes for real data: the ``rule`` and ``expert`` agents recognize result
asins only in the ``B0`` + 8 form (``agents.ASIN_RE``), so ISBN-style asins are invisible to them (the oracle is not
affected); titles longer than ``EnvConfig.max_action_chars`` minus 8 cannot be searched verbatim by the oracle.
"""

from __future__ import annotations

import json
import math
import random
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .catalog import SPLITS, Catalog, DataFileError, Goal, Product
from .pages import BACK, BUY, DETAIL_BUTTONS, PREV
from .text import normalize

DEFAULT_PRICE = 100.0
"""WebShop's price for a product without pricing."""
PRICE_UPPER_FACTOR = 1.5
"""A derived budget is ``ceil(price * PRICE_UPPER_FACTOR)`` whole dollars."""
RESERVED_VALUES = frozenset(normalize(b) for b in (BACK, PREV, *DETAIL_BUTTONS, BUY))
"""Item-page buttons an option value may not equal."""
OPTION_KEYS = ("instruction_options", "goal_options", "options")
ATTRIBUTE_KEYS = ("instruction_attributes", "attributes")

_ASIN = re.compile(r"[A-Za-z0-9]+")
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|\.\d+")
_PRICE_FILLER = re.compile(r"\s|\$|-|\u2013|\u2014|\bto\b|\busd\b|\bus\b", re.IGNORECASE)
_BUDGET = re.compile(r"(\d+(?:\.\d+)?) dollars")
_LEADING_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?)")


@dataclass
class WebShopLoadReport:
    """What ``load_webshop_files`` kept, skipped and changed (``catalog.load_report``)."""

    products_path: str
    instructions_path: str
    products: int = 0
    """Products in the catalog."""
    skipped_products: int = 0
    """Product records skipped: asin ``"nan"`` or longer than 10 characters."""
    duplicate_products: int = 0
    """Product records skipped because an earlier record had the same asin."""
    goals: dict[str, int] = field(default_factory=dict)
    """Goals per split."""
    targets: dict[str, int] = field(default_factory=dict)
    """Distinct target products per split."""
    skipped_instructions: int = 0
    """Instruction records whose asin is not among the products."""
    skipped_no_attributes: int = 0
    """Instruction records with an empty attribute list (skipped as in WebShop)."""
    dropped_option_values: int = 0
    """Option values dropped: repeated within a product, equal to an item-page button, or empty."""
    derived_price_upper: int = 0
    """Goals whose budget came from the target's price (no ``price_upper``, none stated in the text)."""


# ---------------------------------------------------------------------------------------------- helpers

def _clean(text: str) -> str:
    """Control / format characters to spaces, whitespace collapsed."""
    return " ".join("".join(" " if unicodedata.category(c).startswith("C") else c for c in text).split())


def _no_brackets(text: str) -> str:
    return text.replace("[", "(").replace("]", ")")


def _option_value(text: str) -> str:
    """WebShop's option normalization (lowercase, ``/`` -> `` | ``) plus cleaning and no square brackets."""
    return _no_brackets(_clean(text.replace("/", " | ").lower()))


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class _Where:
    """Builds ``DataFileError`` messages that name the file, the record and the field."""

    def __init__(self, path: Path, record: str):
        self.path, self.record = path, record

    def error(self, field_name: str | None, problem: str) -> DataFileError:
        if field_name is None:
            return DataFileError(f"{self.path}: {self.record}: {problem}")
        return DataFileError(f"{self.path}: {self.record}: field {field_name!r}: {problem}")


def _read_json(path: Path, what: str):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataFileError(f"{path}: file not found (expected the WebShop {what} file)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"{path}: cannot read the WebShop {what} file ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON ({e})") from None


def _string_list(value, where: _Where, name: str, *, allow_str: bool = False) -> list[str]:
    """A list of strings (or one string when ``allow_str``); null -> []."""
    if value is None:
        return []
    if allow_str and isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        kinds = "a list of strings or a string" if allow_str else "a list of strings"
        raise where.error(name, f"expected {kinds}, got {type(value).__name__}")
    for k, item in enumerate(value):
        if not isinstance(item, str):
            raise where.error(name, f"item {k} should be a string, got {type(item).__name__}")
    return value


def _unique(items: list[str]) -> list[str]:
    return [x for x in dict.fromkeys(items) if x]


# ---------------------------------------------------------------------------------------------- products

def parse_price(value, where: _Where) -> float:
    """Dollars from WebShop's ``pricing``: the low end of a range; ``DEFAULT_PRICE`` when absent."""
    if value is None or value == "" or value == []:
        return DEFAULT_PRICE
    if isinstance(value, str):
        numbers = _NUMBER.findall(value)
        residue = _PRICE_FILLER.sub("", _NUMBER.sub("", value))
        if not numbers or residue:
            raise where.error("pricing", f"cannot parse {value!r} as a price or a price range")
        prices = [float(n.replace(",", "")) for n in numbers]
    elif _is_number(value):
        prices = [float(value)]
    elif isinstance(value, list) and all(_is_number(v) for v in value):
        prices = [float(v) for v in value]
    else:
        raise where.error("pricing", f"expected a price string, a number or a list of numbers, got {value!r}")
    if min(prices) < 0:
        raise where.error("pricing", f"negative price in {value!r}")
    return round(min(prices), 2)


def _category(record: dict, where: _Where) -> list[str]:
    raw = record.get("product_category")
    if isinstance(raw, str):
        levels = [_clean(x) for x in raw.split("›")]
    elif isinstance(raw, list):
        levels = [_clean(x) for x in _string_list(raw, where, "product_category")]
    elif raw is None:
        levels = []
    else:
        raise where.error("product_category", f"expected a string like 'A › B › C', got {type(raw).__name__}")
    levels = [x for x in levels if x]
    if levels:
        return levels
    coarse = record.get("category")
    if coarse is not None and not isinstance(coarse, str):
        raise where.error("category", f"expected a string, got {type(coarse).__name__}")
    if coarse and _clean(coarse):
        return [_clean(coarse)]
    query = record.get("query")
    if isinstance(query, str) and _clean(query):
        return [_clean(query).lower()]
    raise where.error("product_category", "missing or empty, and there is no 'category' or 'query' to fall back on")


def _options(raw, where: _Where, counts: WebShopLoadReport) -> dict[str, list[str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise where.error("customization_options",
                          f"expected an object option name -> list of {{'value': ...}}, got {type(raw).__name__}")
    options: dict[str, list[str]] = {}
    seen: set[str] = set()
    for raw_name, contents in raw.items():
        if contents is None:
            continue
        field_name = f"customization_options.{raw_name}"
        if not isinstance(contents, list):
            raise where.error(field_name, f"expected a list of {{'value': ...}} objects, got {type(contents).__name__}")
        name = _clean(raw_name).lower()
        if not name:
            raise where.error(field_name, "the option name is empty")
        for k, content in enumerate(contents):
            if not isinstance(content, dict) or not isinstance(content.get("value"), str):
                raise where.error(f"{field_name}[{k}].value",
                                  f"expected an object with a string 'value', got {content!r}")
            value = _option_value(content["value"])
            if not value or value in seen or value in RESERVED_VALUES:
                counts.dropped_option_values += 1
                continue
            seen.add(value)
            options.setdefault(name, []).append(value)
    return options


def _reviews(raw, where: _Where) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.error("Reviews", f"expected a list of review objects, got {type(raw).__name__}")
    reviews = []
    for k, review in enumerate(raw):
        if not isinstance(review, dict):
            raise where.error(f"Reviews[{k}]", f"expected an object, got {type(review).__name__}")
        score = next((review[key] for key in ("score", "stars", "rating") if review.get(key) is not None), None)
        if _is_number(score):
            rating = float(score)
        elif isinstance(score, str) and (m := _LEADING_NUMBER.match(score)):
            rating = float(m.group(1))
        else:
            raise where.error(f"Reviews[{k}].score", f"expected a rating number, got {score!r}")
        text = next((review[key] for key in ("body", "review", "text") if review.get(key) is not None), "")
        if not isinstance(text, str):
            raise where.error(f"Reviews[{k}].body", f"expected a string, got {type(text).__name__}")
        reviews.append({"rating": min(5, max(1, round(rating))), "text": _clean(text)})
    return reviews


def _text_field(record: dict, name: str, where: _Where, required: bool = False) -> str:
    value = record.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        problem = "missing" if value is None else f"expected a string, got {type(value).__name__}"
        raise where.error(name, problem)
    return value


def parse_product(record, index: int, path: Path, counts: WebShopLoadReport) -> Product | None:
    """One product record as a ``Product``; None for the records WebShop skips (asin ``nan`` or too long)."""
    where = _Where(path, f"product #{index}")
    if not isinstance(record, dict):
        raise where.error(None, f"the record should be an object, got {type(record).__name__}")
    asin = record.get("asin")
    if not isinstance(asin, str) or not asin.strip():
        raise where.error("asin", "missing or empty" if asin in (None, "") else f"expected a string, got {asin!r}")
    asin = asin.strip()
    if asin == "nan" or len(asin) > 10:
        counts.skipped_products += 1
        return None
    where = _Where(path, f"product #{index} (asin {asin!r})")
    if not _ASIN.fullmatch(asin):
        raise where.error("asin", f"{asin!r} should be letters and digits only")
    title = _no_brackets(_clean(_text_field(record, "name", where, required=True)))
    if not title:
        raise where.error("name", "empty title")
    price = parse_price(record.get("pricing"), where)
    category = _category(record, where)
    query = _text_field(record, "query", where)
    product_type = _clean(query).lower() or category[-1].lower()
    bullets = [b for b in (_clean(x) for x in _string_list(record.get("small_description"), where,
                                                           "small_description", allow_str=True)) if b]
    description = _clean(_text_field(record, "full_description", where))
    options = _options(record.get("customization_options"), where, counts)
    attributes = _unique([_clean(a).lower() for a in _string_list(record.get("Attributes"), where, "Attributes")])
    brand = _clean(_text_field(record, "brand", where)).lower() or title.split()[0].lower()
    reviews = _reviews(record.get("Reviews"), where)
    return Product(asin, title, category, product_type, brand, price, attributes, options, bullets, description,
                   reviews)


# ---------------------------------------------------------------------------------------------- instructions

def _goal_options(record: dict, where: _Where) -> dict[str, str]:
    key = next((k for k in OPTION_KEYS if k in record), OPTION_KEYS[0])
    raw = record.get(key)
    if raw is None:
        return {}
    if isinstance(raw, list):
        raw = {f"option {k}": v for k, v in enumerate(raw, start=1)}
    if not isinstance(raw, dict):
        raise where.error(key, f"expected an object name -> value or a list of values, got {type(raw).__name__}")
    options = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise where.error(key, f"the value of {name!r} should be a string, got {value!r}")
        value = _option_value(value)
        if value:
            options[_clean(name).lower() or name] = value
    return options


def _price_upper(record: dict, instruction: str, price: float, where: _Where) -> tuple[float, bool]:
    """(budget, derived?) -- the record's ``price_upper``, else the stated budget, else ceil(price * 1.5)."""
    value = record.get("price_upper")
    if value is not None:
        if not _is_number(value) or value < 0:
            raise where.error("price_upper", f"expected a non-negative number, got {value!r}")
        return float(value), False
    stated = _BUDGET.search(instruction)
    if stated:
        return float(stated.group(1)), False
    return float(math.ceil(round(price * PRICE_UPPER_FACTOR, 6))), True


def parse_instruction(record, asin: str, k: int, path: Path) -> tuple[str, list[str], dict[str, str], dict]:
    """Validate one instruction record: (instruction text, attributes, options, record)."""
    where = _Where(path, f"instruction {asin!r}#{k}")
    if not isinstance(record, dict):
        raise where.error(None, f"the record should be an object, got {type(record).__name__}")
    text = record.get("instruction")
    if text is not None and not isinstance(text, str):
        raise where.error("instruction", f"expected a string, got {type(text).__name__}")
    if not text or not _clean(text):
        raise where.error("instruction", "missing or empty")
    key = next((a for a in ATTRIBUTE_KEYS if a in record), None)
    if key is None:
        raise where.error(ATTRIBUTE_KEYS[0], f"missing (give {' or '.join(map(repr, ATTRIBUTE_KEYS))})")
    if record[key] is None:
        raise where.error(key, "expected a list of strings, got null")
    attributes = _unique([_clean(a).lower() for a in _string_list(record[key], where, key)])
    return _clean(text), attributes, _goal_options(record, where), record


# ---------------------------------------------------------------------------------------------- splits

def _split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    """(test, val) target counts; the rest are train targets."""
    sizes = []
    for fraction in (test_fraction, val_fraction):
        size = math.floor(n * fraction + 0.5)
        if fraction > 0 and size == 0 and n >= 3:
            size = 1
        sizes.append(size)
    n_test, n_val = sizes
    while n_test + n_val > max(n - 1, 0):
        if n_val >= n_test and n_val > 0:
            n_val -= 1
        else:
            n_test -= 1
    return n_test, n_val


# ---------------------------------------------------------------------------------------------- the loader

def load_webshop_files(products_path, instructions_path, seed: int = 0, val_fraction: float = 0.1,
                       test_fraction: float = 0.1, max_products: int | None = None) -> Catalog:
    """A ``Catalog`` from WebShop's ``items_shuffle_*.json`` and ``items_human_ins.json`` (see the module doc).

    Args:
        products_path: the products file (a JSON list of product records).
        instructions_path: the human instructions file (a JSON object asin -> list of instruction records).
        seed: shuffles the target asins before they are cut into test / val / train.
        val_fraction, test_fraction: shares of the target products whose goals go to val and test.
        max_products: read only the first ``max_products`` product records (WebShop's ``num_products``).

    Returns the catalog with two extra attributes: ``skipped_instructions`` (instruction records whose asin is not
    among the products) and ``load_report`` (a ``WebShopLoadReport``). Raises ``DataFileError`` for a malformed
    file and ``ValueError`` for bad arguments.
    """
    for name, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not _is_number(fraction) or not 0 <= fraction < 1:
            raise ValueError(f"{name} must be in [0, 1), got {fraction!r}")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be below 1, got {val_fraction + test_fraction}")
    if max_products is not None and (not isinstance(max_products, int) or isinstance(max_products, bool)
                                     or max_products < 1):
        raise ValueError(f"max_products must be a positive int or None, got {max_products!r}")
    products_path, instructions_path = Path(products_path), Path(instructions_path)
    report = WebShopLoadReport(str(products_path), str(instructions_path))

    raw_products = _read_json(products_path, "products")
    if not isinstance(raw_products, list):
        raise DataFileError(f"{products_path}: top level: expected a list of product records, "
                            f"got {type(raw_products).__name__}")
    if max_products is not None:
        raw_products = raw_products[:max_products]
    products: list[Product] = []
    seen: set[str] = set()
    for i, record in enumerate(raw_products):
        product = parse_product(record, i, products_path, report)
        if product is None:
            continue
        if product.asin in seen:
            report.duplicate_products += 1
            continue
        seen.add(product.asin)
        products.append(product)
    if not products:
        raise DataFileError(f"{products_path}: top level: no usable product records")
    position = {p.asin: i for i, p in enumerate(products)}
    by_asin = {p.asin: p for p in products}

    raw_instructions = _read_json(instructions_path, "instructions")
    if not isinstance(raw_instructions, dict):
        raise DataFileError(f"{instructions_path}: top level: expected an object asin -> list of instruction "
                            f"records, got {type(raw_instructions).__name__}")
    kept: list[tuple[int, int, Goal]] = []  # (product position, record index, goal without split)
    for asin, records in raw_instructions.items():
        if not isinstance(records, list):
            raise DataFileError(f"{instructions_path}: instructions of asin {asin!r}: field {asin!r}: expected a "
                                f"list of instruction records, got {type(records).__name__}")
        for k, record in enumerate(records):
            text, attributes, options, record = parse_instruction(record, asin, k, instructions_path)
            where = _Where(instructions_path, f"instruction {asin!r}#{k}")
            product = by_asin.get(asin.strip())
            if product is None:
                _price_upper(record, text, 0.0, where)  # still validated
                report.skipped_instructions += 1
                continue
            if not attributes:
                report.skipped_no_attributes += 1
                continue
            price_upper, derived = _price_upper(record, text, product.price, where)
            report.derived_price_upper += derived
            if not _BUDGET.search(text):
                text = f"{text.strip('.').rstrip()}, and price lower than {price_upper:.2f} dollars"
            goal = Goal(text, product.asin, product.product_type, list(product.category), attributes, options,
                        price_upper, product.title)
            kept.append((position[product.asin], k, goal))
    if not kept:
        raise DataFileError(f"{instructions_path}: top level: no usable instruction targets a product of "
                            f"{products_path} ({report.skipped_instructions} records name other asins)")

    kept.sort(key=lambda t: (t[0], t[1]))
    targets = list(dict.fromkeys(goal.asin for _, _, goal in kept))
    order = targets[:]
    random.Random(seed).shuffle(order)
    n_test, n_val = _split_sizes(len(order), val_fraction, test_fraction)
    split_of = {asin: "test" for asin in order[:n_test]}
    split_of |= {asin: "val" for asin in order[n_test:n_test + n_val]}
    split_of |= {asin: "train" for asin in order[n_test + n_val:]}
    goals: dict[str, list[Goal]] = {split: [] for split in SPLITS}
    for _, _, goal in kept:
        goal.split = split_of[goal.asin]
        goal.index = len(goals[goal.split])
        goals[goal.split].append(goal)

    report.products = len(products)
    report.goals = {split: len(g) for split, g in goals.items()}
    report.targets = {split: len({g.asin for g in gs}) for split, gs in goals.items()}
    catalog = Catalog(products, goals)
    catalog.skipped_instructions = report.skipped_instructions
    catalog.load_report = report
    return catalog
