"""Full fuzz campaign over the gpuplan CLI (issue #10); prints totals by class.

    python benchmarks/fuzz.py --seed 7 --cases 10000 --processes 300

In-process cases call gpuplan.cli.main(argv) with stdout/stderr captured (one alarm of 5 s per
case); real-process cases run `python -m gpuplan ...` with a timeout. The classes are described
in tests/fuzz/classify.py. Exit status 1 when any defect was found. The first examples of each
class are printed so that each can be replayed by hand.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from fuzz.classify import CLASSES, classify  # noqa: E402
from fuzz.gen import Case, generate  # noqa: E402
from fuzz.run import run_inproc, run_process  # noqa: E402

MEMORY_LIMIT = 8 * 2**30  # a runaway case fails with MemoryError instead of swapping the machine


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _one(job: tuple[Case, bool]) -> tuple[str, str, float, list[tuple[str, str]]]:
    case, process = job
    out = run_process(case) if process else run_inproc(case)
    return case.show(), case.family, out.seconds, classify(out)


def campaign(seed: int, cases: int, processes: int, jobs: int, profile: str = "full",
             keep: int = 5) -> dict[str, object]:
    work = [(c, False) for c in generate(seed, cases, profile)]
    work += [(c, True) for c in generate(seed + 1_000_003, processes, profile)]
    totals: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    by_family: Counter[str] = Counter()
    slowest = (0.0, "")
    t0 = time.perf_counter()
    with multiprocessing.Pool(jobs, initializer=_limit_memory) as pool:
        for shown, family, seconds, found in pool.imap_unordered(_one, work, chunksize=8):
            slowest = max(slowest, (seconds, shown))
            for cls in {c for c, _ in found}:
                totals[cls] += 1
                by_family[f"{cls}/{family}"] += 1
            for cls, detail in found:
                if len(examples[cls]) < keep:
                    examples[cls].append(f"{shown}  ->  {detail}")
    return {"seed": seed, "in_process": cases, "processes": processes,
            "elapsed_s": round(time.perf_counter() - t0, 1),
            "totals": {c: totals[c] for c in CLASSES}, "by_family": dict(sorted(by_family.items())),
            "slowest_s": round(slowest[0], 2), "slowest": slowest[1], "examples": examples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=10_000, help="in-process cases")
    ap.add_argument("--processes", type=int, default=300, help="real-process cases")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--profile", choices=("full", "quick"), default="full")
    ap.add_argument("--examples", type=int, default=5, help="examples kept per class")
    ap.add_argument("--json", action="store_true", help="print the totals as JSON")
    args = ap.parse_args()
    res = campaign(args.seed, args.cases, args.processes, args.jobs, args.profile, args.examples)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"seed {res['seed']}: {res['in_process']} in-process cases, {res['processes']} "
              f"processes, {res['elapsed_s']} s; slowest case {res['slowest_s']} s")
        for cls in CLASSES:
            print(f"  {cls:13} {res['totals'][cls]:6}")  # type: ignore[index]
        for key, n in res["by_family"].items():  # type: ignore[attr-defined]
            print(f"    {key:30} {n:6}")
        for cls, lines in res["examples"].items():  # type: ignore[attr-defined]
            print(f"\n{cls}:")
            for line in lines:
                print(f"  {line[:400]}")
    return 1 if any(res["totals"].values()) else 0  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
