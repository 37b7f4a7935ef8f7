//! What the decoder's unit tests share: the bundled demo, as a path, an
//! opened snapshot and a decode.

use std::path::PathBuf;

use ptscope_formats::snapshot::Snapshot;

use crate::decoded::Decoded;

/// The bundled demo snapshot, as the checkout has it.
pub(crate) fn demo_path() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope")
}

/// The bundled demo, opened.
pub(crate) fn demo_snapshot() -> Snapshot {
    Snapshot::open(&demo_path()).expect("the bundled demo opens")
}

/// The bundled demo, decoded with the default options.
pub(crate) fn demo_decoded() -> Decoded {
    crate::decode::decode_snapshot(&demo_snapshot(), &Default::default())
        .expect("the bundled demo decodes")
}
