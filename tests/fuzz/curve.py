#!/usr/bin/env python3
"""Coverage over a fuzzing run from `run`'s logs: edges at the end of each
window and how many the window added, to tell a plateau from a slow climb.
Windows are of wall time (--window SECONDS) or of executions (--runs N),
which a loaded machine does not stretch.

With --origin BINARY (the fuzz target that wrote the log), each window's
new edges are also told by the crate whose source they are in (the
innermost inlined frame): ours (`ptscope/decoder`, ...) or a dependency's
(gimli, iced-x86, std, ...), std's locks, channels and thread parking
apart, as thread timing rather than the input picks their branches (as
random hash keys pick a hash table's probes: "std (hashing)"), and
the rest of std by the crate it was inlined into ("std via gimli"). A
target that still finds edges may have run out of new paths in our code
long before and be exploring a dependency's, such as a demangler's
grammar. --ours lists where each of our new edges is.

    tests/fuzz/curve.py [--window SECONDS | --runs N] [--origin BINARY [--ours]] LOG...
"""
import argparse
import collections
import json
import os
import re
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--window", type=int, default=600)
ap.add_argument("--runs", type=int, default=0)
ap.add_argument("--origin", metavar="BINARY")
ap.add_argument("--ours", action="store_true")
# Where `setarch -R` loads a PIE on x86-64, as `run` starts the targets.
ap.add_argument("--base", type=lambda s: int(s, 0), default=0x555555554000)
ap.add_argument("logs", nargs="+")
args = ap.parse_args()
ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def origin(path):
    """The crate a source file belongs to."""
    if path.startswith(ROOT + "/"):
        return "ptscope/" + path[len(ROOT) + 1 :].split("/")[0]
    if m := re.search(r"/registry/src/[^/]+/([^/]+?)-\d+\.\d+[^/]*/", path):
        return m.group(1)
    if path.startswith("/rustc/") or path.startswith("/rust/deps/"):
        # Locks, channels and thread parking: which of their branches run
        # depends on how the chunked pass's threads interleave, not on the
        # input, so they trickle in by chance.
        if re.search(r"/library/std/src/(sync|sys/sync|thread)/", path):
            return "std (threads)"
        # Likewise a hash table's probing, under per-map random keys.
        if "/hashbrown-" in path:
            return "std (hashing)"
        return "std"
    return "other"


def is_ours(crate):
    """Our code, with the std code inlined into it (a slice's bounds check,
    an Option's map): paths through our functions all the same."""
    return crate.startswith("ptscope") or crate.startswith("std via ptscope")


def symbolize(binary, pcs):
    """pc -> (crate, function, file:line) of its innermost frame."""
    text = "".join(f"{hex(pc - args.base)}\n" for pc in pcs)
    out = subprocess.run(
        ["llvm-symbolizer", f"--obj={binary}", "--output-style=JSON", "--demangle"],
        input=text, capture_output=True, text=True, check=True,
    ).stdout
    where = {}
    for line in out.splitlines():
        entry = json.loads(line)
        frames = entry.get("Symbol") or [{}]
        f = frames[0]
        path = f.get("FileName", "?")
        crate = origin(path)
        if crate == "std":
            outer = [origin(g.get("FileName", "")) for g in frames]
            if "std (threads)" in outer or any(
                re.search(r"std::(sync|thread)::", g.get("FunctionName", "")) for g in frames
            ):
                crate = "std (threads)"
            elif "std (hashing)" in outer:
                crate = "std (hashing)"
            elif caller := next((c for c in outer if c != "std"), None):
                # std's generic code counts for the crate that inlined it.
                crate = f"std via {caller}"
        func = f.get("FunctionName", "?")
        if len(frames) > 1:
            # Inlined: the function it was inlined into tells the path.
            func += f" in {frames[-1].get('FunctionName', '?')}"
        where[int(entry["Address"], 16) + args.base] = (
            crate, func, f"{path}:{f.get('Line', 0)}")
    return where


for log in args.logs:
    # (seconds since the corpus was loaded, edges, executions, new PCs);
    # the corpus's own coverage (libFuzzer's INITED line) is the baseline.
    points = []
    inited = None
    pending = []
    for line in open(log, errors="replace"):
        sec, _, rest = line.partition(" ")
        if inited is not None and (pc := re.search(r"NEW_PC: (0x[0-9a-f]+)", rest)):
            pending.append(int(pc.group(1), 16))
            continue
        cov = re.search(r"cov: (\d+)", rest)
        runs = re.match(r"#(\d+)", rest)
        if not (cov and runs and sec.isdigit()):
            continue
        if inited is None:
            if "INITED" not in rest:
                continue
            inited = int(sec)
        # libFuzzer prints an input's new PCs just before its NEW line.
        points.append((int(sec) - inited, int(cov.group(1)), int(runs.group(1)), pending))
        pending = []
    if not points:
        print(f"{log}: the corpus never finished loading")
        continue
    where = {}
    if args.origin:
        where = symbolize(args.origin, {pc for p in points for pc in p[3]})
    print(f"{log}: the corpus covers {points[0][1]} edges ({inited} s to load)")
    key, step = (2, args.runs) if args.runs else (0, args.window)
    first = points[0][key]
    end = points[-1][key] - first
    prev = points[0][1]
    total = collections.Counter()
    i = 0
    for w in range(step, end + step, step):
        new = collections.Counter()
        ours = []
        while i < len(points) and points[i][key] - first <= w:
            for pc in points[i][3]:
                crate, func, loc = where.get(pc, ("?", "?", "?"))
                new[crate] += 1
                if is_ours(crate):
                    ours.append(f"      {func}  {loc}")
            i += 1
        secs, edges, runs, _ = points[i - 1]
        line = f"  {secs:>6} s  {runs:>10} runs  {edges:>6} edges  +{edges - prev}"
        if where:
            mine = sum(n for c, n in new.items() if is_ours(c))
            deps = ", ".join(f"{c} {n}" for c, n in new.most_common() if not is_ours(c))
            line += f"  (ours {mine}; {deps or 'no dependency'})"
        print(line)
        if args.ours and ours:
            print("\n".join(ours))
        total += new
        prev = edges
    if where:
        print("  in all: " + ", ".join(f"{c} {n}" for c, n in total.most_common()))
