//! `${VAR}` and `${VAR:-default}` in the string values of a configuration, filled in from
//! the environment before the TOML is parsed, so that one file serves every environment
//! (as Redisson's YAML does): `address = "redis://${REDIS_HOST:-127.0.0.1}:6379"`.
//!
//! Only string literals are touched (comments, keys and numbers are not), and a value is
//! written in the form its literal needs (escaped in a `"..."` string; refused in a
//! `'...'` string it cannot be written in), so a value can never change the file's
//! structure. `$${` stands for a literal `${`.
//!
//! Errors point into the file as written: [`Interpolated::original_offset`] maps an
//! offset in the filled-in text back.

/// The text with every reference filled in, and where each substitution happened.
pub(crate) struct Interpolated {
    pub(crate) text: String,
    /// Per substitution: (start in the new text, end in the new text, start in the
    /// original, end in the original).
    spans: Vec<(usize, usize, usize, usize)>,
}

impl Interpolated {
    /// The offset in the original text that `offset` (in the filled-in text) comes from:
    /// inside a substituted value, the start of its `${`.
    pub(crate) fn original_offset(&self, offset: usize) -> usize {
        let mut shift: isize = 0;
        for &(new_start, new_end, old_start, old_end) in &self.spans {
            if offset < new_start {
                break;
            }
            if offset < new_end {
                return old_start;
            }
            shift = old_end as isize - new_end as isize;
        }
        offset.saturating_add_signed(shift)
    }
}

/// A reference that cannot be filled in: what is wrong, and where (an offset into the
/// original text).
#[derive(Debug)]
pub(crate) struct InterpolationError {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

/// Which kind of TOML string a reference stands in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Literal {
    Basic,
    MultilineBasic,
    Raw,
    MultilineRaw,
}

/// Looks a variable up: its value, `None` when unset, or why it cannot be used.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>, String>;

/// Fills in every `${NAME}` / `${NAME:-default}` inside the string literals of `text`,
/// looking `NAME` up with `lookup`.
pub(crate) fn interpolate(
    text: &str,
    lookup: Lookup<'_>,
) -> Result<Interpolated, InterpolationError> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut copied = 0; // text[..copied] is already in `out`
    let mut at = 0;
    while at < bytes.len() {
        let (literal, open) = match bytes[at] {
            b'#' => {
                at = text[at..].find('\n').map_or(bytes.len(), |n| at + n);
                continue;
            }
            b'"' if text[at..].starts_with("\"\"\"") => (Literal::MultilineBasic, 3),
            b'"' => (Literal::Basic, 1),
            b'\'' if text[at..].starts_with("'''") => (Literal::MultilineRaw, 3),
            b'\'' => (Literal::Raw, 1),
            _ => {
                at += 1;
                continue;
            }
        };
        at += open;
        // Inside the literal until its closing delimiter.
        while at < bytes.len() {
            match (literal, bytes[at]) {
                (Literal::Basic | Literal::MultilineBasic, b'\\') => at += 2,
                (Literal::Basic, b'"') | (Literal::Raw, b'\'') => {
                    at += 1;
                    break;
                }
                (Literal::Basic | Literal::Raw, b'\n') => break, // malformed: TOML says so
                (Literal::MultilineBasic, b'"') if text[at..].starts_with("\"\"\"") => {
                    at += 3;
                    break;
                }
                (Literal::MultilineRaw, b'\'') if text[at..].starts_with("'''") => {
                    at += 3;
                    break;
                }
                (_, b'$') if text[at..].starts_with("$${") => {
                    out.push_str(&text[copied..at]);
                    out.push_str("${");
                    spans.push((out.len() - 2, out.len(), at, at + 3));
                    at += 3;
                    copied = at;
                }
                (_, b'$') if text[at..].starts_with("${") => {
                    let (value, end) = reference(text, at, lookup)?;
                    let written = write(&value, literal).map_err(|why| InterpolationError {
                        offset: at,
                        message: format!("{} {why}", &text[at..end]),
                    })?;
                    out.push_str(&text[copied..at]);
                    let new_start = out.len();
                    out.push_str(&written);
                    spans.push((new_start, out.len(), at, end));
                    at = end;
                    copied = at;
                }
                _ => at += 1,
            }
        }
    }
    out.push_str(&text[copied.min(text.len())..]);
    Ok(Interpolated { text: out, spans })
}

/// The value of the reference starting at `at` (`${`) and the offset just past its `}`.
fn reference(
    text: &str,
    at: usize,
    lookup: Lookup<'_>,
) -> Result<(String, usize), InterpolationError> {
    let fail = |message: String| InterpolationError {
        offset: at,
        message,
    };
    let body_start = at + 2;
    let Some(close) = text[body_start..].find(['}', '\n']) else {
        return Err(fail(
            "`${` is not closed: write ${NAME} or ${NAME:-default} (or $${ for a literal ${)"
                .to_owned(),
        ));
    };
    let end = body_start + close;
    if text.as_bytes()[end] != b'}' {
        return Err(fail(
            "`${` is not closed on its line: write ${NAME} or ${NAME:-default} (or $${ for a literal ${)"
                .to_owned(),
        ));
    }
    let body = &text[body_start..end];
    let (name, default) = match body.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (body, None),
    };
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(fail(format!(
            "`${{{body}}}` is not a variable reference: a name is letters, digits and _ (not starting with a digit), as in ${{NAME}} or ${{NAME:-default}}"
        )));
    }
    let found = lookup(name).map_err(|why| {
        fail(format!(
            "environment variable {name} (used as ${{{name}}}) {why}"
        ))
    })?;
    let value = match (found, default) {
        (Some(value), _) => value,
        (None, Some(default)) => default.to_owned(),
        (None, None) => {
            return Err(fail(format!(
                "environment variable {name} is not set (used as ${{{name}}}); set it, or give a default: ${{{name}:-...}}"
            )))
        }
    };
    Ok((value, end + 1))
}

/// `value` as the content of a `literal`: escaped in basic strings; in raw strings, refused
/// when it holds what they cannot (the value is not quoted: it may be a password).
fn write(value: &str, literal: Literal) -> Result<String, &'static str> {
    match literal {
        Literal::Basic | Literal::MultilineBasic => {
            let mut written = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '"' => written.push_str("\\\""),
                    '\\' => written.push_str("\\\\"),
                    '\n' => written.push_str("\\n"),
                    '\t' => written.push_str("\\t"),
                    '\r' => written.push_str("\\r"),
                    c if c.is_control() => written.push_str(&format!("\\u{:04X}", u32::from(c))),
                    c => written.push(c),
                }
            }
            Ok(written)
        }
        Literal::Raw | Literal::MultilineRaw => {
            if value.contains('\'') || value.chars().any(char::is_control) {
                Err("has a value with a quote or a control character, which a '...' string cannot hold; use a \"...\" string")
            } else {
                Ok(value.to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<Option<String>, String> {
        Ok(match name {
            "HOST" => Some("10.1.2.3".to_owned()),
            "PW" => Some("p\"a\\ss'w".to_owned()),
            "EMPTY" => Some(String::new()),
            "RAW" => return Err("is not UTF-8 text".to_owned()),
            _ => None,
        })
    }

    fn fill(text: &str) -> Result<String, String> {
        interpolate(text, &env)
            .map(|done| done.text)
            .map_err(|e| format!("{}: {}", e.offset, e.message))
    }

    #[test]
    fn fills_in_strings_only() {
        assert_eq!(
            fill("a = \"redis://${HOST}:6379\" # ${NOPE}\nb = '${HOST:-x}'\n").unwrap(),
            "a = \"redis://10.1.2.3:6379\" # ${NOPE}\nb = '10.1.2.3'\n"
        );
        assert_eq!(
            fill("a = \"${UNSET:-127.0.0.1}\"").unwrap(),
            "a = \"127.0.0.1\""
        );
        assert_eq!(fill("a = \"${EMPTY:-x}\"").unwrap(), "a = \"\"");
        assert_eq!(
            fill("a = \"$${HOST} $$ $x\"").unwrap(),
            "a = \"${HOST} $$ $x\""
        );
        assert_eq!(
            fill("a = \"\"\"\n${HOST}\n\"\"\"").unwrap(),
            "a = \"\"\"\n10.1.2.3\n\"\"\""
        );
        // An escaped quote does not end the string.
        assert_eq!(fill("a = \"\\\"${HOST}\"").unwrap(), "a = \"\\\"10.1.2.3\"");
    }

    #[test]
    fn values_are_written_as_their_literal_needs() {
        assert_eq!(
            fill("password = \"${PW}\"").unwrap(),
            "password = \"p\\\"a\\\\ss'w\""
        );
        let refused = fill("password = '${PW}'").unwrap_err();
        assert!(refused.contains("cannot hold"), "{refused}");
        assert!(
            !refused.contains("p\"a"),
            "the value is not shown: {refused}"
        );
    }

    #[test]
    fn mistakes_are_errors_at_the_reference() {
        assert_eq!(
            fill("a = 1\nb = \"x${NOPE}\"").unwrap_err(),
            "12: environment variable NOPE is not set (used as ${NOPE}); set it, or give a default: ${NOPE:-...}"
        );
        assert!(fill("a = \"${HOST\"").unwrap_err().contains("not closed"));
        assert!(fill("a = \"${1X}\"")
            .unwrap_err()
            .contains("not a variable reference"));
        assert!(fill("a = \"${}\"")
            .unwrap_err()
            .contains("not a variable reference"));
    }

    #[test]
    fn offsets_map_back_to_the_file_as_written() {
        let text = "a = \"${HOST}\"\nb = \"${UNSET:-x}\"\nc = 1";
        let done = interpolate(text, &env).unwrap();
        // After both substitutions, `c` is where it was in the file.
        let c_new = done.text.find("c = 1").unwrap();
        assert_eq!(done.original_offset(c_new), text.find("c = 1").unwrap());
        // Inside a value: the `${` of its reference.
        let in_value = done.text.find("1.2").unwrap();
        assert_eq!(
            done.original_offset(in_value),
            text.find("${HOST}").unwrap()
        );
        assert_eq!(done.original_offset(0), 0);
    }
}
