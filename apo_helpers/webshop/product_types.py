"""The product types the synthetic catalog is generated from (notebook 01).

Each type has a category path, a pool of attribute phrases, option pools and a price range. Products of one type
draw different subsets from the same pools, which is what makes near-duplicates: same type, different attributes,
options and price. Within a pool no two entries fuzzy-match each other (rapidfuzz token-set ratio <= 85, the
reward's threshold), so an attribute or option the goal asks for cannot be satisfied by a look-alike
(``tests/test_catalog.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLORS = ["black", "white", "navy", "gray", "red", "green", "beige", "pink", "purple", "brown"]
CLOTHING_SIZES = ["small", "medium", "large", "x-large", "xx-small"]
SHOE_SIZES = ["7", "8", "9", "10", "11", "12"]
PACKS = ["single", "2-pack", "4-pack", "6-pack", "10-pack"]


@dataclass(frozen=True)
class ProductType:
    """One kind of product: what a goal asks for and what a search query names."""

    name: str
    """The type as a shopper says it, e.g. ``t-shirt``; also WebShop's ``query`` of the product."""
    category: tuple[str, ...]
    """Category path, most general first (WebShop's ``product_category``)."""
    attributes: tuple[str, ...]
    """Attribute phrases a product of this type may have, e.g. ``machine washable``."""
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Option name -> values a product may offer (color, size, flavor, pack...)."""
    price: tuple[float, float] = (10.0, 50.0)
    """Range of list prices in dollars."""
    article: str = "a"
    """Article used before the type in instructions (``a``, ``an``, ``some``, ``a pair of``)."""


def _t(name, category, attributes, options=None, price=(10.0, 50.0), article="a"):
    return ProductType(name, tuple(category.split(" > ")), tuple(attributes), dict(options or {}), price, article)


PRODUCT_TYPES: tuple[ProductType, ...] = (
    _t("t-shirt", "clothing > men > shirts",
       ["machine washable", "short sleeve", "slim fit", "organic cotton", "moisture wicking", "crew neck", "v neck", "quick dry"],
       {"color": tuple(COLORS), "size": tuple(CLOTHING_SIZES)}, (8, 35)),
    _t("hoodie", "clothing > men > sweatshirts",
       ["fleece lined", "machine washable", "zip up", "relaxed fit", "kangaroo pocket", "heavyweight", "drawstring hood"],
       {"color": tuple(COLORS), "size": tuple(CLOTHING_SIZES)}, (20, 70)),
    _t("yoga leggings", "clothing > women > pants",
       ["high waist", "squat proof", "tummy control", "side pockets", "four way stretch", "quick dry", "ankle length"],
       {"color": tuple(COLORS), "size": tuple(CLOTHING_SIZES)}, (15, 60), "some"),
    _t("summer dress", "clothing > women > dresses",
       ["floral print", "sleeveless", "knee length", "lightweight", "button front", "loose fit", "v neck"],
       {"color": tuple(COLORS), "size": tuple(CLOTHING_SIZES)}, (18, 80)),
    _t("running shoes", "shoes > men > athletic",
       ["non slip", "lightweight", "breathable mesh", "memory foam", "arch support", "wide toe box", "rubber sole"],
       {"color": tuple(COLORS), "size": tuple(SHOE_SIZES)}, (30, 120), "a pair of"),
    _t("sandals", "shoes > women > sandals",
       ["open toe", "ankle strap", "arch support", "waterproof", "flat heel", "cushioned footbed", "non slip"],
       {"color": tuple(COLORS), "size": tuple(SHOE_SIZES)}, (15, 60), "a pair of"),
    _t("shampoo", "beauty > hair care > shampoo",
       ["sulfate free", "paraben free", "for dry hair", "cruelty free", "color safe", "tea tree oil", "argan oil"],
       {"scent": ("lavender", "citrus", "coconut", "unscented", "mint"), "pack": tuple(PACKS[:4])}, (6, 30)),
    _t("face moisturizer", "beauty > skin care > face",
       ["hyaluronic acid", "fragrance free", "spf 30", "for sensitive skin", "non greasy", "vitamin c", "oil free"],
       {"size": ("1.7 oz", "3.4 oz", "5 oz")}, (10, 55)),
    _t("lipstick", "beauty > makeup > lips",
       ["long lasting", "matte finish", "vegan", "cruelty free", "moisturizing", "waterproof", "satin finish"],
       {"color": ("red", "pink", "nude", "berry", "coral", "plum")}, (5, 30)),
    _t("coffee beans", "grocery > beverages > coffee",
       ["whole bean", "medium roast", "dark roast", "fair trade", "usda organic", "single origin", "low acid"],
       {"size": ("12 oz", "2 lb", "5 lb"), "pack": tuple(PACKS[:3])}, (9, 45), "some"),
    _t("protein bars", "grocery > snacks > bars",
       ["gluten free", "high protein", "low sugar", "keto friendly", "plant based", "non gmo", "dairy free"],
       {"flavor": ("chocolate", "peanut butter", "vanilla", "cookie dough", "strawberry"), "pack": tuple(PACKS[1:])}, (10, 40), "some"),
    _t("herbal tea", "grocery > beverages > tea",
       ["caffeine free", "usda organic", "non gmo", "kosher", "individually wrapped", "loose leaf", "sugar free"],
       {"flavor": ("chamomile", "peppermint", "ginger", "hibiscus", "rooibos"), "pack": tuple(PACKS[:4])}, (5, 30), "some"),
    _t("wireless headphones", "electronics > audio > headphones",
       ["noise cancelling", "bluetooth 5.3", "over ear", "long battery life", "built in microphone", "foldable", "fast charging"],
       {"color": ("black", "white", "blue", "silver", "rose gold")}, (25, 200), "a pair of"),
    _t("phone case", "electronics > accessories > cases",
       ["shockproof", "slim", "wireless charging compatible", "clear back", "kickstand", "raised edges", "magnetic"],
       {"color": ("black", "clear", "blue", "pink", "green"), "model": ("iphone 15", "galaxy s24", "pixel 8", "moto g")}, (8, 35)),
    _t("usb c cable", "electronics > accessories > cables",
       ["fast charging", "braided nylon", "data transfer", "right angle", "durable", "100w"],
       {"length": ("3 ft", "6 ft", "10 ft"), "pack": tuple(PACKS[:3])}, (6, 25)),
    _t("bed sheets", "home > bedding > sheets",
       ["deep pocket", "wrinkle free", "egyptian cotton", "breathable", "hypoallergenic", "cooling", "fade resistant"],
       {"color": tuple(COLORS[:7]), "size": ("twin", "full", "queen", "king")}, (20, 90), "some"),
    _t("throw pillow covers", "home > decor > pillows",
       ["velvet", "hidden zipper", "machine washable", "farmhouse style", "double sided", "linen blend"],
       {"color": tuple(COLORS[:8]), "size": ("16x16 inch", "18x18 inch", "20x20 inch")}, (8, 35), "some"),
    _t("water bottle", "home > kitchen > drinkware",
       ["bpa free", "leak proof", "insulated", "dishwasher safe", "stainless steel", "wide mouth", "straw lid"],
       {"color": ("black", "white", "blue", "green", "pink"), "capacity": ("18 oz", "32 oz", "40 oz")}, (10, 45)),
    _t("office chair", "furniture > office > chairs",
       ["ergonomic", "lumbar support", "adjustable height", "mesh back", "padded armrests", "swivel", "high back"],
       {"color": ("black", "gray", "white", "blue")}, (60, 300), "an"),
    _t("bookshelf", "furniture > living room > shelves",
       ["5 tier", "easy assembly", "industrial style", "solid wood", "space saving", "anti tip"],
       {"color": ("black", "white", "walnut", "oak")}, (35, 180)),
    _t("dog food", "pet supplies > dogs > food",
       ["grain free", "high protein", "real chicken", "for puppies", "natural ingredients", "for small breeds"],
       {"size": ("4 lb", "15 lb", "30 lb"), "flavor": ("chicken", "beef", "salmon", "lamb")}, (15, 80), "some"),
    _t("cat toy", "pet supplies > cats > toys",
       ["interactive", "catnip filled", "feather", "battery operated", "durable", "self rotating"],
       {"pack": tuple(PACKS[:3])}, (5, 25)),
    _t("multivitamin", "health > vitamins > multivitamins",
       ["gluten free", "vegan", "once daily", "for women", "energy support", "non gmo", "sugar free"],
       {"form": ("60 tablets", "120 capsules", "90 gummies")}, (10, 45), "a"),
    _t("yoga mat", "sports > fitness > yoga",
       ["non slip", "extra thick", "eco friendly", "carrying strap", "alignment lines", "lightweight"],
       {"color": ("black", "purple", "blue", "green", "pink", "gray")}, (15, 70)),
    _t("camping tent", "sports > outdoor > camping",
       ["waterproof", "easy setup", "family size", "2 person", "rainfly included", "lightweight", "ventilated"],
       {"color": ("green", "orange", "blue", "gray")}, (40, 250)),
    _t("building blocks set", "toys > building > blocks",
       ["stem educational", "for ages 6 and up", "compatible with major brands", "storage box", "1000 pieces", "creative"],
       {}, (15, 90)),
    _t("jigsaw puzzle", "toys > puzzles > jigsaw",
       ["1000 pieces", "for adults", "landscape", "thick cardboard", "poster included", "large pieces"],
       {}, (10, 35)),
    _t("plant pot", "garden > planters > pots",
       ["drainage hole", "ceramic", "self watering", "with saucer", "indoor", "modern design"],
       {"color": ("white", "black", "gray", "terracotta", "green"), "size": ("4 inch", "6 inch", "8 inch")}, (8, 45)),
    _t("garden hose", "garden > watering > hoses",
       ["expandable", "kink free", "heavy duty", "leak proof", "lightweight", "brass fittings"],
       {"length": ("25 ft", "50 ft", "100 ft")}, (15, 70)),
)
"""29 product types in 12 top-level categories."""

BRANDS: tuple[str, ...] = (
    "northwind", "acme", "bluepeak", "evergreen", "lumina", "oakridge", "silverline", "sunbird", "terrafirm", "veloce",
    "zenith", "harborview", "kestrel", "maplewood", "novaline", "pinecrest", "quillon", "redfern", "solace", "tidewater",
)
