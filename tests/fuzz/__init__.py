"""A seeded, bounded fuzzer for gpuplan (issue #10).

`gen.generate(seed, n)` builds cases (argv, files to write, environment, whether the input is
invalid); `run.run_case` runs one in process (`gpuplan.cli.main`) or as a real process and
`classify.classify` sorts the outcome into classes (traceback, hang, nonfinite, bad_accepted,
invariant, messy_error, warning). `benchmarks/fuzz.py` runs a full campaign; tests/test_fuzz.py a
fixed-seed slice.
"""
