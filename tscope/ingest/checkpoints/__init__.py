"""Checkpoints: lazy, safe readers per layout (registry.py), and an inventory from them."""

from tscope.ingest.checkpoints.inventory import checkpoint_inventory

__all__ = ["checkpoint_inventory"]
