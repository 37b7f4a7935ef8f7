#!/usr/bin/env bash
# Rebuilds the demo program and re-records the bundled demo snapshot with the
# emulated backend: the last 32 KiB of trace before the first slow request
# is reported. Run from anywhere; needs cc and cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
cc -O1 -g -fno-omit-frame-pointer -o "$here/demo" "$here/demo.c"
cargo build --quiet --manifest-path "$root/Cargo.toml" -p ptscope
"$root/target/debug/ptscope" record -q --size 32K --trigger on_slow_request -o "$here/demo.ptscope" -- "$here/demo"
echo "wrote $here/demo.ptscope"
