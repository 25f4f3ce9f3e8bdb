"""The WebShop-style environment (notebook 01). Imports no torch.

``WebShopEnv`` is registered with gymnasium as ``WebShop-v0``: ``gymnasium.make("WebShop-v0", split="test")``.
"""

import gymnasium as gym

from .agents import AGENTS, make_agent
from .catalog import Catalog, Goal, Product, default_catalog, generate_catalog, load_catalog, save_catalog
from .env import InvalidAction, WebShopEnv, parse_action
from .reward import RewardBreakdown, webshop_reward
from .search import SearchEngine, search_engine
from .webshop_format import load_webshop_files

ENV_ID = "WebShop-v0"
if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="apo_helpers.webshop.env:WebShopEnv")

__all__ = ["AGENTS", "Catalog", "ENV_ID", "Goal", "InvalidAction", "Product", "RewardBreakdown", "SearchEngine",
           "WebShopEnv", "default_catalog", "generate_catalog", "load_catalog", "load_webshop_files", "make_agent",
           "parse_action", "save_catalog", "search_engine", "webshop_reward"]
