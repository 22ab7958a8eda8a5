//! Text that came from Redis (owner ids, client descriptions, lock names, errors quoting
//! them) is written by applications, not by the operator: shown raw, a control character
//! could clear the screen, set the window title, hide the `[y/N]` prompt or fake a line.
//! Every such field goes through [`shown_text`] before it reaches the terminal; `--json`
//! output is escaped by JSON's own rules.

use std::fmt::Write as _;

/// `text` with every control character (line breaks, escape, delete, the C1 controls) and
/// every bidirectional-override character written as `\u{..}`, so that what the
/// terminal shows is what Redis holds, on one line.
pub(crate) fn shown_text(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_bidi_control(c) {
            let _ = write!(shown, "\\u{{{:x}}}", u32::from(c));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// The characters that reorder how a line is displayed (U+202A–U+202E, U+2066–U+2069).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::shown_text;

    #[test]
    fn controls_and_bidi_overrides_are_written_out() {
        assert_eq!(shown_text("plain:1"), "plain:1");
        assert_eq!(
            shown_text("\u{1b}]0;pwned\u{7}a\nb\u{9b}c\u{202e}d"),
            "\\u{1b}]0;pwned\\u{7}a\\u{a}b\\u{9b}c\\u{202e}d"
        );
        assert_eq!(shown_text("ключ é"), "ключ é");
    }
}
