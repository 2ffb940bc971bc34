"""Search (L4): builds hardware arrays and configuration grids from the catalog, evaluates them."""
