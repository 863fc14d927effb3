"""Targets: where requests go. See :mod:`loadgen.targets.base` for the interface."""

from .base import Target, open_target

__all__ = ["Target", "open_target"]
