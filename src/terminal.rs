//! Text that reaches a person's terminal or spreadsheet. A job's failure reason is a worker's
//! stderr, an event can quote it, an agent token can post anything: printed raw, `ESC ] 0 ;`
//! would set the window title, OSC 52 write the clipboard, `ESC [2J` clear the screen and
//! U+202E reverse what follows. Every line `tern` prints for people goes through [`safe`]; JSON
//! keeps the exact text, and CSV cells go through [`csv_cell`].

use std::borrow::Cow;
use std::fmt::Write;

/// Characters shown escaped: C0 controls but newline and tab, DEL, C1 controls (U+009B is a
/// one-byte CSI to some terminals), and the bidirectional marks, embeddings, overrides and
/// isolates that reorder what a reader sees.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every unsafe character shown as an escape (`\x1b`, `\u{202e}`): visible, never
/// acted on. Borrowed when there is nothing to escape.
pub fn safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// A CSV cell a spreadsheet will not run: text that starts with `=`, `+`, `-`, `@`, a tab or a
/// carriage return gets a leading `'` (OWASP's rule), and unsafe characters are escaped.
/// Numbers are written by tern itself and never pass through here.
pub fn csv_cell(s: &str) -> Cow<'_, str> {
    let formula = s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    match (formula, safe(s)) {
        (false, text) => text,
        (true, text) => Cow::Owned(format!("'{text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_bidi_overrides_are_shown_not_sent() {
        let title = "boom\x1b]0;owned\x07 and \x1b[2J";
        assert_eq!(safe(title), "boom\\x1b]0;owned\\x07 and \\x1b[2J");
        let clipboard = "\x1b]52;c;ZWNobyBoaQ==\x07";
        assert!(!safe(clipboard).contains('\x1b'));
        assert_eq!(safe("abc\u{202E}fed"), "abc\\u{202e}fed");
        assert_eq!(safe("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(safe("a\rb\x7f"), "a\\x0db\\x7f");
        // Plain text, newlines, tabs and non-Latin scripts pass as they are, unallocated.
        let plain = "loss 0.12\tstep 40\nΔ 数据 ✓";
        assert!(matches!(safe(plain), Cow::Borrowed(_)));
        assert_eq!(safe(plain), plain);
    }

    #[test]
    fn csv_cells_never_start_a_formula() {
        assert_eq!(csv_cell("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        for s in ["+1", "-2+3", "@SUM(A1)", "\tx", "\rx"] {
            assert!(csv_cell(s).starts_with('\''), "{s:?}");
        }
        assert_eq!(csv_cell("\rx"), "'\\x0dx");
        assert_eq!(csv_cell("job-7"), "job-7");
        assert_eq!(csv_cell("exit status 1: a=b"), "exit status 1: a=b");
    }
}
