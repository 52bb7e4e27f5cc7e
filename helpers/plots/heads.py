"""Plots for this part of the collection."""

__all__: list[str] = []
