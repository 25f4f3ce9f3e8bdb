"""BM25 search over the catalog with ``bm25s`` (notebook 01).

Each product is indexed by its title, attributes and bullet points. Queries and documents go through the same
``text.words`` tokenizer (lowercase alphanumerics, no stemming), so a query word matches only the same word.
"""

from __future__ import annotations

import os

# bm25s runs one JAX operation when it is imported wherever JAX is installed; on a CUDA machine that starts JAX's GPU
# backend, which takes 75% of the GPU's memory by default, in every process, before torch has asked for any. The
# search needs no JAX (it scores with bm25s's sparse matrices), so JAX stays on the CPU unless the user chose.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bm25s  # noqa: E402  (after the line above)
import numpy as np  # noqa: E402

from .catalog import Catalog, Product
from .text import STOPWORDS, words


def product_text(product: Product) -> str:
    """What the search engine indexes for a product."""
    return " ".join([product.title, *product.attributes, *product.bullets])


class SearchEngine:
    """``search(query)`` -> asins of the best matches, best first (BM25, ties broken by catalog order)."""

    def __init__(self, products: list[Product], max_results: int = 50):
        self.asins = [p.asin for p in products]
        self.max_results = max_results
        corpus = [[w for w in words(product_text(p)) if w not in STOPWORDS] or ["<empty>"] for p in products]
        self.bm25 = bm25s.BM25()
        self.bm25.index(corpus, show_progress=False)
        self.vocab = self.bm25.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every product for ``query`` (zeros when no query word is in the index)."""
        tokens = [w for w in dict.fromkeys(words(query)) if w in self.vocab]
        if not tokens:
            return np.zeros(len(self.asins), dtype=np.float32)
        return self.bm25.get_scores(tokens)

    def search(self, query: str, k: int | None = None) -> list[str]:
        """Asins of up to ``k`` (default ``max_results``) products with a positive score, best first."""
        k = min(k or self.max_results, len(self.asins))
        scores = self.scores(query)
        if k < len(scores):  # keep every product tied with the k-th best, so ties are cut in catalog order
            kth = -np.partition(-scores, k - 1)[k - 1]
            top = np.flatnonzero(scores >= kth)
        else:
            top = np.arange(len(scores))
        top = top[scores[top] > 0]
        order = np.lexsort((top, -scores[top]))[:k]  # score descending, then catalog order
        return [self.asins[i] for i in top[order]]


def search_engine(catalog: Catalog, max_results: int = 50) -> SearchEngine:
    """The catalog's search engine, built once per catalog and result limit."""
    cache = catalog.__dict__.setdefault("_search_engines", {})
    if max_results not in cache:
        cache[max_results] = SearchEngine(catalog.products, max_results)
    return cache[max_results]
