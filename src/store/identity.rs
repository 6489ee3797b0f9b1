//! Which store this is, and whether it is still the one the controller opened.
//!
//! A store gets a random cluster id when it is created. The controller tags every instance with
//! it (`tern:cluster`) and its leak collector touches only instances that carry it: a controller
//! started on a lost, empty or different store sees the old fleet as another cluster's, and
//! reports it instead of terminating it. A SQLite store also remembers the file it opened (by
//! device and inode, after resolving symlinks) so that a state file deleted or replaced while
//! the controller runs stops the controller instead of letting it act on a fresh, empty copy.

use std::path::{Path, PathBuf};

use super::sql::Value;
use super::{Store, StoreError};

/// The file a SQLite store was opened from, as the OS identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileIdentity {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    pub fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let (dev, ino) = dev_ino(path)?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            dev,
            ino,
        })
    }

    /// Fails when the file is gone or another file now has its name.
    fn check(&self) -> Result<(), StoreError> {
        match dev_ino(&self.path) {
            Ok(now) if now == (self.dev, self.ino) => Ok(()),
            Ok(_) => Err(StoreError::Replaced(format!(
                "{} was replaced by another file while the controller ran",
                self.path.display()
            ))),
            Err(e) => Err(StoreError::Replaced(format!(
                "{} is gone ({e}); it was deleted or moved while the controller ran",
                self.path.display()
            ))),
        }
    }
}

#[cfg(unix)]
fn dev_ino(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn dev_ino(path: &Path) -> std::io::Result<(u64, u64)> {
    // No inode: a missing file is still detected.
    std::fs::metadata(path).map(|m| (m.len().min(1), 0))
}

/// `path` with every symlink resolved, so that two names for one file are one lock and one
/// SQLite database (SQLite keys its journal and lock files by the name it is given). A file
/// that does not exist yet resolves through its folder.
pub fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let name = path.file_name().ok_or(e)?;
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            Ok(std::fs::canonicalize(dir)?.join(name))
        }
        Err(e) => Err(e),
    }
}

impl Store {
    /// Write this store's cluster id if it has none yet (a new store), and read it back.
    pub(super) fn ensure_identity(&self) -> Result<String, StoreError> {
        let fresh = uuid::Uuid::new_v4().to_string();
        let now = chrono::Utc::now().timestamp_millis();
        self.exec(
            "INSERT INTO identity (singleton, cluster, created_at) VALUES (1, ?1, ?2) \
             ON CONFLICT (singleton) DO NOTHING",
            vec![Value::from(fresh), Value::from(now)],
        )?;
        self.read_identity()
    }

    fn read_identity(&self) -> Result<String, StoreError> {
        let rows = self.query("SELECT cluster FROM identity WHERE singleton = 1", vec![])?;
        rows.first()
            .map(|r| r.text(0))
            .transpose()?
            .ok_or_else(|| StoreError::Replaced("the store has no identity row".into()))
    }

    /// This store's cluster id (the `tern:cluster` tag of its instances).
    pub fn cluster_id(&self) -> &str {
        &self.cluster
    }

    /// Fails with [`StoreError::Replaced`] when the store is no longer the one opened: its file
    /// was deleted or replaced, or the database now has another identity. Other errors (a
    /// dropped connection) are the caller's to retry.
    pub fn verify(&self) -> Result<(), StoreError> {
        if let Some(file) = &self.file {
            file.check()?;
        }
        match self.read_identity() {
            Ok(id) if id == self.cluster => Ok(()),
            Ok(id) => Err(StoreError::Replaced(format!(
                "the store's cluster id changed from {} to {id}",
                self.cluster
            ))),
            Err(StoreError::Replaced(_)) => Err(StoreError::Replaced(
                "the store lost its identity row (emptied or replaced)".into(),
            )),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Err(StoreError::Replaced(format!(
                "the store cannot be read as the one opened: {e}"
            ))),
        }
    }
}
