"""Fusion oracles: ground-truth kernel groups per backend (see DESIGN.md, "Backends")."""
