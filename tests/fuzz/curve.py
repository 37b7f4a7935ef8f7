#!/usr/bin/env python3
"""Coverage over a fuzzing run from `run`'s logs: edges at the end of each
window and how many the window added, to tell a plateau from a slow climb.
Windows are of wall time (--window SECONDS) or of executions (--runs N),
which a loaded machine does not stretch.

    tests/fuzz/curve.py [--window SECONDS | --runs N] LOG...
"""
import argparse
import re

ap = argparse.ArgumentParser()
ap.add_argument("--window", type=int, default=600)
ap.add_argument("--runs", type=int, default=0)
ap.add_argument("logs", nargs="+")
args = ap.parse_args()
for log in args.logs:
    # (seconds since the corpus was loaded, edges, executions); the
    # corpus's own coverage (libFuzzer's INITED line) is the baseline.
    points = []
    inited = None
    for line in open(log, errors="replace"):
        sec, _, rest = line.partition(" ")
        cov = re.search(r"cov: (\d+)", rest)
        runs = re.match(r"#(\d+)", rest)
        if not (cov and runs and sec.isdigit()):
            continue
        if inited is None:
            if "INITED" not in rest:
                continue
            inited = int(sec)
        points.append((int(sec) - inited, int(cov.group(1)), int(runs.group(1))))
    if not points:
        print(f"{log}: the corpus never finished loading")
        continue
    print(f"{log}: the corpus covers {points[0][1]} edges ({inited} s to load)")
    key, step = (2, args.runs) if args.runs else (0, args.window)
    end = points[-1][key]
    prev = points[0][1]
    for w in range(step, end + step, step):
        upto = [p for p in points if p[key] <= w]
        secs, edges, runs = upto[-1]
        print(f"  {secs:>6} s  {runs:>10} runs  {edges:>6} edges  +{edges - prev}")
        prev = edges
