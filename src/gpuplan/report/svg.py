"""Charts as SVG text (L5), built from the JSON dicts that `--json` prints; no plotting library.

Four charts, each `*_svg(json) -> str`, self-contained (inline styles, no fonts or scripts
fetched), so the web page, the HTML report and a browser opening the file show the same:

- `pareto_svg(plan)`: cost against days for every plan the search returned, the Pareto front
  joined; hovering a point shows GPU, count, layout and pricing.
- `memory_svg(estimates, labels)`: memory per GPU of one or more configurations, stacked as
  weights, gradients, optimizer, activations, buffers (logits, gradient accumulation, runtime
  overhead), and the margin left against the device's capacity.
- `outlook_svg(plan)`: time, cost and scaling efficiency of the winner against GPU count.
- `buy_rent_svg(tco)`: cumulative cost over the months for owning and for the cheapest offer of
  each cloud pricing mode, each break-even month marked (`buy_rent_series` gives the numbers).

Every plotted mark carries its values in `data-*` attributes and the root carries the axis
domains, so tests can check each mark against the JSON it came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .fmt import duration, num, usd

W, H = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 78, 150, 40, 50
INK, GRID, MUTED = "#1f2933", "#e4e7eb", "#616e7c"
PALETTE = {  # pricing mode / series -> colour (colour-blind safe, Okabe-Ito)
    "on-demand": "#0072b2", "spot": "#e69f00", "reserved-1y": "#009e73",
    "reserved-3y": "#56b4e9", "savings-plan-1y": "#cc79a7", "savings-plan-3y": "#d55e00",
    "capacity-block": "#8a6d3b", "own": "#1f2933",
}
PARTS = (("weights", "weights", "#0072b2"), ("gradients", "gradients", "#56b4e9"),
         ("optimizer", "optimizer", "#009e73"), ("activations", "activations", "#e69f00"),
         ("other", "buffers", "#cc79a7"))
MARGIN_FILL = "#d9f2e6"


def colour(key: str) -> str:
    return PALETTE.get(key, "#7b8794")


def _a(v: Any) -> str:
    return quoteattr(str(v))


def _f(x: float) -> str:
    return f"{x:.2f}"


@dataclass(frozen=True, kw_only=True)
class Scale:
    """Maps a value range to pixels, linearly or on a log10 axis."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False
    marks: tuple[float, ...] = ()  # tick values, when the data's own values read best
    steps: int = 5  # about this many tick intervals on a linear axis

    @staticmethod
    def fit(values: Sequence[float], p0: float, p1: float, *, zero: bool = False,
            log: bool | None = None, steps: int = 5) -> Scale:
        vals = [v for v in values if v is not None and math.isfinite(v)] or [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if log is None:
            log = lo > 0 and hi / lo > 30
        if log:
            return Scale(lo=10 ** math.floor(math.log10(lo)), hi=10 ** math.ceil(math.log10(hi)),
                         p0=p0, p1=p1, log=True)
        lo = 0.0 if zero or lo > 0 and lo < hi / 3 else lo
        if hi == lo:
            hi = lo + (abs(lo) or 1.0)
        step = _nice_step((hi - lo) / steps)
        return Scale(lo=math.floor(lo / step) * step, hi=math.ceil(hi / step) * step,
                     p0=p0, p1=p1, steps=steps)

    def __call__(self, v: float) -> float:
        if self.log:
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.p0 + t * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        if self.marks:
            return list(self.marks)
        if self.log:
            decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
            major = [10.0 ** d for d in decades]
            if len(major) <= 3:
                major = sorted({m * k for m in major for k in (1, 2, 5)
                                if self.lo <= m * k <= self.hi})
            return major
        step = _nice_step((self.hi - self.lo) / self.steps)
        n = round((self.hi - self.lo) / step)
        return [self.lo + i * step for i in range(n + 1)]


def _nice_step(raw: float) -> float:
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _frame(kind: str, title: str, body: list[str], *, height: int = H,
           data: dict[str, Any] | None = None) -> str:
    attrs = "".join(f" data-{k.replace('_', '-')}={_a(v)}" for k, v in (data or {}).items())
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gp-chart" data-chart="{kind}" '
        f'viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img" '
        f'aria-label={_a(title)} font-family="system-ui, -apple-system, Segoe UI, sans-serif" '
        f'font-size="11"{attrs}>',
        f"<title>{escape(title)}</title>",
        f'<text class="title" x="{LEFT}" y="20" font-size="14" font-weight="600" '
        f'fill="{INK}">{escape(title)}</text>',
        *body, "</svg>"])


def _x_axis(sx: Scale, y: float, label: str, fmt: Any) -> list[str]:
    out = [f'<g class="axis x-axis"><line x1="{_f(sx.p0)}" y1="{_f(y)}" x2="{_f(sx.p1)}" '
           f'y2="{_f(y)}" stroke="{MUTED}"/>']
    for t in sx.ticks():
        x = sx(t)
        out.append(f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(x)}" y2="{_f(y + 4)}" '
                   f'stroke="{MUTED}"/><text class="tick" x="{_f(x)}" y="{_f(y + 16)}" '
                   f'text-anchor="middle" fill="{MUTED}">{escape(fmt(t) if t else "0")}</text>')
    out.append(f'<text class="label" x="{_f((sx.p0 + sx.p1) / 2)}" y="{_f(y + 34)}" '
               f'text-anchor="middle" fill="{INK}">{escape(label)}</text></g>')
    return out


def _y_axis(sy: Scale, x0: float, x1: float, label: str, fmt: Any) -> list[str]:
    out = [f'<g class="axis y-axis"><line x1="{_f(x0)}" y1="{_f(sy.p0)}" x2="{_f(x0)}" '
           f'y2="{_f(sy.p1)}" stroke="{MUTED}"/>']
    out += _grid(sy, x0, x1, fmt)
    mid = (sy.p0 + sy.p1) / 2
    out.append(f'<text class="label" x="14" y="{_f(mid)}" text-anchor="middle" fill="{INK}" '
               f'transform="rotate(-90 14 {_f(mid)})">{escape(label)}</text></g>')
    return out


def _grid(sy: Scale, x0: float, x1: float, fmt: Any) -> list[str]:
    """A horizontal grid line from x0 to x1 at each tick of `sy`, its label left of x0."""
    out = []
    for t in sy.ticks():
        y = sy(t)
        out.append(f'<line x1="{_f(x0)}" y1="{_f(y)}" x2="{_f(x1)}" y2="{_f(y)}" '
                   f'stroke="{GRID}"/><text class="tick" x="{_f(x0 - 6)}" y="{_f(y + 4)}" '
                   f'text-anchor="end" fill="{MUTED}">{escape(fmt(t) if t else "0")}</text>')
    return out


def _legend(items: Sequence[tuple[str, str]], x: float, y: float, shape: str = "dot") -> list[str]:
    out = ['<g class="legend">']
    for i, (name, col) in enumerate(items):
        yy = y + i * 16
        mark = (f'<circle cx="{_f(x + 5)}" cy="{_f(yy - 4)}" r="4" fill="{col}"/>' if shape == "dot"
                else f'<rect x="{_f(x)}" y="{_f(yy - 9)}" width="10" height="10" fill="{col}"/>')
        out.append(f'{mark}<text x="{_f(x + 15)}" y="{_f(yy)}" fill="{INK}">{escape(name)}</text>')
    out.append("</g>")
    return out


def _empty(kind: str, title: str, message: str) -> str:
    return _frame(kind, title, [f'<text class="empty" x="{W / 2}" y="{H / 2}" '
                                f'text-anchor="middle" fill="{MUTED}">{escape(message)}</text>'])


# --- Pareto front: cost against days --------------------------------------------------------

def layout_text(p: Mapping[str, Any]) -> str:
    """A layout in one short line, the same in the text, the page and the charts:
    'tp4 pp2x4 dp256 z3 mb1 hsdp8' (x vpp where interleaved, hsdp shard group, off: parts)."""
    vpp = p.get("vpp") or 1
    parts = [f"tp{p['tp']}", f"pp{p['pp']}" + (f"x{vpp}" if vpp > 1 else ""), f"dp{p['dp']}"]
    parts += [f"{k}{p[k]}" for k in ("cp", "ep") if (p.get(k) or 1) > 1]
    parts += [f"z{p['zero']}", f"mb{p['micro_batch']}"]
    if p.get("shard_group"):
        parts.append(f"hsdp{p['shard_group']}")
    if p.get("offload_parts"):
        parts.append("off:" + "+".join(str(x)[:3] for x in p["offload_parts"]))
    return " ".join(parts)


def _key(p: dict[str, Any]) -> tuple[Any, ...]:
    return (p["gpu"], p["gpus"], p["platform"], p["pricing"], layout_text(p), p["precision"],
            p["recompute"])


def plan_points(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The distinct plans of a result (ranked ones first, then the rest of the front)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in list(plan.get("plans") or []) + list(plan.get("pareto") or []):
        if p.get("cost_usd") is not None and p.get("time_to_train_days"):
            seen.setdefault(_key(p), p)
    return list(seen.values())


def pareto_svg(plan: dict[str, Any]) -> str:
    title = "Cost against time to train"
    pts = plan_points(plan)
    if not pts:
        return _empty("pareto", title, "no feasible plan to draw")
    x0, x1, y0, y1 = LEFT, W - RIGHT, H - BOTTOM, TOP
    days = [p["time_to_train_days"] for p in pts]
    cost = [p["cost_usd"] for p in pts]
    dl, bud = plan.get("deadline_days"), plan.get("budget_usd")
    sx = Scale.fit(days + ([dl] if dl else []), x0, x1)
    sy = Scale.fit(cost + ([bud] if bud else []), y0, y1)
    body = _y_axis(sy, x0, x1, "cost (USD)", usd) + _x_axis(sx, y0, "time to train", duration)
    if dl and sx.lo <= dl <= sx.hi:
        body.append(f'<line class="deadline" x1="{_f(sx(dl))}" y1="{y1}" x2="{_f(sx(dl))}" '
                    f'y2="{y0}" stroke="#d64545" stroke-dasharray="4 3"/><text x="'
                    f'{_f(sx(dl) + 4)}" y="{y1 + 10}" fill="#d64545">deadline</text>')
    if bud and sy.lo <= bud <= sy.hi:
        body.append(f'<line class="budget" x1="{x0}" y1="{_f(sy(bud))}" x2="{x1}" '
                    f'y2="{_f(sy(bud))}" stroke="#d64545" stroke-dasharray="4 3"/><text x="'
                    f'{x1 - 40}" y="{_f(sy(bud) - 4)}" fill="#d64545">budget</text>')
    front = sorted((p for p in plan.get("pareto") or [] if p.get("cost_usd") is not None),
                   key=lambda p: p["time_to_train_days"])
    if len(front) > 1:
        d = " ".join(f"{_f(sx(p['time_to_train_days']))},{_f(sy(p['cost_usd']))}" for p in front)
        body.append(f'<polyline class="front" points="{d}" fill="none" stroke="{MUTED}" '
                    f'stroke-width="1.2" stroke-dasharray="2 2"/>')
    ranked = {_key(p): i for i, p in enumerate(plan.get("plans") or [], 1)}
    body.append('<g class="points">')
    for p in pts:
        body.append(_pareto_point(p, sx, sy, ranked.get(_key(p))))
    body.append("</g>")
    modes = sorted({p["pricing"] for p in pts}, key=lambda m: list(PALETTE).index(m)
                   if m in PALETTE else 99)
    body += _legend([(m, colour(m)) for m in modes], x1 + 16, y1 + 8)
    body.append(f'<text x="{x1 + 16}" y="{_f(y1 + 20 + 16 * len(modes))}" fill="{MUTED}">'
                f'--- Pareto front</text>')
    return _frame("pareto", title, body, data=dict(
        x_min=sx.lo, x_max=sx.hi, x_log=int(sx.log), y_min=sy.lo, y_max=sy.hi, y_log=int(sy.log),
        x0=x0, x1=x1, y0=y0, y1=y1))


def _pareto_point(p: dict[str, Any], sx: Scale, sy: Scale, rank: int | None) -> str:
    x, y = sx(p["time_to_train_days"]), sy(p["cost_usd"])
    tip = (f"{p['gpus']} x {p['gpu']} · {layout_text(p)} · {p['precision']} · {p['platform']} · "
           f"{p['pricing']} — {duration(p['time_to_train_days'])}, {usd(p['cost_usd'])}"
           + (f" (rank {rank})" if rank else ""))
    ring = (f'<circle cx="{_f(x)}" cy="{_f(y)}" r="8" fill="none" stroke="{INK}" '
            f'stroke-width="1.5"/><text x="{_f(x + 10)}" y="{_f(y - 8)}" font-weight="600" '
            f'fill="{INK}">#1</text>' if rank == 1 else "")
    return (f'<g class="point"{" data-rank=" + _a(rank) if rank else ""} data-gpu={_a(p["gpu"])} '
            f'data-gpus="{p["gpus"]}" data-pricing={_a(p["pricing"])} '
            f'data-days="{p["time_to_train_days"]!r}" data-cost="{p["cost_usd"]!r}">{ring}'
            f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5" fill="{colour(p["pricing"])}" '
            f'fill-opacity="0.85" stroke="#fff"><title>{escape(tip)}</title></circle></g>')


# --- memory stack per GPU ---------------------------------------------------------------------

def memory_svg(estimates: Sequence[dict[str, Any]], labels: Sequence[str] | None = None) -> str:
    title = "Memory per GPU against capacity (GiB)"
    if not estimates:
        return _empty("memory", title, "no configuration to draw")
    labels = list(labels or [f"{e['gpus']} x {e['gpu']}" for e in estimates])
    x0, x1, y0, y1 = LEFT, W - RIGHT, H - BOTTOM, TOP
    tops = [1.08 * max(e["memory_gib"]["total"], e["gpu_memory_gib"]) for e in estimates]
    sy = Scale.fit(tops, y0, y1, zero=True, log=False)
    body = _y_axis(sy, x0, x1, "GiB per GPU", num)
    body.append(f'<text x="{x1}" y="{TOP - 6}" text-anchor="end" font-size="10" fill="{MUTED}">'
                'number over a bar: GiB used</text>')
    slot = (x1 - x0) / len(estimates)
    bw = min(56.0, slot * 0.6)
    for i, (e, label) in enumerate(zip(estimates, labels, strict=True)):
        body += _memory_bar(e, label, x0 + slot * (i + 0.5), bw, sy, y0)
    legend = [(name, col) for _, name, col in PARTS] + [("margin", MARGIN_FILL)]
    body += _legend(legend, x1 + 16, y1 + 8, shape="box")
    body.append(f'<line x1="{x1 + 16}" y1="{y1 + 8 + 16 * len(legend) - 4}" x2="{x1 + 26}" '
                f'y2="{y1 + 8 + 16 * len(legend) - 4}" stroke="#d64545" stroke-width="2"/>'
                f'<text x="{x1 + 31}" y="{y1 + 8 + 16 * len(legend)}" fill="{INK}">capacity</text>')
    return _frame("memory", title, body, data=dict(y_min=sy.lo, y_max=sy.hi, y_log=0, y0=y0,
                                                   y1=y1))


def _memory_bar(e: dict[str, Any], label: str, cx: float, bw: float, sy: Scale,
                y0: float) -> list[str]:
    m, cap = e["memory_gib"], e["gpu_memory_gib"]
    out = [f'<g class="bar" data-label={_a(label)} data-total="{m["total"]!r}" '
           f'data-capacity="{cap!r}">']
    base = 0.0
    for key, name, col in PARTS:
        v = m.get(key, 0.0) or 0.0
        ya, yb = sy(base), sy(base + v)
        out.append(f'<rect class="part" data-part="{key}" data-gib="{v!r}" x="{_f(cx - bw / 2)}" '
                   f'y="{_f(yb)}" width="{_f(bw)}" height="{_f(ya - yb)}" fill="{col}">'
                   f'<title>{escape(f"{label}: {name} {num(v)} GiB")}</title></rect>')
        base += v
    if cap > base:
        out.append(f'<rect class="margin" data-gib="{cap - base!r}" x="{_f(cx - bw / 2)}" '
                   f'y="{_f(sy(cap))}" width="{_f(bw)}" height="{_f(sy(base) - sy(cap))}" '
                   f'fill="{MARGIN_FILL}"><title>{escape(f"{label}: {num(cap - base)} GiB free")}'
                   f"</title></rect>")
    out.append(f'<line class="capacity" x1="{_f(cx - bw / 2 - 6)}" y1="{_f(sy(cap))}" '
               f'x2="{_f(cx + bw / 2 + 6)}" y2="{_f(sy(cap))}" stroke="#d64545" stroke-width="2"/>')
    verdict = "fits" if e.get("fits", base <= cap) else "over"
    out.append(f'<text x="{_f(cx)}" y="{_f(min(sy(cap), sy(base)) - 6)}" text-anchor="middle" '
               f'font-size="10" fill="{INK if verdict == "fits" else "#d64545"}">{num(base)}'
               f'</text>')
    for k, word in enumerate(label.split(" ", 1)):
        out.append(f'<text class="bar-label" x="{_f(cx)}" y="{_f(y0 + 14 + 12 * k)}" '
                   f'text-anchor="middle" font-size="10" fill="{INK}">{escape(word)}</text>')
    out.append("</g>")
    return out


# --- scaling outlook ----------------------------------------------------------------------------

def outlook_svg(plan: dict[str, Any]) -> str:
    title = "Scaling outlook of the winner"
    pts = [o for o in plan.get("outlook") or [] if o.get("feasible")]
    if not pts:
        return _empty("outlook", title, "no scaling outlook (no feasible winner)")
    win = (plan.get("plans") or [{}])[0].get("gpus")
    panel_h, gap = 92, 26
    height = TOP + 3 * panel_h + 2 * gap + BOTTOM
    x0, x1 = LEFT, W - RIGHT
    counts = sorted({o["gpus"] for o in pts})
    sx = Scale(lo=counts[0] / 1.25, hi=counts[-1] * 1.25, p0=x0 + 10, p1=x1 - 10, log=True,
               marks=tuple(counts))
    series = (("days", "time to train", "time_to_train_days", duration, "#0072b2"),
              ("cost", "cost", "cost_usd", usd, "#009e73"),
              ("efficiency", "scaling efficiency", "scaling_efficiency",
               lambda v: f"{v * 100:.0f}%", "#d55e00"))
    body: list[str] = []
    for i, (name, label, key, fmt, col) in enumerate(series):
        top = TOP + i * (panel_h + gap)
        vals = [o.get(key) for o in pts]
        extra = [0.0, 1.0] if name == "efficiency" else [0.0]
        sy = Scale.fit([v for v in vals if v is not None] + extra, top + panel_h, top, zero=True,
                       log=False, steps=3)
        body += _panel(name, label, pts, key, sx, sy, fmt, col, x0, x1, top, panel_h)
    y0 = TOP + 3 * panel_h + 2 * gap
    body += _x_axis(sx, y0, "GPUs", lambda v: f"{v:,.0f}")
    if win and sx.lo <= win <= sx.hi:
        body.append(f'<line class="winner" x1="{_f(sx(win))}" y1="{TOP}" x2="{_f(sx(win))}" '
                    f'y2="{y0}" stroke="{INK}" stroke-dasharray="3 3"/><text x="{_f(sx(win) + 4)}"'
                    f' y="{TOP + 10}" fill="{INK}">winner</text>')
    return _frame("outlook", title, body, height=height,
                  data=dict(x_min=sx.lo, x_max=sx.hi, x_log=1, x0=x0 + 10, x1=x1 - 10))


def _panel(name: str, label: str, pts: list[dict[str, Any]], key: str, sx: Scale, sy: Scale,
           fmt: Any, col: str, x0: float, x1: float, top: float, h: float) -> list[str]:
    out = [f'<g class="panel" data-series="{name}" data-y-min="{sy.lo!r}" data-y-max="{sy.hi!r}"'
           f' data-y-log="{int(sy.log)}" data-y0="{top + h}" data-y1="{top}">']
    out += _grid(sy, x0, x1, fmt)
    out.append(f'<text class="label" x="{x1 + 12}" y="{_f(top + h / 2)}" fill="{col}" '
               f'font-weight="600">{escape(label)}</text>')
    xy = [(sx(o["gpus"]), sy(o[key]), o) for o in pts if o.get(key) is not None]
    if len(xy) > 1:
        out.append(f'<polyline points="{" ".join(f"{_f(x)},{_f(y)}" for x, y, _ in xy)}" '
                   f'fill="none" stroke="{col}" stroke-width="2"/>')
    for x, y, o in xy:
        tip = escape(f"{o['gpus']} GPUs: {label} {fmt(o[key])}")
        out.append(f'<circle class="point" data-gpus="{o["gpus"]}" data-value="{o[key]!r}" '
                   f'cx="{_f(x)}" cy="{_f(y)}" r="3.5" fill="{col}"><title>{tip}</title></circle>')
    out.append("</g>")
    return out


# --- buy against rent ---------------------------------------------------------------------------

def buy_rent_series(tco: dict[str, Any]) -> dict[str, Any]:
    """Cumulative-cost lines: own = capex + opex per month x m; each cloud mode's cheapest offer
    = its monthly bill x m (the bill of `estimate.cost.break_even_months`)."""
    from ..estimators.cost import HOURS_PER_MONTH

    months = max(1.0, float(tco["years"]) * 12)
    own = {"up_front_usd": float(tco["cash_up_front_usd"]),
           "usd_per_month": float(tco["opex_usd_per_year_total"]) / 12}
    best: dict[str, dict[str, Any]] = {}
    for r in tco.get("cloud") or []:
        if r.get("usd_per_gpu_hour") is None or not math.isfinite(r["usd_per_gpu_hour"]):
            continue
        b = best.get(r["pricing"])
        if b is None or r["usd_per_gpu_hour"] < b["usd_per_gpu_hour"]:
            best[r["pricing"]] = r
    rent = {m: {"offer": r["offer"],
                "usd_per_month": r["usd_per_gpu_hour"] * tco["gpus"] * tco["utilization"]
                * HOURS_PER_MONTH,
                "break_even_months": (tco.get("break_even_months") or {}).get(m)}
            for m, r in best.items()}
    return {"months": months, "own": own, "rent": rent}


def buy_rent_svg(tco: dict[str, Any]) -> str:
    n = tco.get("gpus")
    title = f"Buy against rent: {n} x {tco.get('accelerator')} at " \
            f"{tco.get('utilization', 0) * 100:.0f}% utilization"
    s = buy_rent_series(tco)
    if not s["rent"]:
        return _empty("buy-rent", title, "no cloud offer to compare (tco --compare-cloud)")
    x0, x1, y0, y1 = LEFT, W - RIGHT, H - BOTTOM, TOP
    months, own = s["months"], s["own"]
    ends = [own["up_front_usd"] + own["usd_per_month"] * months]
    ends += [r["usd_per_month"] * months for r in s["rent"].values()]
    sx = Scale.fit([0.0, months], x0, x1, zero=True, log=False)
    sy = Scale.fit([0.0, *ends], y0, y1, zero=True, log=False)
    body = _y_axis(sy, x0, x1, "cumulative cost (USD)", usd)
    body += _x_axis(sx, y0, "months", lambda v: f"{v:.0f}")
    body.append(_line("own", 0.0, own["up_front_usd"], months, ends[0], sx, sy, colour("own"),
                      width=3))
    legend = [("own (bought)", colour("own"))]
    for k, (mode, r) in enumerate(s["rent"].items()):
        body.append(_line(mode, 0.0, 0.0, months, r["usd_per_month"] * months, sx, sy,
                          colour(mode)))
        legend.append((mode, colour(mode)))
        be = r["break_even_months"]
        if be is not None and 0 < be <= months:
            x, y = sx(be), sy(own["up_front_usd"] + own["usd_per_month"] * be)
            body.append(f'<g class="break-even" data-mode={_a(mode)} data-months="{be!r}">'
                        f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5" fill="#fff" stroke="'
                        f'{colour(mode)}" stroke-width="2"><title>{escape(mode)}: owning is '
                        f'cheaper after {num(be)} months</title></circle><text x="{_f(x + 7)}" '
                        f'y="{_f(y + (16 if k % 2 else -9))}" fill="{colour(mode)}">'
                        f'{num(be)} mo</text></g>')
    body += _legend(legend, x1 + 16, y1 + 8)
    return _frame("buy-rent", title, body, data=dict(
        x_min=sx.lo, x_max=sx.hi, x_log=0, y_min=sy.lo, y_max=sy.hi, y_log=0,
        x0=x0, x1=x1, y0=y0, y1=y1))


def _line(name: str, xa: float, ya: float, xb: float, yb: float, sx: Scale, sy: Scale,
          col: str, width: float = 2) -> str:
    return (f'<line class="series" data-series={_a(name)} data-start="{ya!r}" data-end="{yb!r}" '
            f'x1="{_f(sx(xa))}" y1="{_f(sy(ya))}" x2="{_f(sx(xb))}" y2="{_f(sy(yb))}" '
            f'stroke="{col}" stroke-width="{width}"><title>{escape(name)}: {usd(yb)} after '
            f'{num(xb)} months</title></line>')
