//! tern's tags as GCP labels, and back.
//!
//! Label keys and values allow only lowercase letters, digits, `_` and `-` (63 characters at
//! most), so `tern:owner` becomes `tern-owner` and values are lowercased with other characters
//! replaced by `-`. That is lossy for job names such as `BERT.large`, so the exact tags also
//! travel in the instance's description, which tern reads back first; the labels are what
//! list filters, billing exports and the leak collector's owner check use.

use std::collections::BTreeMap;

use tern_cloud::{Tags, tag};

/// Prefix of the description that carries the exact tags as JSON.
pub const DESCRIPTION_PREFIX: &str = "tern tags: ";

const MAX: usize = 63;

/// The label key for a tern tag key (`tern:owner` → `tern-owner`).
pub fn key(tag_key: &str) -> String {
    let mut k = sanitize(tag_key);
    if !k.starts_with(|c: char| c.is_ascii_lowercase()) {
        k.insert(0, 't');
        k.truncate(MAX);
    }
    k
}

/// A label value: lowercase letters, digits, `_` and `-`, at most 63 characters.
pub fn value(v: &str) -> String {
    sanitize(v)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(MAX)
        .collect()
}

/// Labels for a launch's tags.
pub fn from_tags(tags: &Tags) -> BTreeMap<String, String> {
    tags.iter().map(|(k, v)| (key(k), value(v))).collect()
}

/// The description holding the exact tags.
pub fn description(tags: &Tags) -> String {
    format!(
        "{DESCRIPTION_PREFIX}{}",
        serde_json::to_string(tags).unwrap_or_default()
    )
}

/// The tags of an instance read back: the description's exact tags when they agree with the
/// labels (a description edited by hand to claim another owner is ignored), else the labels
/// under tern's own key names.
pub fn to_tags(labels: &BTreeMap<String, String>, description: Option<&str>) -> Tags {
    let exact: Option<Tags> = description
        .and_then(|d| d.strip_prefix(DESCRIPTION_PREFIX))
        .and_then(|json| serde_json::from_str(json).ok());
    if let Some(exact) = exact
        && exact
            .iter()
            .all(|(k, v)| labels.get(&key(k)) == Some(&value(v)))
    {
        return exact;
    }
    let known = [tag::OWNER, tag::INTENT, tag::JOB, tag::CLUSTER];
    labels
        .iter()
        .map(|(k, v)| {
            let name = known
                .iter()
                .find(|t| key(t) == *k)
                .map_or_else(|| k.clone(), |t| (*t).to_owned());
            (name, v.clone())
        })
        .collect()
}

/// The list filter selecting instances whose `tag_key` label equals `v`.
pub fn filter(tag_key: &str, v: &str) -> String {
    format!("labels.{} = \"{}\"", key(tag_key), value(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags() -> Tags {
        [
            (tag::OWNER, "Team-A"),
            (tag::JOB, "BERT.large_v2"),
            (tag::INTENT, "0b7c6a3e-1f0e-5c7a-9d51-3f1c2b4a5e6d"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn keys_and_values_follow_gcp_label_syntax() {
        for (k, v) in from_tags(&tags()) {
            for s in [&k, &v] {
                assert!(s.len() <= 63);
                assert!(
                    s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c)),
                    "{s}"
                );
            }
            assert!(k.starts_with(|c: char| c.is_ascii_lowercase()));
        }
        assert_eq!(key(tag::OWNER), "tern-owner");
        assert_eq!(value("BERT.large_v2"), "bert-large_v2");
        assert_eq!(value(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn exact_tags_come_back_from_the_description() {
        let t = tags();
        let labels = from_tags(&t);
        assert_eq!(to_tags(&labels, Some(&description(&t))), t);
        // Without the description, the labels under tern's key names (lossy values).
        let back = to_tags(&labels, None);
        assert_eq!(
            back.get(tag::JOB).map(String::as_str),
            Some("bert-large_v2")
        );
        assert_eq!(back.get(tag::OWNER).map(String::as_str), Some("team-a"));
    }

    #[test]
    fn a_description_that_disagrees_with_the_labels_is_ignored() {
        let t = tags();
        let labels = from_tags(&t);
        let mut forged = t.clone();
        forged.insert(tag::OWNER.into(), "someone-else".into());
        let back = to_tags(&labels, Some(&description(&forged)));
        assert_eq!(back.get(tag::OWNER).map(String::as_str), Some("team-a"));
    }
}
