//! Where the corpus of real public API descriptions is: `../shared/specs`
//! beside the workspace, or `IDEM_SPECS_DIR`.

use std::path::{Path, PathBuf};

/// The corpus folder, or `None` after saying on stderr that the calling
/// test is skipped because there is none.
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("IDEM_SPECS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/specs"),
        PathBuf::from,
    );
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: no corpus at {} (set IDEM_SPECS_DIR to point elsewhere)",
            dir.display()
        );
        None
    }
}
