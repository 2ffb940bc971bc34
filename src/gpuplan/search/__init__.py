"""Search layer (see DESIGN.md)."""
