//! The attribute's options, parsed with the span of every value kept for error messages.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Expr, Ident, LitStr, Path, Token};

const OPTIONS: &str =
    "`key`, `keys`, `kind`, `permits`, `lease`, `wait`, `on_busy`, `min_hold`, `client`, `on_fail`, `on_lost`, `crate`";

/// `#[distributed_lock(key = "...", kind = "...", lease = "...", wait = "...", on_busy = "...", min_hold = "...", client = expr, on_fail = path, crate = path)]`,
/// with `keys = ["...", ...]` in place of `key` for a multi-lock, or `permits = n` beside
/// `key` for a semaphore.
///
/// Options with a mistake are left `None` and the mistake recorded, so that one compile
/// reports every problem of the attribute and of the function it is on.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    /// `keys = [...]`: every lock of a multi-lock, taken all or none.
    pub(crate) keys: Option<Vec<LitStr>>,
    pub(crate) kind: Kind,
    /// Where `kind` was written, when it was.
    kind_span: Option<Span>,
    /// `permits = n`: the capacity of the semaphore `key` names; the body holds one permit.
    pub(crate) permits: Option<u32>,
    /// Where `permits` was written, when it was.
    permits_span: Option<Span>,
    pub(crate) lease: Option<Lease>,
    /// `min_hold = "..."`: the lock stays taken at least this long after acquisition.
    pub(crate) min_hold: Option<Lease>,
    pub(crate) wait: Option<Duration>,
    /// Where `wait` was written, when it was.
    wait_span: Option<Span>,
    /// `on_busy = "..."`: what a call does when the lock is busy.
    pub(crate) on_busy: OnBusy,
    /// Where the `on_busy` value was written, when it was.
    pub(crate) on_busy_span: Option<Span>,
    pub(crate) client: Option<Expr>,
    pub(crate) on_fail: Option<Path>,
    /// `on_lost = "..."`: what a lock lost while the body runs does to the call.
    pub(crate) on_lost: OnLost,
    /// `crate = path`: where the `dlock` crate is, for a dependency renamed in Cargo.toml.
    pub(crate) krate: Option<Path>,
}

/// What a call does when another owner holds the lock: `on_busy = "..."`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// `"wait"`, the default: wait as `wait` (or the client's `default_wait`) says.
    #[default]
    Wait,
    /// `"skip"`: try once; when busy run nothing and return `None` / `Ok(None)` / `()`.
    Skip,
    /// `"fail"`: try once; when busy fail with the busy error (`LockError::Timeout`).
    Fail,
}

impl OnBusy {
    const NAMES: [(&'static str, OnBusy); 3] = [
        ("wait", OnBusy::Wait),
        ("skip", OnBusy::Skip),
        ("fail", OnBusy::Fail),
    ];

    fn parse(literal: &LitStr) -> syn::Result<OnBusy> {
        named_value(
            literal,
            &OnBusy::NAMES,
            "on_busy",
            "\"wait\" (the default: wait for the lock), \"skip\" (run nothing and return `None` / `()` when busy) or \"fail\" (try once, fail when busy)",
        )
    }
}

/// What the attribute does when the lock is lost while the body runs: `on_lost = "..."`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// `"cancel"`, the default: the body's future is dropped at the loss and the call
    /// fails with the loss.
    #[default]
    Cancel,
    /// `"error"`: the body runs to its end, then the call fails with the loss.
    Error,
    /// `"ignore"`: the body's result is returned; the loss is logged.
    Ignore,
}

impl OnLost {
    const NAMES: [(&'static str, OnLost); 3] = [
        ("cancel", OnLost::Cancel),
        ("error", OnLost::Error),
        ("ignore", OnLost::Ignore),
    ];

    fn parse(literal: &LitStr) -> syn::Result<OnLost> {
        named_value(
            literal,
            &OnLost::NAMES,
            "on_lost",
            "\"cancel\" (the default: stop the body at the loss), \"error\" (finish the body, then fail) or \"ignore\" (return the body's result, log the loss)",
        )
    }
}

/// The value of an option written as one of a few names (`on_busy = "skip"`); an unknown
/// name is an error on the literal that lists the `expected` ones.
fn named_value<T: Copy>(
    literal: &LitStr,
    names: &[(&str, T)],
    option: &str,
    expected: &str,
) -> syn::Result<T> {
    let text = literal.value();
    names
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            syn::Error::new_spanned(
                literal,
                format!("unknown `{option}` value {text:?}; expected {expected}"),
            )
        })
}

/// Which lock the attribute takes: `kind = "..."`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `"reentrant"`, the default: `LockClient::lock`.
    #[default]
    Reentrant,
    /// `"fair"`: `LockClient::fair_lock`, granted in arrival order across processes.
    Fair,
    /// `"read"`: the read side of `LockClient::rw_lock`, shared with other readers.
    Read,
    /// `"write"`: the write side of `LockClient::rw_lock`, exclusive.
    Write,
}

impl Kind {
    const NAMES: [(&'static str, Kind); 4] = [
        ("reentrant", Kind::Reentrant),
        ("fair", Kind::Fair),
        ("read", Kind::Read),
        ("write", Kind::Write),
    ];

    fn parse(literal: &LitStr) -> syn::Result<Kind> {
        let text = literal.value();
        Kind::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                syn::Error::new_spanned(
                    literal,
                    format!(
                        "unknown lock kind {text:?}; expected \"reentrant\" (the default), \"fair\", \"read\" or \"write\""
                    ),
                )
            })
    }

    /// The variant of `dlock::__private::Kind` it expands to.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Kind::Reentrant => "Reentrant",
            Kind::Fair => "Fair",
            Kind::Read => "Read",
            Kind::Write => "Write",
        }
    }
}

/// A `lease` and where it was written. Its upper bound is `dlock::limits::MAX_LEASE`, which
/// this crate cannot name at expansion time: the expansion checks it at compile time.
pub(crate) struct Lease {
    pub(crate) duration: Duration,
    pub(crate) span: Span,
}

impl Args {
    /// Parses the attribute arguments. Returns `Err` only for syntax that cannot be read
    /// past; other mistakes go to `errors`.
    pub(crate) fn parse(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<Args> {
        let mut args = Args::default();
        let mut seen: Vec<String> = Vec::new();

        while !input.is_empty() {
            // `Ident::parse_any` also reads the keyword `crate`.
            let name: Ident = input.call(Ident::parse_any)?;
            input.parse::<Token![=]>()?;
            let option = name.to_string();
            if seen.contains(&option) {
                errors.push(syn::Error::new_spanned(
                    &name,
                    format!("duplicate option `{option}`; give each option once"),
                ));
            }
            seen.push(option.clone());
            match option.as_str() {
                "key" => args.key = Some(input.parse::<LitStr>()?),
                "kind" if !input.peek(LitStr) => {
                    let value: Expr = input.parse()?;
                    errors.push(syn::Error::new_spanned(
                        &value,
                        "`kind` is a string: write e.g. kind = \"fair\" (\"reentrant\", \"fair\", \"read\" or \"write\")",
                    ));
                }
                "kind" => {
                    let literal: LitStr = input.parse()?;
                    args.kind_span = Some(literal.span());
                    args.kind = errors.keep(Kind::parse(&literal)).unwrap_or_default();
                }
                "keys" => {
                    let value: Expr = input.parse()?;
                    args.keys = errors.keep(parse_keys(&value));
                }
                "permits" => {
                    args.permits_span = Some(name.span());
                    let value: Expr = input.parse()?;
                    args.permits = errors.keep(parse_permits(&value));
                }
                "lease" => {
                    let literal: LitStr = input.parse()?;
                    args.lease =
                        errors
                            .keep(parse_duration(&literal, "lease", true))
                            .map(|duration| Lease {
                                duration,
                                span: literal.span(),
                            });
                }
                "min_hold" => {
                    let literal: LitStr = input.parse()?;
                    args.min_hold =
                        errors
                            .keep(parse_duration(&literal, "min_hold", true))
                            .map(|duration| Lease {
                                duration,
                                span: literal.span(),
                            });
                }
                "wait" => {
                    let literal: LitStr = input.parse()?;
                    args.wait_span = Some(literal.span());
                    args.wait = errors.keep(parse_duration(&literal, "wait", false));
                }
                "on_busy" if !input.peek(LitStr) => {
                    let value: Expr = input.parse()?;
                    errors.push(syn::Error::new_spanned(
                        &value,
                        "`on_busy` is a string: write e.g. on_busy = \"skip\" (\"wait\", \"skip\" or \"fail\")",
                    ));
                }
                "on_busy" => {
                    let literal: LitStr = input.parse()?;
                    args.on_busy_span = Some(literal.span());
                    args.on_busy = errors.keep(OnBusy::parse(&literal)).unwrap_or_default();
                }
                "crate" if input.peek(LitStr) => {
                    // `crate = "path"`, the spelling of serde and tokio.
                    let literal: LitStr = input.parse()?;
                    args.krate = errors.keep(literal.parse::<Path>().map_err(|_| {
                        syn::Error::new_spanned(
                            &literal,
                            "`crate` is the path of the dlock crate as this crate names it: write e.g. crate = dlock",
                        )
                    }));
                }
                "crate" => args.krate = Some(input.call(Path::parse_mod_style)?),
                "on_lost" if !input.peek(LitStr) => {
                    let value: Expr = input.parse()?;
                    errors.push(syn::Error::new_spanned(
                        &value,
                        "`on_lost` is a string: write e.g. on_lost = \"error\" (\"cancel\", \"error\" or \"ignore\")",
                    ));
                }
                "on_lost" => {
                    let literal: LitStr = input.parse()?;
                    args.on_lost = errors.keep(OnLost::parse(&literal)).unwrap_or_default();
                }
                "client" => args.client = Some(input.parse::<Expr>()?),
                "on_fail" => args.on_fail = Some(input.parse::<Path>()?),
                _ => {
                    errors.push(syn::Error::new_spanned(
                        &name,
                        format!("unknown option `{option}`; expected one of {OPTIONS}"),
                    ));
                    // Skip the value so the remaining options are still checked.
                    input.parse::<Expr>()?;
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }

        args.check_combination(seen.contains(&"keys".to_owned()), errors);
        Ok(args)
    }

    /// The options that exclude each other: one of `key` and `keys`; `permits` names a
    /// semaphore, so it takes one `key` and no `kind`; a multi-lock is made of reentrant
    /// locks.
    fn check_combination(&self, keys_given: bool, errors: &mut Errors) {
        if let Some(min_hold) = &self.min_hold {
            self.check_min_hold(min_hold, keys_given, errors);
        }
        if let (Some(span), Some(_)) = (self.on_busy_span, self.wait_span)
            && self.on_busy != OnBusy::Wait
        {
            let busy = if self.on_busy == OnBusy::Skip {
                "skip"
            } else {
                "fail"
            };
            errors.push(syn::Error::new(
                    span,
                    format!("`on_busy = \"{busy}\"` tries the lock once, so it takes no `wait`; remove `wait`, or use on_busy = \"wait\""),
                ));
        }
        match (&self.key, keys_given) {
            (None, false) => errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. #[distributed_lock(key = \"goods:<id>\")] (or `keys = [...]` for several locks)",
            )),
            (Some(key), true) => errors.push(syn::Error::new_spanned(
                key,
                "give either `key` (one lock) or `keys` (several locks, taken all or none), not both",
            )),
            _ => {}
        }
        if let (Some(span), true) = (self.kind_span, keys_given)
            && self.kind != Kind::Reentrant
        {
            errors.push(syn::Error::new(
                span,
                "`keys` takes reentrant locks; `kind` cannot be used with `keys`",
            ));
        }
        if let Some(permits) = self.permits_span {
            if keys_given {
                errors.push(syn::Error::new(
                    permits,
                    "`permits` names a semaphore under one `key`; it cannot be used with `keys`",
                ));
            }
            if let Some(span) = self.kind_span {
                errors.push(syn::Error::new(
                    span,
                    "`permits` takes a semaphore, which has no `kind`; remove `kind`",
                ));
            }
        }
    }

    /// `min_hold` keeps the reentrant lock of one `key` taken past the body, for at most
    /// as long as the lock lives: with an explicit `lease`, `min_hold <= lease`.
    fn check_min_hold(&self, min_hold: &Lease, keys_given: bool, errors: &mut Errors) {
        let other = if keys_given {
            Some("`keys`")
        } else if self.permits.is_some() || self.permits_span.is_some() {
            Some("`permits`")
        } else if self.kind != Kind::Reentrant {
            Some("this `kind`")
        } else {
            None
        };
        if let Some(other) = other {
            errors.push(syn::Error::new(
                min_hold.span,
                format!("`min_hold` keeps one reentrant lock taken after the body; it cannot be used with {other}"),
            ));
        }
        if let Some(lease) = &self.lease
            && min_hold.duration > lease.duration
        {
            errors.push(syn::Error::new(
                    min_hold.span,
                    format!(
                        "`min_hold` ({}) is longer than `lease` ({}): the lock would expire before its minimum hold; make `min_hold` at most `lease`, or leave `lease` out (the watchdog keeps the lock while the body runs)",
                        humantime::format_duration(min_hold.duration),
                        humantime::format_duration(lease.duration),
                    ),
                ));
        }
    }
}

/// `keys = ["account:<from>", "account:<to>"]`: an array of at least one string literal.
fn parse_keys(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let Expr::Array(array) = value else {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` is an array of key templates: write e.g. keys = [\"account:<from>\", \"account:<to>\"]",
        ));
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` is empty; list the locks to take, e.g. keys = [\"account:<from>\", \"account:<to>\"]",
        ));
    }
    array
        .elems
        .iter()
        .map(|element| match element {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(literal),
                ..
            }) => Ok(literal.clone()),
            other => Err(syn::Error::new_spanned(
                other,
                "each of `keys` is a string literal key template, e.g. \"account:<from>\"",
            )),
        })
        .collect()
}

/// `permits = 4`: a semaphore capacity from 1 to `u32::MAX`.
fn parse_permits(value: &Expr) -> syn::Result<u32> {
    let wrong = || {
        syn::Error::new_spanned(
            value,
            "`permits` is the semaphore's capacity, a whole number from 1 to 4294967295: write e.g. permits = 4",
        )
    };
    let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(literal),
        ..
    }) = value
    else {
        return Err(wrong());
    };
    match literal.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new_spanned(
            literal,
            "`permits = 0` would make a semaphore nobody can ever enter; give at least 1",
        )),
        Ok(permits) => Ok(permits),
        Err(_) => Err(wrong()),
    }
}

/// A duration string such as `"250ms"`, `"5s"`, `"1m"`, `"1h"`.
fn parse_duration(literal: &LitStr, option: &str, nonzero: bool) -> syn::Result<Duration> {
    let text = literal.value();
    let duration = humantime::parse_duration(text.trim()).map_err(|e| {
        syn::Error::new_spanned(
            literal,
            format!("invalid `{option}` duration {text:?}: {e}; write e.g. \"250ms\", \"5s\", \"2m\" or \"1h\""),
        )
    })?;
    if nonzero && duration.as_millis() == 0 {
        return Err(syn::Error::new_spanned(
            literal,
            if option == "lease" {
                format!("`lease` {text:?} is shorter than 1ms; Redis would delete the lock at once. Leave `lease` out to use the watchdog")
            } else {
                format!("`{option}` {text:?} is shorter than 1ms and would hold nothing; give at least \"1ms\", or leave `{option}` out")
            },
        ));
    }
    Ok(duration)
}

/// Errors gathered so that one compile shows all of them.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn keep<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
