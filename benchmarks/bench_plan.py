"""Benchmark `gpuplan plan` (issue #6): candidates per second, wall time, peak memory.

    python benchmarks/bench_plan.py            # prints the figures
    python benchmarks/bench_plan.py --llm-analysis   # also the per-candidate llm-analysis ratio

Measures, for GPT-3 175B, Llama 3 70B and DeepSeek-V3 over the whole catalog:
- the values searched per layout dimension (tp, pp, vpp, the (pp, vpp) pairs, cp, ep, ZeRO,
  micro-batch, recompute, precision; issue #11) and the layouts per GPU count, and the HSDP,
  op-recompute and offload variants (`search/variants.py`) over all GPU counts;
- candidates evaluated (every hardware x layout x pricing row) and per second, in-process,
  wall and CPU time (the CPU time is what a loaded machine still measures faithfully);
- the physics alone (memory + time over every hardware x layout point) per second;
- the whole CLI, end to end, as a user runs it (Python start-up and catalog load included);
- peak resident memory of that process;
- `gpuplan --help` wall time.
`--compare REV` times the search of this tree and of another git revision in the same run
(before/after), one process each, alternating (`compared`): both see the same load; it
prints the median of later searches in a process (warm) and the first one (cold: what the CLI
runs, whose page faults cost about a fifth of it); and over two processes, warm and cold, with
this process's and the child's CPU (robust to load) and this process's page faults. Like the
CLI, each process first keeps freed memory for reuse (`search/heap.py`, where it has it).
"Work computed" counts the rows that reach arithmetic: layout rows through the memory model
(once per search, shared by every GPU group; a layer's activation terms and the pipeline
placement once per distinct combination of the fields they read: estimators/distinct.py), (hardware, layout) rows through the time model
(per GPU group: those that fit; groups with the same rows share one call, the layout-only
terms then computed once per layout row: `search/timed.py`, so the layout rows and the calls
are printed too), rows priced; the other candidates are tallied by counting. The search is
exact: every shortcut gives the figures of the straightforward path
(tests/test_search_cache.py).
Rows the exact pruning skips (search/prune.py: provably slower than a probe of their GPU count)
are printed apart: they never reach the time model, so they are not in the work computed.
The search is timed in one process (wall and CPU: the CPU time is what a loaded machine still
measures faithfully) and as the CLI runs it, over `--workers` processes (search/split.py).
Targets on a 2-core machine: search <= 0.5 s (issue #11), >= 10 M candidates/s, <= 1 s end to
end for a 70B model, <= 2 GiB peak, --help <= 0.3 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CASES = {
    "gpt3-175b": ["--model", "gpt3-175b", "--tokens", "300B"],
    "llama3-70b": ["--model", "llama3-70b", "--tokens", "15T", "--deadline-days", "90"],
    "deepseek-v3": ["--model", "deepseek-v3", "--tokens", "14.8T"],
}
HERE = Path(__file__).resolve().parent


class _Captured(BaseException):
    """Ends `gpuplan.plan` once its request is built (`_request`)."""


def _request(argv: list[str]) -> tuple:
    """The catalog and request `gpuplan.plan` builds for these flags (captured, not searched)."""
    from gpuplan import api
    from gpuplan.search import plan as planmod

    kwargs = {argv[i].removeprefix("--").replace("-", "_"): argv[i + 1]
              for i in range(0, len(argv), 2)}
    if "deadline_days" in kwargs:
        kwargs["deadline_days"] = float(kwargs["deadline_days"])
    seen = []
    original = planmod.search

    def capture(cat, req, progress=None, workers=1):
        seen.append((cat, req))
        raise _Captured  # no search: the caller's first search is a fresh process's

    planmod.search = capture
    try:
        api.plan(**kwargs)
    except _Captured:
        pass
    finally:
        planmod.search = original
    return seen[0]


class _Probe:
    """Wraps the search's steps while it runs: the physics time (layout table and group
    evaluations, the outlook's few extra points left out), the layout table and axes seen,
    and the rows reaching the time model and the pricing."""

    def __init__(self) -> None:
        from gpuplan.search import plan as planmod
        from gpuplan.search import prune, timed

        self.planmod, self.timed, self.prune = planmod, timed, prune
        self.physics: list[float] = []
        self.tables: list = []
        self.axes: list = []
        self.work = {"timed": 0, "timed_layouts": 0, "time_calls": 0, "priced": 0}
        self.in_outlook = False
        self.saved = [(planmod, n, getattr(planmod, n)) for n in (
            "evaluate_groups", "layout_table", "outlook", "model_axes", "_priced")]
        self.saved.append((timed, "time_per_step", timed.time_per_step))
        self.saved.append((prune, "timed_rows", prune.timed_rows))
        self.pruned = prune.Stats()  # the search's pruning figures, the outlook's left out

    def _timed(self, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            if not self.in_outlook:
                self.physics[-1] += time.perf_counter() - t
                if isinstance(out, self.planmod.LayoutTable):
                    self.tables.append(out)
            return out
        return wrapper

    def _counted(self, key, fn, size):
        def wrapper(*a, **k):
            if not self.in_outlook:
                self.work[key] += size(*a)
            return fn(*a, **k)
        return wrapper

    def _time_model(self, fn):
        """Counts, per call of the time model: the (hardware, layout) rows it times (a call
        for several groups with the same layouts times each layout once per group) and the
        layout rows it is given."""
        def wrapper(model, lay, hw, *a, **k):
            if not self.in_outlook:
                shape = np.broadcast_shapes(np.shape(lay.tp),
                                            np.shape(hw.memory_bandwidth_bytes_per_s))
                self.work["timed"] += int(np.prod(shape))
                self.work["timed_layouts"] += int(np.size(lay.tp))
                self.work["time_calls"] += 1
            return fn(model, lay, hw, *a, **k)
        return wrapper

    def _pruning(self, fn):
        """Adds each call's pruning figures (prune.stats grows) to `pruned`."""
        def wrapper(*a, **k):
            before = dataclasses.replace(self.prune.stats)
            out = fn(*a, **k)
            if not self.in_outlook:
                now = self.prune.stats
                for f in ("bounded", "probed", "skipped", "timed", "settled", "unsure"):
                    if hasattr(now, f):  # settled, unsure: where the tree has search/twins.py
                        setattr(self.pruned, f, getattr(self.pruned, f) + getattr(now, f)
                                - getattr(before, f))
                self.pruned.fell_back |= now.fell_back and not before.fell_back
            return out
        return wrapper

    def _outlook(self, fn):
        def wrapper(*a, **k):
            self.in_outlook = True
            try:
                return fn(*a, **k)
            finally:
                self.in_outlook = False
        return wrapper

    def _axes(self, fn):
        def wrapper(*a, **k):
            self.axes.append(fn(*a, **k))
            return self.axes[-1]
        return wrapper

    def __enter__(self) -> _Probe:
        pm, tm = self.planmod, self.timed
        pm.evaluate_groups, pm.layout_table = (self._timed(pm.evaluate_groups),
                                              self._timed(pm.layout_table))
        pm.outlook, pm.model_axes = self._outlook(pm.outlook), self._axes(pm.model_axes)
        pm._priced = self._counted("priced", pm._priced,
                                   lambda req, rows, prices, *r: rows["gpus"].size * len(prices))
        tm.time_per_step = self._time_model(tm.time_per_step)
        self.prune.timed_rows = self._pruning(self.prune.timed_rows)
        return self

    def __exit__(self, *exc: object) -> None:
        for mod, name, fn in self.saved:
            setattr(mod, name, fn)


def in_process(argv: list[str], repeat: int = 5) -> dict[str, float]:
    from gpuplan.cli.plan_cmd import default_workers
    from gpuplan.search import plan as planmod
    from gpuplan.search import prune
    from gpuplan.search.variants import KINDS

    cat, req = _request(argv)
    planmod.search(cat, req)  # untimed: the figures below are of later, warm searches
    walls, cpus = [], []
    with _Probe() as probe:  # one process: the work counted, its wall and CPU time
        for _ in range(repeat):
            probe.physics.append(0.0)
            probe.pruned = prune.Stats()
            t0, c0 = time.perf_counter(), time.process_time()
            r = probe.planmod.search(cat, req)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    pruned = probe.pruned
    # over two processes where there are two cores (`gpuplan plan --workers 2`; the CLI's
    # default when the machine is idle enough: `default_workers`)
    workers = min(2, os.cpu_count() or 1)
    split = [_timed_search(cat, req, workers) for _ in range(repeat)]
    wall, phys = statistics.median(walls), statistics.median(probe.physics)
    table = probe.tables[0]
    kinds = table.extra["kind"] if table.extra else []
    return {"memory_rows": table.g["gpus"].size + (table.extra["gpus"].size if table.extra
                                                   else 0),
            "timed_rows": probe.work["timed"] // repeat,
            "timed_layouts": probe.work["timed_layouts"] // repeat,
            "time_calls": probe.work["time_calls"] // repeat,
            "priced_rows": probe.work["priced"] // repeat,
            "axes": probe.axes[0].sizes(), "per_count": probe.axes[0].size,
            "variants": {k: int(sum(1 for x in kinds if x == i)) for i, k in enumerate(KINDS)},
            "search_cpu_s": statistics.median(cpus), "workers": workers,
            "split_s": statistics.median(d["wall_s"] for d in split),
            "split_cpu_s": statistics.median(d["cpu_s"] for d in split),
            "split_faults": statistics.median(d["faults"] for d in split),
            "split_child_cpu_s": statistics.median(d["child_cpu_s"] for d in split),
            "cli_workers": default_workers(),
            "pruned": pruned,
            "evaluated": r.evaluated, "physics_points": r.physics_evaluated,
            "feasible": r.feasible, "fit": r.physically_feasible, "search_s": wall,
            "candidates_per_s": r.evaluated / wall,
            "physics_s": phys, "physics_points_per_s": r.physics_evaluated / phys}


def _timed_search(cat, req, workers: int) -> dict[str, float]:
    """Wall and CPU seconds of one search: this process's (a forked part's CPU is its own)
    and its children's (the forked parts, reaped by the search), and this process's minor
    page faults during it (search/split.py's docstring)."""
    from gpuplan.search import plan as planmod

    me, kids = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN
    f0, k0 = resource.getrusage(me).ru_minflt, resource.getrusage(kids)
    t0, c0 = time.perf_counter(), time.process_time()
    planmod.search(cat, req, workers=workers)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if reap := getattr(sys.modules.get("gpuplan.search.split"), "reap", None):
        reap(block=True)  # the children's exit, which the search does not wait for
    k1 = resource.getrusage(kids)
    return {"wall_s": wall, "cpu_s": cpu, "faults": resource.getrusage(me).ru_minflt - f0,
            "child_cpu_s": k1.ru_utime + k1.ru_stime - k0.ru_utime - k0.ru_stime}


def search_times(argv: list[str], repeat: int, first_workers: int = 1) -> dict[str, float]:
    """Median wall and CPU seconds of `plan.search` alone (any revision has it), and over two
    processes where the revision has `workers` (else the one-process figures): wall, this
    process's CPU and minor page faults, the child's CPU. The first search (cold, as the
    CLI's) over `first_workers` processes: with 2, that search alone."""
    import inspect

    from gpuplan.search import plan as planmod

    cat, req = _request(argv)
    walls, cpus, split = [], [], []
    two = "workers" in inspect.signature(planmod.search).parameters
    if first_workers > 1:
        first = _timed_search(cat, req, first_workers) if two else _timed_search(cat, req, 1)
        return {"first_split_wall_s": first["wall_s"], "first_split_cpu_s": first["cpu_s"],
                "first_split_child_cpu_s": first["child_cpu_s"]}
    t0, c0 = time.perf_counter(), time.process_time()  # the first search: cold, as the CLI's
    planmod.search(cat, req)
    first = {"first_wall_s": time.perf_counter() - t0, "first_cpu_s": time.process_time() - c0}
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        planmod.search(cat, req)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        if two:
            split.append(_timed_search(cat, req, 2))
    one = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    both = {f"split_{k}": statistics.median(d[k] for d in split) if split else one.get(k, 0.0)
            for k in ("wall_s", "cpu_s", "faults", "child_cpu_s")}
    return {**one, **both, **first}


ROUNDS = 3  # --compare: rounds of (this tree, the other revision), each in a fresh process


def compared(rev: str, repeat: int) -> tuple[dict[str, dict[str, float]], ...]:
    """`search_times` of each case in this tree and at git revision `rev` (its src/ exported
    to a temporary folder), each timed by this script in a child process, the two trees
    alternating over ROUNDS rounds (so that both see the same load); per tree and case, the
    median over the rounds of each round's median."""
    import tarfile
    import tempfile

    root = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev, "src"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        trees = [root / "src", Path(tmp) / "src"]
        runs: list[list[dict]] = [[], []]
        for _ in range(ROUNDS):
            for i, src in enumerate(trees):
                env = {**os.environ, "PYTHONPATH": str(src)}
                runs[i].append({})
                for case, first in ((c, w) for c in CASES for w in (1, 2)):
                    out = subprocess.run([sys.executable, __file__, "--search-times", case,
                                          "--repeat", str(repeat), "--first-workers",
                                          str(first)], capture_output=True, text=True,
                                         check=True, env=env).stdout  # its first is cold
                    got = json.loads(out.strip().splitlines()[-1])[case]
                    runs[i][-1].setdefault(case, {}).update(got)
    return tuple({n: {k: statistics.median(r[n][k] for r in rs) for k in rs[0][n]}
                  for n in rs[0]} for rs in runs)


def end_to_end(argv: list[str], repeat: int = 5) -> dict[str, float]:
    cmd = [sys.executable, "-m", "gpuplan", "plan", *argv, "--json", "--quiet"]
    walls, rss = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        walls.append(time.perf_counter() - t0)
        rss.append(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
        json.loads(out)
    return {"wall_s": statistics.median(walls), "peak_rss_mib": max(rss) / 1024}


def help_time(repeat: int = 7) -> float:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpuplan", "--help"], capture_output=True,
                       check=True)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


LA_RUNNER = r"""
import json, sys, time, itertools
from llm_analysis.analysis import train
n, cfg_path, gpus = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
grid = itertools.cycle([(tp, pp, z, mb) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8)
                        for z in (0, 1, 2, 3) for mb in (1, 2, 4)])
t0 = time.perf_counter()
ok = 0
for _ in range(n):
    tp, pp, z, mb = next(grid)
    try:
        train(model_name=cfg_path, gpu_name="a100-sxm-80gb", total_num_gpus=gpus, tp_size=tp,
              pp_size=pp, ds_zero=z, batch_size_per_gpu=mb, seq_len=2048,
              global_batch_size=gpus // (tp * pp) * mb * 4, activation_recomputation=1,
              log_level="ERROR")
        ok += 1
    except Exception:
        pass  # infeasible candidates cost llm-analysis time too
print(json.dumps({"per_candidate_s": (time.perf_counter() - t0) / n, "completed": ok, "n": n}))
"""


def llm_analysis_ratio(model: str, n: int = 64) -> dict[str, float] | None:
    """Per-candidate time of llm-analysis 0.2.2's `train()` (in the venv that
    benchmarks/compare_llm_analysis.py creates) over a sample of the same kind of candidates
    (tp x pp x ZeRO x micro-batch on 512 A100s) -- one Python call per candidate."""
    import tempfile

    from gpuplan.catalog import load_catalog

    py = HERE / ".venv-llm-analysis" / "bin" / "python"
    if not py.exists():
        print("  (llm-analysis venv missing: run benchmarks/compare_llm_analysis.py first)")
        return None
    m = load_catalog().model(model)
    ffn = m.ffn
    if ffn % m.hidden:  # llm-analysis 0.2.2 requires ffn to be a multiple of hidden
        ffn = round(ffn / m.hidden) * m.hidden
        print(f"  (llm-analysis rejects ffn {m.ffn} for hidden {m.hidden}; timing it on a "
              f"proxy with ffn {ffn})")
    cfg = {"name": f"bench-{m.id}", "num_layers": m.layers, "n_head": m.heads,
           "hidden_dim": m.hidden, "vocab_size": m.vocab, "max_seq_len": 2048,
           "num_key_value_heads": m.kv_heads, "ffn_embed_dim": ffn}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        path.write_text(json.dumps(cfg))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            out = subprocess.run([str(py), "-c", LA_RUNNER, str(n), str(path), "512"],
                                 capture_output=True, text=True, timeout=600, check=True,
                                 env=env, cwd=tmp).stdout
        except (subprocess.SubprocessError, OSError) as err:
            print(f"  (llm-analysis run failed: {str(err)[:200]})")
            return None
    return json.loads(out.strip().splitlines()[-1])


def _print_search(ip: dict) -> None:
    """The pruning's figures and the search's times (one process, then `--workers`)."""
    pr = ip["pruned"]
    print(f"  pruning (exact)        {pr.bounded:,} (hardware, layout) rows bounded below "
          f"(search/prune.py), {pr.probed:,} timed first as probes, {pr.skipped:,} skipped "
          f"as provably slower than a probe of their count (never timed, counted as they "
          f"would be), {pr.timed:,} timed after the probes; of the skipped ZeRO-3 rows "
          f"whose HSDP copy fits, {getattr(pr, 'settled', 0):,} had the HSDP verdict settled "
          f"from bounds (search/twins.py; {getattr(pr, 'unsure', 0):,} of them timed to decide)"
          f"{' -- THE GUARD FELL BACK, every row timed' if pr.fell_back else ''}")
    print(f"  search wall time       {ip['search_s']:>14.3f} s   "
          f"-> {ip['candidates_per_s'] / 1e6:,.1f} M candidates/s (target >= 10 M/s), "
          f"one process")
    print(f"  search CPU time        {ip['search_cpu_s']:>14.3f} s   one process")
    print(f"  search wall, {ip['workers']} procs  {ip['split_s']:>14.3f} s   (target "
          f"<= 0.5 s; `gpuplan plan --workers {ip['workers']}`; the CLI's default now "
          f"{ip['cli_workers']}; CPU of this process {ip['split_cpu_s']:.3f} s, "
          f"{ip['split_faults']:,.0f} minor page faults)")


def _keep_freed_memory() -> None:
    """What the CLI's `plan` does first (search/heap.py), where this source tree has it."""
    try:
        from gpuplan.search import heap
    except ImportError:
        return
    heap.keep_freed_memory()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm-analysis", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--compare", metavar="REV",
                    help="also time the search of git revision REV (e.g. main) in this run")
    ap.add_argument("--search-times", metavar="CASE", help=argparse.SUPPRESS)
    ap.add_argument("--first-workers", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    _keep_freed_memory()
    if a.search_times:  # the child of --compare: this source tree's search times, as JSON
        print(json.dumps({a.search_times: search_times(CASES[a.search_times], a.repeat,
                                                       a.first_workers)}))
        return
    print(f"gpuplan --help: {help_time():.3f} s (target <= 0.3 s)")
    for name, argv in CASES.items():
        ip = in_process(argv, a.repeat)
        e2e = end_to_end(argv, a.repeat)
        print(f"\n{name}: gpuplan plan {' '.join(argv)}")
        print(f"  candidates evaluated   {ip['evaluated']:>14,}  ({ip['physics_points']:,} "
              f"hardware x layout points; {ip['fit']:,} fit and run; {ip['feasible']:,} distinct "
              f"options meet the constraints)")
        dims = ", ".join(f"{k} {v}" for k, v in ip["axes"].items())
        print(f"  values per dimension   {dims}; {ip['per_count']:,} layouts per GPU count")
        var = ", ".join(f"{k} {v:,}" for k, v in ip["variants"].items())
        print(f"  variants (all counts)  {var} (copies of grid rows, search/variants.py)")
        print(f"  work computed          {ip['memory_rows']:,} layout rows through the memory "
              f"model, {ip['timed_rows']:,} (hardware, layout) rows through the time model "
              f"({ip['timed_layouts']:,} layout rows in {ip['time_calls']} calls), "
              f"{ip['priced_rows']:,} rows priced (the rest of the candidates are excluded by "
              f"counting, before any arithmetic)")
        _print_search(ip)
        print(f"  physics (memory+time)  {ip['physics_s']:>14.3f} s   "
              f"-> {ip['physics_points_per_s'] / 1e6:,.1f} M hardware x layout points/s")
        print(f"  end to end (CLI)       {e2e['wall_s']:>14.3f} s   (target <= 1 s)")
        print(f"  peak memory            {e2e['peak_rss_mib']:>14.0f} MiB (target <= 2048 MiB)")
        if a.llm_analysis:
            la = llm_analysis_ratio(name)
            if la:
                per = ip["physics_s"] / ip["physics_points"]
                print(f"  llm-analysis 0.2.2     {la['per_candidate_s'] * 1e3:>14.3f} ms per "
                      f"candidate vs gpuplan {per * 1e9:,.0f} ns -> "
                      f"{la['per_candidate_s'] / per:,.0f}x faster ({la['completed']} of "
                      f"{la['n']} llm-analysis calls completed, the rest raised)")
    if a.compare:  # last: its child processes would count in the peak memory above
        load = os.getloadavg()[0]
        mine, base = compared(a.compare, a.repeat)
        print(f"\nsearch, this tree vs {a.compare} (same run, one process each, {ROUNDS} "
              f"alternating rounds of {a.repeat}; load average {load:.1f} -> "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
        for name, ip in mine.items():
            _print_compared(name, ip, base[name])


def _print_compared(name: str, ip: dict, b: dict) -> None:
    """One case of `--compare`: this tree's figures vs the other revision's."""
    def vs(key: str, fmt: str = "6.3f", unit: str = " s") -> str:
        return f"{ip[key]:{fmt}}{unit} vs {b[key]:{fmt}}{unit}"

    print(f"  {name:12s} one process: wall {vs('wall_s')};  CPU {vs('cpu_s')} "
          f"({ip['cpu_s'] / b['cpu_s']:.2f}x);  first search (cold) wall "
          f"{vs('first_wall_s')}, CPU {vs('first_cpu_s')}")
    print(f"  {'':12s} 2 procs:     wall {vs('split_wall_s')};  CPU here "
          f"{vs('split_cpu_s')}, child {vs('split_child_cpu_s')};  page faults here "
          f"{vs('split_faults', ',.0f', '')};  first search (cold, as the CLI) wall "
          f"{vs('first_split_wall_s')}, CPU here {vs('first_split_cpu_s')}, child "
          f"{vs('first_split_child_cpu_s')}")

if __name__ == "__main__":
    main()
