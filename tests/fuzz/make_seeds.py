#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs (tests/fuzz/seeds/<target>/) from
the bundled demo snapshot and the test fixtures. The seeds are committed;
this is how they were made, and how to remake them after the demo changes.

Small seeds fuzz faster, so the trace is cut to a few PSB segments and the
snapshot seed carries only the demo's own binary and the vDSO (libc and
ld.so are left out and so decode as missing).

The marks seeds (seeds/marks/ and seeds/pt_decode/marks) are not made
here: they are PT built packet by packet with the PT format's encoder
(ptscope_formats::pt::write), by the e2e test
marks_seeds_are_written_by_the_encoder (tests/fuzz_regressions.rs), which
checks the committed files and, with PTSCOPE_WRITE_SEEDS=1, writes them.
This script empties the seeds folder first, so run that test with
PTSCOPE_WRITE_SEEDS=1 after it.
"""

import io
import os
import shutil
import struct
import subprocess
import sys
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
PSB = bytes([0x02, 0x82] * 8)
AUXTRACE = 71
AUXTRACE_INFO = 70
# A pt_decode input's first bytes configure the decoder (targets.rs,
# configure_pt); these decode as the demo was captured.
DEMO_PT_CONFIG = bytes([0x03, 10, 40, 1])


def members():
    with tarfile.open(os.path.join(ROOT, "assets", "demo", "demo.ptscope")) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def psbs(data):
    out, at = [], data.find(PSB)
    while at >= 0:
        out.append(at)
        at = data.find(PSB, at + 1)
    return out


def aux_of(perf):
    do, dsz = struct.unpack_from("<QQ", perf, 40)
    off = do
    while off < do + dsz:
        kind, _, size = struct.unpack_from("<IHH", perf, off)
        if kind == AUXTRACE:
            (n,) = struct.unpack_from("<Q", perf, off + 8)
            return perf[off + size : off + size + n]
        off += size
    sys.exit("the demo has no AUXTRACE record")


def with_aux(perf, new):
    """The perf.data with its first AUX buffer replaced by `new` and the
    others emptied (as the pt_decode target does); the sections after the
    data move. (The AUX index holds record offsets, which stay, and header
    sizes, which stay.)"""
    ao, asz, do, dsz = struct.unpack_from("<4Q", perf, 24)
    feats = int.from_bytes(perf[72:104], "little")
    data, off, first = bytearray(), do, True
    while off < do + dsz:
        kind, _, size = struct.unpack_from("<IHH", perf, off)
        rec = bytearray(perf[off : off + size])
        if kind == AUXTRACE:
            (n,) = struct.unpack_from("<Q", perf, off + 8)
            body = new if first else b""
            first = False
            struct.pack_into("<Q", rec, 8, len(body))
            rec += body
            off += size + n
        else:
            off += size
        data += rec
    delta = dsz - len(data)  # may be negative
    end = do + dsz
    table_len = bin(feats).count("1") * 16
    table = bytearray(perf[end : end + table_len])
    for i in range(bin(feats).count("1")):
        (fo,) = struct.unpack_from("<Q", table, i * 16)
        struct.pack_into("<Q", table, i * 16, fo - delta)
    rest = bytearray(perf[end + table_len :])
    # Each attr ends with the file section of its ids.
    attr_size = struct.unpack_from("<Q", perf, 16)[0]
    for a in range(ao, ao + asz, attr_size):
        ids = a + attr_size - 16
        (io_,) = struct.unpack_from("<Q", perf, ids)
        at = ids - (end + table_len) if ids >= end else None
        if at is not None and io_ >= end:
            struct.pack_into("<Q", rest, at, io_ - delta)
    head = bytearray(perf[:do])
    if ao >= end:
        struct.pack_into("<Q", head, 24, ao - delta)
    struct.pack_into("<Q", head, 48, len(data))
    return bytes(head + data + table + rest)


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    shutil.rmtree(SEEDS, ignore_errors=True)
    m = members()
    perf = m["perf.data"]
    aux = aux_of(perf)
    p = psbs(aux)
    write("pt_decode", "demo-whole", DEMO_PT_CONFIG + aux)
    write("pt_decode", "demo-first-segments", DEMO_PT_CONFIG + aux[: p[2]])
    write("pt_decode", "demo-middle-segment", DEMO_PT_CONFIG + aux[p[3] : p[4]])
    # memo_walk takes the same inputs: the memo's replays against the
    # plain walk, over the same code.
    write("memo_walk", "demo-whole", DEMO_PT_CONFIG + aux)
    write("memo_walk", "demo-first-segments", DEMO_PT_CONFIG + aux[: p[2]])
    write("memo_walk", "demo-middle-segment", DEMO_PT_CONFIG + aux[p[3] : p[4]])
    small = with_aux(perf, aux[: p[2]])
    write("perf_data", "demo", perf)
    write("perf_data", "demo-cut", small)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in m.items():
            if name == "perf.data":
                data = small
            elif name.endswith("/elf") and len(data) > 100_000:
                continue  # libc and ld.so: left missing
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    write("snapshot", "demo-small", buf.getvalue())
    for name, data in m.items():
        if name.endswith("/vdso") or (name.endswith("/elf") and len(data) < 100_000):
            write("symbols", name.split("/")[-1] + "-" + name.split("/")[-2][:8], data)
    out = os.path.join(SEEDS, "symbols", "inline-O2-g")
    subprocess.run(
        ["gcc", "-O2", "-g", "-o", out, os.path.join(ROOT, "tests", "programs", "inline.c")],
        check=True,
    )
    # Its DWARF compressed, as distributions ship it: what the line zoom
    # reads is kept packed and inflated again.
    out = os.path.join(SEEDS, "symbols", "inline-O2-gz")
    subprocess.run(
        ["gcc", "-O2", "-g", "-gz=zlib", "-o", out, os.path.join(ROOT, "tests", "programs", "inline.c")],
        check=True,
    )
    rules = os.path.join(ROOT, "tests", "fixtures", "script-rules")
    for f in sorted(os.listdir(rules)):
        if f.endswith(".perf"):
            with open(os.path.join(rules, f), "rb") as src:
                write("perf_script", f, src.read())


if __name__ == "__main__":
    main()
