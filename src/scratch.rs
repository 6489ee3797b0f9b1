//! Throwaway state: a directory removed when dropped (`tern demo`'s state file, the closed-loop
//! replay's per-window stores).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system's temporary folder, removed with everything in it when
/// dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/<prefix>-<pid>-<n>`: unique within the process and across processes.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
