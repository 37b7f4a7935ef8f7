#!/usr/bin/env python3
"""Wraps a pt_decode input in the demo snapshot, as the target does, so the
CLI can show it: `as_snapshot.py INPUT OUT.ptscope`, then
`ptscope packets OUT.ptscope` or `ptscope decode --jobs 2 --chunk 64 ...`.

The input's first bytes configure the decoder (targets.rs, configure_pt):
the MTC period, max non-turbo ratio and TSC:CTC ratio go into the
perf.data's AUXTRACE_INFO and PT config. Its CPU choice does not (it only
picks libipt's errata); a note says when it differs from the demo's."""

import io
import struct
import sys
import tarfile

from make_seeds import AUXTRACE_INFO, DEMO_PT_CONFIG, members, with_aux

MTC_FREQ_BITS = 0xF << 14


def configure(perf, cfg):
    flags, nom, ctc_n, ctc_d = cfg
    perf = bytearray(perf)
    ao, asz, do, dsz = struct.unpack_from("<4Q", perf, 24)
    off, pmu = do, None
    while off < do + dsz:
        kind, _, size = struct.unpack_from("<IHH", perf, off)
        if kind == AUXTRACE_INFO:
            words = off + 16
            (pmu,) = struct.unpack_from("<Q", perf, words)
            for i, v in ((11, MTC_FREQ_BITS), (12, ctc_n), (13, ctc_d), (15, nom)):
                struct.pack_into("<Q", perf, words + 8 * i, v)
        off += size
    attr_size = struct.unpack_from("<Q", perf, 16)[0]
    for a in range(ao, ao + asz, attr_size):
        (kind,) = struct.unpack_from("<I", perf, a)
        if kind == pmu:
            (config,) = struct.unpack_from("<Q", perf, a + 8)
            config = (config & ~MTC_FREQ_BITS) | ((flags & 0xF) << 14)
            struct.pack_into("<Q", perf, a + 8, config)
    if (flags >> 4) & 3 != (DEMO_PT_CONFIG[0] >> 4) & 3:
        print("note: the input picks another CPU; the snapshot keeps the demo's",
              file=sys.stderr)
    return bytes(perf)


data = open(sys.argv[1], "rb").read()
cfg, pt = data[: len(DEMO_PT_CONFIG)], data[len(DEMO_PT_CONFIG) :]
if len(cfg) < len(DEMO_PT_CONFIG):
    sys.exit(f"{sys.argv[1]}: shorter than the configuration prefix")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for name, data in members().items():
        if name == "perf.data":
            data = configure(with_aux(data, pt), cfg)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
open(sys.argv[2], "wb").write(buf.getvalue())
