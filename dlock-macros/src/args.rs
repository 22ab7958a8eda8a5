//! The attribute's options, parsed with the span of every value kept for error messages.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::ParseStream;
use syn::{Expr, Ident, LitStr, Path, Token};

const OPTIONS: &str = "`key`, `kind`, `lease`, `wait`, `client`, `on_fail`";

/// `#[distributed_lock(key = "...", kind = "...", lease = "...", wait = "...", client = expr, on_fail = path)]`
///
/// Options with a mistake are left `None` and the mistake recorded, so that one compile
/// reports every problem of the attribute and of the function it is on.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    pub(crate) kind: Kind,
    pub(crate) lease: Option<Lease>,
    pub(crate) wait: Option<Duration>,
    pub(crate) client: Option<Expr>,
    pub(crate) on_fail: Option<Path>,
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

    /// The variant of `dlock_core::__private::Kind` it expands to.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Kind::Reentrant => "Reentrant",
            Kind::Fair => "Fair",
            Kind::Read => "Read",
            Kind::Write => "Write",
        }
    }
}

/// A `lease` and where it was written. Its upper bound is `dlock_core::MAX_LEASE`, which
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
            let name: Ident = input.parse()?;
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
                    args.kind = errors.keep(Kind::parse(&literal)).unwrap_or_default();
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
                "wait" => {
                    let literal: LitStr = input.parse()?;
                    args.wait = errors.keep(parse_duration(&literal, "wait", false));
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

        if args.key.is_none() {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. #[distributed_lock(key = \"goods:<id>\")]",
            ));
        }
        Ok(args)
    }
}

/// A duration string such as `"250ms"`, `"5s"`, `"1m"`, `"1h"`.
fn parse_duration(literal: &LitStr, option: &str, is_lease: bool) -> syn::Result<Duration> {
    let text = literal.value();
    let duration = humantime::parse_duration(text.trim()).map_err(|e| {
        syn::Error::new_spanned(
            literal,
            format!("invalid `{option}` duration {text:?}: {e}; write e.g. \"250ms\", \"5s\", \"2m\" or \"1h\""),
        )
    })?;
    if is_lease && duration.as_millis() == 0 {
        return Err(syn::Error::new_spanned(
            literal,
            format!("`lease` {text:?} is shorter than 1ms; Redis would delete the lock at once. Leave `lease` out to use the watchdog"),
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
