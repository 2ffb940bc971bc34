"""The report layer (L5): the only code that turns typed results into text or JSON.

Each member module has `render_text(result) -> str` and `to_json(result) -> dict`; every number
it shows goes through the one set of formatters in `fmt` (money, durations, GiB, fractions).
"""
