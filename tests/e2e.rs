//! ptscope's end-to-end tests, in one binary that compiles the shared
//! [`support`] module once. They drive the real `ptscope` binary and the
//! real window, and judge what it writes with perf and libipt.
//!
//! - [`capture`]: recording and attaching, with every trigger and backend;
//! - [`faults`]: the traced process exiting, killed or exec'ing mid-capture;
//! - [`hardware`]: the Intel PT backend, as far as it runs without the PMU;
//! - [`decode`]: snapshots decoded against libipt and `perf script`;
//! - [`debug_names`]: stripped system libraries named from their separate
//!   debug files, as perf names them;
//! - [`dialects`]: every timing dialect and overflow of the emulated unit,
//!   decoded alike by libipt, perf and ptscope;
//! - [`filter`]: IP-filtered captures (`--filter`), decoded by all three;
//! - [`range`]: range captures (`--range START STOP`), decoded by all three;
//! - [`lines`]: the fine pass, down to source lines;
//! - [`outlier`]: the outlier hunt: a function's duration histogram, and
//!   its slowest call compared with a typical one, by call path and line;
//! - [`export`]: `ptscope export`, read back by readers we did not write;
//! - [`marks`]: PTWRITE values, frequency and power states, judged by perf;
//! - [`bad_input`]: damaged files of every kind give clear errors;
//! - [`raw_dumps`]: raw PT dumps in every command and in the window;
//! - [`sparse_tracks`]: a track that decoded to almost nothing says why;
//! - [`script_rules`]: `perf script` text imported by our rules;
//! - [`peer_cases`]: magic-trace's replay cases (`tests/fixtures/magic-trace`);
//! - [`per_cpu`]: per-CPU captures, threads migrating between CPUs;
//! - [`qemu`]: the QEMU backend, judged by its plugin's instruction log,
//!   perf, libipt and ptscope's own decoder, on our programs and on
//!   python3 and gzip;
//! - [`fuzz_regressions`]: every fuzzing find and the corpus, replayed;
//! - [`gui`]: the window, under egui_kittest and as the real binary under Xvfb;
//! - [`kernel_maps`]: perf.data files mapping the kernel and its modules;
//! - [`missing_binaries`]: binaries not at their paths, named with the
//!   remedies, supplied by `--binaries` and in the window;
//! - [`model_cache`]: decoded models kept on disk and read back on the
//!   next open, never trusted when damaged;
//! - [`install`]: `scripts/install`, and the installed binary away from the
//!   checkout;
//! - [`layout`]: the code's shape: no import cycle of more than two modules
//!   in any crate.

mod support;

#[path = "fuzz/targets.rs"]
mod fuzz_targets;

#[path = "../capture/debuginfo/tests/server/mod.rs"]
mod debuginfod_server;

mod bad_input;
mod capture;
mod debug_names;
mod decode;
mod dialects;
mod export;
mod faults;
mod filter;
mod fuzz_regressions;
mod gui;
mod hardware;
mod install;
mod kernel_maps;
mod layout;
mod lines;
mod marks;
mod missing_binaries;
mod model_cache;
mod outlier;
mod peer_cases;
mod per_cpu;
mod qemu;
mod range;
mod raw_dumps;
mod script_rules;
mod sparse_tracks;
