//! Passwords out of addresses, for error messages, logs and `Debug` output.
//!
//! An address is shown so that an operator can tell which server is meant; the password
//! in it must never be shown with it. The redis crate (1.x) parses a URL with the `url`
//! crate and reads a password from two places:
//!
//! - the userinfo, `redis://user:password@host` (also `rediss`, `valkey`, `valkeys`),
//!   percent-decoded;
//! - the query parameter `pass` of a Unix socket URL, `redis+unix:///path?user=u&pass=p`
//!   (also `unix`, `valkey+unix`), whose name and value are percent-decoded first, so
//!   `pa%73s=p` is the same parameter.
//!
//! [`redact`] parses the same way, so it finds the password wherever the redis crate would
//! look for it. Beyond that it is deliberately conservative: a mistyped URL (a password
//! with an unencoded `/`, `?` or `#`) is exactly the one that ends up in an error message,
//! and there the password is wherever the user meant it to be, not where a parser puts it.

use std::ops::Range;

use url::{Position, Url};

/// What replaces a hidden part.
const MASK: &str = "***";

/// Query parameters whose value is hidden: a name that contains one of these (ignoring
/// case, after percent-decoding). The redis crate reads only `pass`; the others (e.g.
/// `password`, `auth_token`) are hidden too because a reader of the message cannot tell
/// which parameters the redis crate ignores, and a later version may read them.
const SECRET_WORDS: [&str; 5] = ["pass", "pwd", "secret", "token", "auth"];

pub(crate) fn list(urls: &[String]) -> String {
    let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
    shown.join(", ")
}

/// `address` with anything that may be a password replaced by `***`, for error messages,
/// logs and `Debug` output. Never panics; one URL parse and a few string scans.
///
/// For a URL the `url` crate parses (as the redis crate does), hidden are:
///
/// - the userinfo password: `redis://app:***@host` (the user name stays);
/// - the value of every query parameter whose decoded name contains `pass`, `pwd`,
///   `secret`, `token` or `auth`: `?user=app&pass=***&db=2` (other parameters stay);
/// - the fragment, unless it is `insecure` (the only one the redis crate accepts):
///   `#***`.
///
/// An address with none of these is returned exactly as written (not in the `url` crate's
/// normalized spelling, which would add a `/` to `http://host`).
///
/// A string that does not parse as a URL gets the conservative reading: the scheme stays,
/// everything before the last `@` is hidden but a plain user name followed by `:`
/// (`redis://app:***@host`), and so are every query value (`?db=***`, also of a query
/// that starts before that `@`) and the fragment.
///
/// An `@` after the host (in the path, query or fragment) means the userinfo may have
/// ended early, at an unencoded `/`, `?` or `#` in the password: `redis://app:pa/ss@host`
/// parses as host `app`, path `/ss@host`. Such a URL is read both ways and whatever either
/// reading hides is hidden (`redis://app:***@host`); this can hide the host or socket path
/// too, e.g. of `unix:///run/redis.sock?pass=p@ss`: write `@` in a password as `%40`.
pub(crate) fn redact(address: &str) -> String {
    let url = match Url::parse(address) {
        Ok(url) if !url.cannot_be_a_base() => url,
        // `redis:app:pw@host` parses as a path only: nothing in it is structured.
        _ => return masked(address, conservative(address)),
    };
    let serialized = url.as_str();
    let mut hidden = secrets(&url);
    let after_userinfo = serialized.get(offset(&url, Position::BeforeHost)..);
    if after_userinfo.is_none_or(|rest| rest.contains('@')) {
        hidden.extend(conservative(serialized));
    }
    if hidden.is_empty() {
        address.to_owned()
    } else {
        masked(serialized, hidden)
    }
}

/// The byte offset of `position` in `url`'s serialization. Only for positions whose
/// computation asserts nothing: the `url` crate's `BeforePassword` and `AfterPassword`
/// have debug assertions that fail for a user name without a password.
fn offset(url: &Url, position: Position) -> usize {
    url[..position].len()
}

/// Where the redis crate would read a password in `url`'s serialization, and the
/// fragment.
fn secrets(url: &Url) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    if url.password().is_some() {
        // Between the `:` after the user name and the `@` before the host.
        let start = offset(url, Position::AfterUsername) + 1;
        let end = offset(url, Position::BeforeHost).saturating_sub(1);
        hidden.push(start..end.max(start));
    }
    if let Some(query) = url.query() {
        let start = offset(url, Position::AfterPath) + 1;
        values(query, start, is_secret_name, false, &mut hidden);
    }
    if let Some(fragment) = url.fragment()
        && fragment != "insecure"
    {
        let start = offset(url, Position::AfterQuery) + 1;
        hidden.push(start..url.as_str().len());
    }
    hidden
}

/// Pushes to `hidden` the values in `query` (which starts at byte `start`) of the
/// parameters `secret` picks by their name as written, and with `bare` every parameter
/// without a `=` (it may be the tail of a value cut at an unencoded `&`).
fn values(
    query: &str,
    start: usize,
    secret: impl Fn(&str) -> bool,
    bare: bool,
    hidden: &mut Vec<Range<usize>>,
) {
    let mut at = start;
    for pair in query.split('&') {
        match pair.find('=') {
            Some(eq) if secret(&pair[..eq]) => hidden.push(at + eq + 1..at + pair.len()),
            None if bare && !pair.is_empty() => hidden.push(at..at + pair.len()),
            _ => {}
        }
        at += pair.len() + 1;
    }
}

/// Whether the query parameter written `raw` (still percent-encoded, as in the URL) names
/// a secret. Decoded the way `url::Url::query_pairs` decodes it for the redis crate:
/// `%XX` escapes and `+` for a space.
fn is_secret_name(raw: &str) -> bool {
    let Some((name, _)) = url::form_urlencoded::parse(raw.as_bytes()).next() else {
        return false;
    };
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// What may be a password in `text`, trusting no structure beyond `scheme://`, `@`, `?`,
/// `&`, `=` and `#`: for strings the `url` crate rejects (the redis crate rejects them
/// too, so an error message is all that shows them) and for URLs whose userinfo may have
/// ended early.
fn conservative(text: &str) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    let start = match text.find("://") {
        Some(end) if is_scheme(&text[..end]) => end + "://".len(),
        _ => 0,
    };
    // The last `@`: a password may contain unencoded `@`s, a host never does.
    let location = match text[start..].rfind('@') {
        Some(at) => {
            let userinfo = &text[start..start + at];
            let shown = match userinfo.split_once(':') {
                Some((user, _)) if is_plain_user(user) => user.len() + 1,
                _ => 0,
            };
            hidden.push(start + shown..start + at);
            // A `?` before that `@` may start a query with the `@` in a value
            // (`x?pass=@b`): its values are hidden too, up to the fragment.
            if let Some(question) = userinfo.find('?') {
                let from = start + question + 1;
                let query = text[from..].split('#').next().unwrap_or_default();
                values(query, from, |_| true, false, &mut hidden);
            }
            start + at + 1
        }
        None => start,
    };
    let rest = &text[location..];
    let (rest, fragment) = match rest.find('#') {
        Some(hash) => (&rest[..hash], Some(location + hash + 1)),
        None => (rest, None),
    };
    if let Some(question) = rest.find('?') {
        let query = &rest[question + 1..];
        values(query, location + question + 1, |_| true, true, &mut hidden);
    }
    if let Some(fragment) = fragment {
        hidden.push(fragment..text.len());
    }
    hidden
}

/// `text` with each run of `hidden` bytes (ranges that overlap or touch make one run,
/// an empty range is a run too) replaced by `***`.
fn masked(text: &str, mut hidden: Vec<Range<usize>>) -> String {
    hidden.sort_by_key(|range| range.start);
    let mut shown = String::with_capacity(text.len() + MASK.len() * hidden.len());
    let mut copied = 0;
    let mut runs = hidden.into_iter().peekable();
    while let Some(mut run) = runs.next() {
        while let Some(next) = runs.next_if(|next| next.start <= run.end) {
            run.end = run.end.max(next.end);
        }
        let start = run.start.max(copied);
        // The ranges start and end at ASCII delimiters; should one not, hide the text
        // rather than panic.
        shown.push_str(text.get(copied..start).unwrap_or(MASK));
        shown.push_str(MASK);
        copied = run.end.max(start);
    }
    shown.push_str(text.get(copied..).unwrap_or(MASK));
    shown
}

/// A URL scheme as RFC 3986 spells it: a letter, then letters, digits, `+`, `-` or `.`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Whether `user`, the text before the first `:` of what looks like userinfo, reads as a
/// user name rather than a piece of a path or query that an `@` in a value made look like
/// userinfo.
fn is_plain_user(user: &str) -> bool {
    !user
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/?#@&=".contains(c))
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::redact;

    #[track_caller]
    fn shows(address: &str, expected: &str) {
        assert_eq!(redact(address), expected, "redact({address:?})");
    }

    #[test]
    fn addresses_without_secrets_are_kept_as_written() {
        shows("redis://127.0.0.1:6379", "redis://127.0.0.1:6379");
        shows(
            "redis://app@127.0.0.1:6379/2",
            "redis://app@127.0.0.1:6379/2",
        );
        shows(
            "redis://127.0.0.1:6379/0?protocol=3",
            "redis://127.0.0.1:6379/0?protocol=3",
        );
        shows(
            "unix:///run/redis.sock?user=app&db=1",
            "unix:///run/redis.sock?user=app&db=1",
        );
        shows(
            "rediss://127.0.0.1:6380/#insecure",
            "rediss://127.0.0.1:6380/#insecure",
        );
        // Not normalized to the `url` crate's `http://127.0.0.1:7002/`.
        shows("http://127.0.0.1:7002", "http://127.0.0.1:7002");
        shows("127.0.0.1:6379", "127.0.0.1:6379");
        shows("not a url", "not a url");
        shows("", "");
    }

    #[test]
    fn userinfo_passwords_are_hidden_in_every_scheme() {
        shows(
            "redis://app:s3cr@t@127.0.0.1:6379/0",
            "redis://app:***@127.0.0.1:6379/0",
        );
        shows("rediss://:pw@127.0.0.1", "rediss://:***@127.0.0.1");
        shows(
            "valkey://app:s3cret@10.0.0.1:6379/1",
            "valkey://app:***@10.0.0.1:6379/1",
        );
        shows(
            "valkeys://app:s3cret@cache.internal:6380/#insecure",
            "valkeys://app:***@cache.internal:6380/#insecure",
        );
        shows(
            "garbage://app:s3cret@host?db=1",
            "garbage://app:***@host?db=1",
        );
    }

    #[test]
    fn percent_encoded_userinfo_passwords_are_hidden() {
        shows(
            "redis://app:p%40ss@127.0.0.1:6379",
            "redis://app:***@127.0.0.1:6379",
        );
        shows(
            "redis://app:%73%33%63%72%65%74@127.0.0.1",
            "redis://app:***@127.0.0.1",
        );
        shows(
            "redis://ap%70:s3cret@127.0.0.1",
            "redis://ap%70:***@127.0.0.1",
        );
    }

    #[test]
    fn unix_socket_pass_parameters_are_hidden() {
        shows(
            "redis+unix:///run/redis.sock?user=app&pass=s3cret",
            "redis+unix:///run/redis.sock?user=app&pass=***",
        );
        shows(
            "unix:///run/redis.sock?pass=s3cret&db=2",
            "unix:///run/redis.sock?pass=***&db=2",
        );
        shows(
            "valkey+unix:///run/valkey.sock?db=3&pass=s3cret",
            "valkey+unix:///run/valkey.sock?db=3&pass=***",
        );
        // The value percent-encoded, and a repeated parameter (the redis crate takes the
        // last one).
        shows(
            "unix:///run/redis.sock?pass=%26%3F%3D&pass=s3cret",
            "unix:///run/redis.sock?pass=***&pass=***",
        );
        // An unencoded `&` ends the value, for the redis crate as here: `cd` is the name
        // of another parameter (docs/SECURITY.md says to write `%26`).
        shows(
            "unix:///run/redis.sock?pass=ab&cd",
            "unix:///run/redis.sock?pass=***&cd",
        );
        // An empty value is hidden as well: the message does not say what it was.
        shows(
            "unix:///run/redis.sock?pass=",
            "unix:///run/redis.sock?pass=***",
        );
    }

    #[test]
    fn percent_encoded_parameter_names_are_hidden() {
        // `query_pairs()` decodes the name, so the redis crate reads these as `pass`.
        shows(
            "redis+unix:///run/redis.sock?pa%73s=s3cret&db=1",
            "redis+unix:///run/redis.sock?pa%73s=***&db=1",
        );
        shows(
            "unix:///run/redis.sock?%70%61%73%73=s3cret",
            "unix:///run/redis.sock?%70%61%73%73=***",
        );
    }

    #[test]
    fn parameters_that_look_like_passwords_are_hidden_too() {
        shows(
            "unix:///run/redis.sock?password=s3cret",
            "unix:///run/redis.sock?password=***",
        );
        shows(
            "redis://127.0.0.1:6379/0?PASS=s3cret&protocol=3",
            "redis://127.0.0.1:6379/0?PASS=***&protocol=3",
        );
        shows(
            "redis://127.0.0.1/?auth_token=s3cret&x=1",
            "redis://127.0.0.1/?auth_token=***&x=1",
        );
        // `+` decodes to a space: not `pass`, but still a name with `pass` in it.
        shows("unix:///s?pa+ss=s3cret", "unix:///s?pa+ss=s3cret");
        shows("unix:///s?my+pass=s3cret", "unix:///s?my+pass=***");
    }

    #[test]
    fn other_fragments_are_hidden() {
        shows("redis://127.0.0.1/#s3cret", "redis://127.0.0.1/#***");
        shows(
            "unix:///run/redis.sock?pass=s3#cret",
            "unix:///run/redis.sock?pass=***#***",
        );
    }

    #[test]
    fn a_password_that_ends_the_userinfo_early_is_hidden() {
        // Parses as host `app`, port 12, path `/cret@127.0.0.1`.
        shows("redis://app:12/cret@127.0.0.1", "redis://app:***@127.0.0.1");
        // Parses as host `app`, port 12, query `cr@t@host`.
        shows(
            "redis://app:12?cr@t@host:6379/0",
            "redis://app:***@host:6379/0",
        );
        // Host `app`, no port, query `=a0/0a`, fragment `@127.0.0.1`: a reading that
        // hides the fragment only would show the password.
        shows("redis://app:?=a0/0a#@127.0.0.1", "redis://***");
        // An `@` in a value is read both ways too, and what either hides is hidden.
        shows(
            "unix:///run/redis.sock?pass=s3@cret&db=1",
            "unix://***&db=***",
        );
    }

    #[test]
    fn strings_that_do_not_parse_hide_all_that_may_be_secret() {
        // Invalid port.
        shows(
            "redis://app:hunter2@127.0.0.1:notaport",
            "redis://app:***@127.0.0.1:notaport",
        );
        // An unencoded `/` or `?` in the password: the port becomes `se`.
        shows(
            "redis://app:se/cr?et@host:6379/0",
            "redis://app:***@host:6379/0",
        );
        // The example of docs/SECURITY.md.
        shows(
            "redis://app:pa/ss@host:6379/0?db=1",
            "redis://app:***@host:6379/0?db=***",
        );
        // No `:` in the userinfo: all of it may be a password.
        shows("redis://s3cret@h^st", "redis://***@h^st");
        // An `@` in a value: not a user name, and not a host after it.
        shows("redis://h^st/?pass=s3@cret", "redis://***");
        shows(
            "redis://h^st:6379/0?db=1&pass=s3cret&bare#frag",
            "redis://h^st:6379/0?db=***&pass=***&***#***",
        );
        // No `//`: a path-only URL to the `url` crate.
        shows("redis:app:s3cret@host", "redis:***@host");
        // The `@` may be in a query value: then so is what follows it.
        shows("redis:127.0.0.1?pass=@s3cret", "redis:***");
        shows("redis://h^st?db=1&pass=s3@cret&x=1", "redis://***&x=***");
        shows("app:s3cret@host:6379", "app:***@host:6379");
        shows("@", "***@");
        shows("://:@?&=#", ":***@?&=***#***");
    }

    #[test]
    fn any_text_is_redacted_without_panicking() {
        for text in [
            "redis://ü:pä@höst",
            "redis://[::1",
            "redis://[::1]:6379?pass=ä",
            "\u{0}redis://a:b@c",
            "redis://a:b@c\u{7f}?",
            "%",
            "?",
            "#",
            "redis://a:b@@@",
        ] {
            let _ = redact(text);
        }
    }
}
