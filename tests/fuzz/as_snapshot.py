#!/usr/bin/env python3
"""Wraps a pt_decode input in the demo snapshot, as the target does, so the
CLI can show it: `as_snapshot.py INPUT OUT.ptscope`, then
`ptscope packets OUT.ptscope` or `ptscope decode --jobs 2 --chunk 64 ...`."""

import io
import sys
import tarfile

from make_seeds import members, with_aux

pt = open(sys.argv[1], "rb").read()
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for name, data in members().items():
        if name == "perf.data":
            data = with_aux(data, pt)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
open(sys.argv[2], "wb").write(buf.getvalue())
