//! Bounded reads of input files. Every file tern reads on a user's behalf (job specs, profiles,
//! catalogs, traces, quota files, token files, TLS certificates, keys and CA bundles, progress
//! files) goes through [`read_capped`] or
//! [`read_to_limit`], so `/dev/zero` or a gzip bomb fails with a clear error instead of
//! growing the process to gigabytes.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// A size cap and what it is for (named in the error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub what: &'static str,
    pub bytes: u64,
}

const MIB: u64 = 1 << 20;

impl Limit {
    /// A job spec (TOML). The largest example is 3 KiB.
    pub const SPEC: Limit = Limit::new("a job spec", 4 * MIB);
    /// One profile CSV (the largest shared profile is under 200 KiB).
    pub const PROFILE: Limit = Limit::new("a profile CSV", 16 * MIB);
    /// One spot trace (a year at 1-minute ticks is about 2 MiB).
    pub const TRACE: Limit = Limit::new("a spot trace", 64 * MIB);
    /// One catalog, after decompression (SkyPilot's full AWS catalog is about 30 MiB).
    pub const CATALOG: Limit = Limit::new("a catalog", 256 * MIB);
    /// Small settings files: quotas, tokens, certificates, keys, CA bundles, progress files.
    pub const SETTINGS: Limit = Limit::new("a settings file", MIB);

    pub const fn new(what: &'static str, bytes: u64) -> Limit {
        Limit { what, bytes }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bytes >= MIB && self.bytes.is_multiple_of(MIB) {
            write!(f, "{} MiB", self.bytes / MIB)
        } else {
            write!(f, "{} bytes", self.bytes)
        }
    }
}

/// Why a capped read failed. The caller's error names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("larger than {limit}, the limit for {}", limit.what)]
    TooLarge { limit: Limit },
    #[error("not valid UTF-8 text")]
    NotText,
}

/// Everything `reader` yields, refusing more than `limit` bytes.
pub fn read_to_limit(reader: impl Read, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    reader.take(limit.bytes + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit.bytes {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(out)
}

/// The bytes of the file at `path`, at most `limit` of them.
pub fn read_capped(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    read_to_limit(std::fs::File::open(path)?, limit)
}

/// The text of the file at `path` (UTF-8), at most `limit` bytes.
pub fn read_text_capped(path: &Path, limit: Limit) -> Result<String, ReadError> {
    String::from_utf8(read_capped(path, limit)?).map_err(|_| ReadError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let small = Limit::new("a test file", 1000);
        let e = read_capped(Path::new("/dev/zero"), small).expect_err("endless");
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "larger than 1000 bytes, the limit for a test file"
        );
    }

    #[test]
    fn a_file_at_the_limit_is_read_whole() {
        let bytes = vec![b'x'; 1000];
        let got = read_to_limit(&bytes[..], Limit::new("t", 1000)).expect("fits");
        assert_eq!(got, bytes);
        let over = read_to_limit(&bytes[..], Limit::new("t", 999));
        assert!(matches!(over, Err(ReadError::TooLarge { .. })));
    }
}
