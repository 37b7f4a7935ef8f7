//! What naming an address costs: `ModuleSymbols::function` on libc
//! (dynamic symbols only) and on this bench's own binary (a full symtab
//! and DWARF), for random addresses over the whole module and for a hot
//! set of 64, as a trace hopping among a few functions makes. Then what
//! source lines cost on libc with its debug file (libc6-dbg), whose DWARF
//! is compressed: loading it (the units' ranges indexed), a function's
//! line as the coarse pass asks it, and the first line the fine pass asks
//! (addr2line's index built, its packed sections inflated again). This
//! prints figures; it asserts nothing.
//!
//! `cargo bench -p ptscope-decoder --bench symbols`

use std::path::Path;
use std::time::Instant;

use ptscope_decoder::ModuleSymbols;

fn main() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    if libc.exists() {
        time_lookups(libc);
        time_lines(libc);
    }
    time_lookups(&std::env::current_exe().unwrap());
}

/// Loading `path` with its debug file, and its first lines each way.
fn time_lines(path: &Path) {
    let data = std::fs::read(path).unwrap();
    let Some(id) = ptscope_formats::buildid::elf_build_id(&data) else {
        return;
    };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let debug = Path::new("/usr/lib/debug/.build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    let Ok(dfile) = std::fs::File::open(&debug) else {
        println!("{}: no debug file (install libc6-dbg)", path.display());
        return;
    };
    let file = std::fs::File::open(path).unwrap();
    let t = Instant::now();
    let syms = ModuleSymbols::load_split(path, &file, Some((&debug, &dfile))).unwrap();
    let load = t.elapsed();
    let entries: Vec<u64> = syms.functions().map(|f| f.entry).collect();
    let t = Instant::now();
    let first = syms.entry_location(entries[entries.len() / 2]).is_some();
    let entry_first = t.elapsed();
    let t = Instant::now();
    let found = entries
        .iter()
        .filter(|&&a| syms.entry_location(a).is_some())
        .count();
    let entry_all = t.elapsed().as_nanos() as f64 / entries.len() as f64;
    let t = Instant::now();
    let zoom = syms.location(entries[entries.len() / 2]).is_some();
    let zoom_first = t.elapsed();
    println!(
        "{} with {}: loaded in {load:?}; a function's line (coarse pass): first \
         {entry_first:?} ({first}), then {entry_all:.0} ns a function over all {} \
         ({found} with a line); the fine pass's first line (addr2line's index \
         built): {zoom_first:?} ({zoom})",
        path.display(),
        debug.display(),
        entries.len(),
    );
}

fn time_lookups(path: &Path) {
    let t = Instant::now();
    let syms = ModuleSymbols::load(path).unwrap();
    let load = t.elapsed();
    let entries: Vec<u64> = syms.functions().map(|f| f.entry).collect();
    let (lo, hi) = (
        *entries.iter().min().unwrap(),
        *entries.iter().max().unwrap(),
    );
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let probes: Vec<u64> = (0..1 << 16).map(|_| rng.u64(lo..hi)).collect();
    let time = |probes: &[u64], rounds: usize| {
        let mut found = 0usize;
        let t = Instant::now();
        for _ in 0..rounds {
            for &p in probes {
                found += std::hint::black_box(syms.function(p)).is_some() as usize;
            }
        }
        let n = (rounds * probes.len()) as f64;
        (t.elapsed().as_nanos() as f64 / n, 100.0 * found as f64 / n)
    };
    let (random_ns, hits) = time(&probes, 32);
    let (hot_ns, _) = time(&probes[..64], 32 * 1024);
    println!(
        "{}: {} functions, loaded in {load:?}; function(): {random_ns:.1} ns per call \
         on random addresses ({hits:.0}% hits), {hot_ns:.1} ns on a hot set",
        path.display(),
        entries.len(),
    );
}
