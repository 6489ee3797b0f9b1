//! The rule for names users choose (jobs, teams), and the check for labels read from files
//! (catalog columns, trace metadata, accelerator names), so neither can carry terminal escapes
//! or grow past what a URL path segment, a cloud tag or a table column holds.

/// The name rule, as error messages and the README state it.
pub const NAME_RULE: &str =
    "1–63 characters of letters, digits, `.`, `_` and `-`, starting with a letter or digit";

/// Longest name: a DNS label, so a name fits cloud tags, URL paths and hostnames.
pub const MAX_NAME: usize = 63;

/// Longest label read from a file (instance types, zones, accelerator names).
pub const MAX_LABEL: usize = 128;

/// Checks a job or team name against [`NAME_RULE`]. `Err` describes what was found, for
/// "expected …, found …" messages (escaped and shortened, never raw).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=MAX_NAME).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok { Ok(()) } else { Err(shown(name)) }
}

/// Checks a label read from a file: 1–[`MAX_LABEL`] characters, none of them a control
/// character (ESC, BEL, DEL, C1, line breaks). `Err` describes what was found.
pub fn check_label(label: &str) -> Result<(), String> {
    let ok = !label.is_empty()
        && label.chars().count() <= MAX_LABEL
        && !label.chars().any(char::is_control);
    if ok { Ok(()) } else { Err(shown(label)) }
}

/// What a rejected name looked like: Rust-escaped, and cut after 40 characters.
pub fn shown(text: &str) -> String {
    let n = text.chars().count();
    if n <= 40 {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(40).collect();
    format!("{head:?}… ({n} characters)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in [
            "a",
            "resnet50-imagenet",
            "cifar10-resnet18-sweep-07",
            "v1.2_x",
            "9",
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "a".repeat(64);
        for bad in ["", "-a", ".a", "a b", "a/b", "é", "a\u{1b}[2J", &long] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_name(&"a".repeat(63)), Ok(()));
    }

    #[test]
    fn rejected_names_are_shown_escaped_and_short() {
        let e = check_name(&format!("x\u{1b}[31m{}", "y".repeat(100_000))).expect_err("bad");
        assert!(!e.contains('\u{1b}'), "{e}");
        assert!(e.contains("\\u{1b}"), "{e}");
        assert!(e.len() < 120, "{e}");
        assert!(e.contains("100006 characters"), "{e}");
    }

    #[test]
    fn labels_refuse_control_characters_only() {
        assert_eq!(check_label("Radeon Pro V520"), Ok(()));
        assert_eq!(check_label("us-east-1a"), Ok(()));
        for bad in ["", "a\u{1b}b", "a\nb", "a\u{7f}", "a\u{9b}b"] {
            assert!(check_label(bad).is_err(), "{bad:?}");
        }
        assert!(check_label(&"x".repeat(MAX_LABEL + 1)).is_err());
    }
}
