"""Checkpoints: an inventory from names (inventory.py) and lazy, safe readers per layout."""

from tscope.ingest.checkpoints.inventory import checkpoint_inventory, pickle_strings

__all__ = ["checkpoint_inventory", "pickle_strings"]
