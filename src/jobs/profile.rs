//! Reading measured throughput profiles from disk (parsing is pure, in
//! `tern_policies::forecast::parse_profile`).

use std::path::Path;

use tern_policies::forecast::{ProfileRow, parse_profile};

use super::JobError;

/// Reads the profile files of a directory: `placements[-TYPE].csv` and `scalability[-TYPE].csv`.
pub fn load_profile(dir: &Path, node_type: Option<&str>) -> Result<Vec<ProfileRow>, JobError> {
    let suffix = node_type.map(|g| format!("-{g}")).unwrap_or_default();
    let mut rows = Vec::new();
    let mut found = false;
    for stem in ["placements", "scalability"] {
        let path = dir.join(format!("{stem}{suffix}.csv"));
        if !path.exists() {
            continue;
        }
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| JobError::Read {
            path: shown.clone(),
            source,
        })?;
        rows.extend(parse_profile(&text, &shown).map_err(JobError::forecast(&shown))?);
        found = true;
    }
    if !found {
        return Err(JobError::NoProfile {
            dir: dir.display().to_string(),
            suffix,
            hint: if node_type.is_none() {
                " (Sia-layout profiles need --gpu TYPE)"
            } else {
                ""
            },
        });
    }
    Ok(rows)
}
