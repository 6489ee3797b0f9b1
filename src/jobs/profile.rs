//! Reading measured throughput profiles (parsing is pure, in
//! `tern_policies::forecast::parse_profile`): from a folder on disk, or from the CSV text a spec
//! carries inline (what the controller accepts over the API).

use std::path::Path;

use tern_cloud::ProfileRef;
use tern_cloud::input::{Limit, read_text_capped};
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
        let text = read_text_capped(&path, Limit::PROFILE).map_err(|source| JobError::Read {
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

/// The rows of a spec's profile. `base` resolves a `path` profile (the spec file's folder);
/// `None` means this caller reads no files (the controller), so a `path` profile is refused.
pub fn profile_rows(
    p: &ProfileRef,
    base: Option<&Path>,
    shown: &str,
) -> Result<Vec<ProfileRow>, JobError> {
    match (&p.path, base) {
        (Some(path), Some(base)) => load_profile(&base.join(path), p.node_type.as_deref()),
        (Some(_), None) => Err(JobError::ProfilePath {
            shown: shown.to_string(),
        }),
        (None, _) => {
            let mut rows = Vec::new();
            for (field, text) in [
                ("profile.placements", &p.placements),
                ("profile.scalability", &p.scalability),
            ] {
                if let Some(text) = text {
                    let at = format!("{shown}: `{field}`");
                    rows.extend(parse_profile(text, &at).map_err(JobError::forecast(&at))?);
                }
            }
            Ok(rows)
        }
    }
}

/// `p` with its folder's CSV files read (relative to `base`) and carried inline, so whoever
/// receives it (the controller) reads no file. An inline profile is returned as it is.
pub fn inline_profile(p: &ProfileRef, base: &Path) -> Result<ProfileRef, JobError> {
    let Some(path) = &p.path else {
        return Ok(p.clone());
    };
    let dir = base.join(path);
    let suffix = p
        .node_type
        .as_deref()
        .map(|g| format!("-{g}"))
        .unwrap_or_default();
    let read = |stem: &str| -> Result<Option<String>, JobError> {
        let file = dir.join(format!("{stem}{suffix}.csv"));
        if !file.exists() {
            return Ok(None);
        }
        read_text_capped(&file, Limit::PROFILE)
            .map(Some)
            .map_err(|source| JobError::Read {
                path: file.display().to_string(),
                source,
            })
    };
    let out = ProfileRef {
        path: None,
        placements: read("placements")?,
        scalability: read("scalability")?,
        accelerator: p.accelerator.clone(),
        node_type: p.node_type.clone(),
    };
    if out.placements.is_none() && out.scalability.is_none() {
        return Err(JobError::NoProfile {
            dir: dir.display().to_string(),
            suffix,
            hint: "",
        });
    }
    Ok(out)
}
