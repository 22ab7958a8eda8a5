//! The rewrite: `async fn f(..) -> R { body }` becomes acquire, body in the lock's owner
//! scope, release.

use std::collections::BTreeSet;
use std::time::Duration;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{AttrStyle, FnArg, ItemFn, Pat, ReturnType, Type};

use crate::args::{Args, Errors, OnBusy, OnLost};
use crate::key::{key_expression, parse_template, Piece};

/// Entry point on `proc_macro2` streams, so it can be tested and snapshotted.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let error = syn::Error::new_spanned(
                &item,
                "#[distributed_lock] applies to an `async fn` (a free function or a method)",
            );
            return with_errors(error, item);
        }
    };
    match expand(args, &function) {
        Ok(expanded) => expanded,
        // Emit the function unchanged beside the errors so callers do not cascade.
        Err(error) => with_errors(error, function.into_token_stream()),
    }
}

fn with_errors(error: syn::Error, item: TokenStream) -> TokenStream {
    let errors = error.to_compile_error();
    quote!(#errors #item)
}

fn expand(args: TokenStream, function: &ItemFn) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let parser = |input: syn::parse::ParseStream<'_>| Args::parse(input, &mut errors);
    let args = syn::parse::Parser::parse2(parser, args);
    let args = errors.keep(args).unwrap_or_default();

    if function.sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            function.sig.fn_token,
            "#[distributed_lock] needs an `async fn`: the lock is awaited before the body runs",
        ));
    }
    let names = parameter_names(function);
    let target = match (&args.key, &args.keys) {
        (Some(literal), None) => compile_key(literal, &names, &mut errors)
            .map(|key| Target::One(key, literal.value(), args.permits)),
        (None, Some(literals)) => {
            let keys: Vec<_> = literals
                .iter()
                .map(|literal| compile_key(literal, &names, &mut errors))
                .collect();
            // The templates as written, joined: one label for the set.
            let templates: Vec<String> = literals.iter().map(syn::LitStr::value).collect();
            keys.into_iter()
                .collect::<Option<Vec<_>>>()
                .map(|keys| Target::All(keys, templates.join(", ")))
        }
        // Both or neither: `Args::parse` reported it.
        _ => None,
    };
    let skip = (args.on_busy == OnBusy::Skip)
        .then(|| skipped_value(&function.sig.output))
        .and_then(|value| {
            if value.is_none() {
                let culprit = match &function.sig.output {
                    ReturnType::Type(_, ty) => ty.to_token_stream(),
                    ReturnType::Default => function.sig.ident.to_token_stream(),
                };
                errors.push(syn::Error::new_spanned(
                    culprit,
                    "`on_busy = \"skip\"` returns without running the body when the lock is busy, so the function must return `Option<T>` (skipped: `None`), `Result<Option<T>, E>` (`Ok(None)`) or `()`",
                ));
            }
            value
        });
    // With `on_busy = "skip"` the type check above has spoken: `Option<T>` and `()` return
    // the skipped value for failures too.
    if args.on_fail.is_none()
        && !returns_result(&function.sig.output)
        && args.on_busy != OnBusy::Skip
    {
        let culprit = match &function.sig.output {
            ReturnType::Type(_, ty) => ty.to_token_stream(),
            ReturnType::Default => function.sig.ident.to_token_stream(),
        };
        errors.push(syn::Error::new_spanned(
            culprit,
            "#[distributed_lock] cannot report a lock failure from this function: return `Result<_, E>` with `E: From<dlock::LockError>`, or add `on_fail = handler` (a fn taking the `LockError` and returning this function's type)",
        ));
    }
    errors.finish()?;
    match target {
        Some(target) => Ok(rewrite(function, &args, target, skip)),
        // No error recorded means the keys were there and valid; stay total anyway.
        None => Ok(function.to_token_stream()),
    }
}

/// What the expansion acquires: the code building each key at run time.
enum Target {
    /// `key`: one lock of the attribute's `kind`, or with `permits` one permit of a
    /// semaphore of that capacity; with the key as written, the label of its metrics.
    One(TokenStream, String, Option<u32>),
    /// `keys`: a multi-lock, all or none; with the keys as written, joined by `", "`.
    All(Vec<TokenStream>, String),
}

/// Checks one key template against the function's parameters; the code building the key,
/// or `None` with the mistakes recorded.
fn compile_key(
    literal: &syn::LitStr,
    names: &BTreeSet<String>,
    errors: &mut Errors,
) -> Option<TokenStream> {
    let pieces = errors.keep(
        parse_template(&literal.value())
            .map_err(|message| syn::Error::new_spanned(literal, message)),
    )?;
    for piece in &pieces {
        match piece {
            Piece::Placeholder(path) if !names.contains(&path[0]) => {
                errors.push(syn::Error::new_spanned(
                    literal,
                    unknown_placeholder(&path[0], names),
                ));
            }
            Piece::Text(text) => {
                for message in parameters_written_as_text(text, names) {
                    errors.push(syn::Error::new_spanned(literal, message));
                }
            }
            Piece::Placeholder(_) => {}
        }
    }
    Some(key_expression(&pieces, literal))
}

fn rewrite(
    function: &ItemFn,
    args: &Args,
    target: Target,
    skip: Option<TokenStream>,
) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        modifiers,
        sig,
        block,
    } = function;
    // `default fn` (unstable specialization) is the only modifier syn knows of.
    let defaultness = &modifiers.defaultness;
    let (outer, inner): (Vec<_>, Vec<_>) = attrs
        .iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    let statements = &block.stmts;
    let private = private_path(args);
    let name = sig.ident.to_string();

    let fail = match (&args.on_fail, &skip) {
        (Some(handler), _) => quote!(#handler(__dlock_error)),
        // `Option<T>` or `()` with `on_busy = "skip"`: nothing to return a failure in.
        (None, Some(skipped)) if !returns_result(&sig.output) => quote!({
            #private::skipped_on_failure(
                ::core::concat!(::core::module_path!(), "::", #name),
                &__dlock_error,
            );
            #skipped
        }),
        // Spanned on the return type: a missing `From<LockError>` is reported there.
        (None, _) => {
            let span = match &sig.output {
                ReturnType::Type(_, ty) => ty.span(),
                ReturnType::Default => sig.ident.span(),
            };
            respan(quote!(#private::lock_failure(__dlock_error)), span)
        }
    };
    let client = match &args.client {
        Some(expr) => {
            quote_spanned!(expr.span()=> ::core::result::Result::Ok(#private::IntoClient::to_client(&(#expr))))
        }
        None => {
            quote!(#private::global_client_for(::core::concat!(::core::module_path!(), "::", #name)))
        }
    };
    let wait = match args.on_busy {
        OnBusy::Fail => optional_duration(Some(Duration::ZERO)),
        OnBusy::Wait | OnBusy::Skip => optional_duration(args.wait),
    };
    let lease = optional_duration(args.lease.as_ref().map(|lease| lease.duration));
    // Checked against dlock's limit when the expansion compiles, pointing at the lease.
    let lease_check = args.lease.as_ref().map(|lease| {
        let (secs, nanos) = (lease.duration.as_secs(), lease.duration.subsec_nanos());
        quote_spanned!(lease.span=> const _: () = ::core::assert!(
            #private::lease_fits(#secs, #nanos),
            "`lease` is longer than `dlock::limits::MAX_LEASE`; leave `lease` out to use the watchdog"
        );)
    });
    let min_hold_check = args.min_hold.as_ref().map(|min_hold| {
        let (secs, nanos) = (
            min_hold.duration.as_secs(),
            min_hold.duration.subsec_nanos(),
        );
        quote_spanned!(min_hold.span=> const _: () = ::core::assert!(
            #private::lease_fits(#secs, #nanos),
            "`min_hold` is longer than `dlock::limits::MAX_LEASE`, the longest a lock can be kept"
        );)
    });
    // Counted from the acquisition, which the expansion sees complete just before it.
    let min_hold_end = args.min_hold.as_ref().map(|min_hold| {
        let (secs, nanos) = (min_hold.duration.as_secs(), min_hold.duration.subsec_nanos());
        quote!(let __dlock_hold_end = #private::min_hold_end(::core::time::Duration::new(#secs, #nanos));)
    });
    // Typing the body's future with the declared return type lets `?` and `return` inside
    // it infer as they would in the original function.
    let body = match returned_type(&sig.output) {
        Some(ty) => quote!(#private::typed_body::<#ty, _>(async move { #(#statements)* })),
        None => quote!(async move { #(#statements)* }),
    };

    let acquire = match target {
        Target::One(key, template, permits) => {
            let kind = match permits {
                Some(permits) => quote!(#private::Kind::Permits(#permits)),
                None => {
                    let variant = proc_macro2::Ident::new(
                        args.kind.variant(),
                        proc_macro2::Span::call_site(),
                    );
                    quote!(#private::Kind::#variant)
                }
            };
            let call = match skip {
                Some(_) => {
                    quote!(#private::acquire_or_skip(#client, #kind, #template, __dlock_key, #lease))
                }
                None => {
                    quote!(#private::acquire(#client, #kind, #template, __dlock_key, #wait, #lease))
                }
            };
            quote! {
                let __dlock_key: ::std::string::String = #key;
                let __dlock_acquired = #call.await;
            }
        }
        Target::All(keys, template) => {
            let call = match skip {
                Some(_) => {
                    quote!(#private::acquire_all_or_skip(#client, #template, __dlock_keys, #lease))
                }
                None => {
                    quote!(#private::acquire_all(#client, #template, __dlock_keys, #wait, #lease))
                }
            };
            quote! {
                let __dlock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#keys),*];
                let __dlock_acquired = #call.await;
            }
        }
    };
    let held = match &skip {
        Some(skipped) => quote! {
            ::core::result::Result::Ok(::core::option::Option::Some(__dlock_guard)) => __dlock_guard,
            ::core::result::Result::Ok(::core::option::Option::None) => return #skipped,
        },
        None => quote!(::core::result::Result::Ok(__dlock_guard) => __dlock_guard,),
    };

    let run = run_body(args, &private, &sig.output, body, &fail);

    quote! {
        #(#outer)*
        #vis #defaultness #sig {
            #(#inner)*
            #lease_check
            #min_hold_check
            #acquire
            let __dlock_guard = match __dlock_acquired {
                #held
                ::core::result::Result::Err(__dlock_error) => return #fail,
            };
            #min_hold_end
            #run
        }
    }
}

/// Runs the body under the guard the way `on_lost` says, releases, and returns: the
/// body's output, or the loss through the same path as an acquisition failure (`fail`,
/// which reads `__dlock_error`).
fn run_body(
    args: &Args,
    private: &TokenStream,
    output: &ReturnType,
    body: TokenStream,
    fail: &TokenStream,
) -> TokenStream {
    // With `min_hold` the lock stays taken until the minimum hold ends.
    let release = match args.min_hold {
        Some(_) => {
            quote!(#private::HoldAfterExit::release_at(__dlock_guard, __dlock_hold_end).await;)
        }
        None => quote!(#private::Guard::release(__dlock_guard).await;),
    };
    let runner = match args.on_lost {
        OnLost::Ignore => {
            return quote! {
                let __dlock_output = #private::run_ignoring_loss(&__dlock_guard, #body).await;
                #release
                __dlock_output
            };
        }
        OnLost::Cancel => quote!(run_cancelling),
        OnLost::Error => quote!(run_to_end),
    };
    // Without `on_fail` the function returns a `Result`: an `Err` the body returned before
    // the loss was known is kept (it is the first failure); with `on_fail` the handler
    // decides, so every loss goes to it.
    let keep_failure = (args.on_fail.is_none() && returns_result(output)).then(|| {
        quote! {
            ::core::result::Result::Err(#private::Lost {
                output: ::core::option::Option::Some(__dlock_output @ ::core::result::Result::Err(_)),
                ..
            }) => __dlock_output,
        }
    });
    quote! {
        let __dlock_run = #private::#runner(&__dlock_guard, #body).await;
        #release
        match __dlock_run {
            ::core::result::Result::Ok(__dlock_output) => __dlock_output,
            #keep_failure
            ::core::result::Result::Err(#private::Lost { error: __dlock_error, .. }) => #fail,
        }
    }
}

/// `dlock::__private`, through `crate = path` when the dependency is renamed.
fn private_path(args: &Args) -> TokenStream {
    match &args.krate {
        Some(krate) => quote!(#krate::__private),
        None => quote!(::dlock::__private),
    }
}

/// `tokens` with every span set to `span`, so that an error about them (a type without
/// `From<LockError>`) points at the user's code instead of the attribute.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                return proc_macro2::TokenTree::Group(inner);
            }
            token.set_span(span);
            token
        })
        .collect()
}

/// What an `on_busy = "skip"` call returns when the lock is busy: `None` for `Option<T>`,
/// `Ok(None)` for `Result<Option<T>, E>` (or an alias named `…Result<Option<T>>`), nothing
/// (a bare `return`: `return ()` would trip clippy's `unused_unit` in the user's crate) for
/// no return type or `()`; `None` for any other type, which cannot say "skipped".
fn skipped_value(output: &ReturnType) -> Option<TokenStream> {
    let ty = match output {
        ReturnType::Default => return Some(TokenStream::new()),
        ReturnType::Type(_, ty) => &**ty,
    };
    match ty {
        Type::Tuple(tuple) if tuple.elems.is_empty() => Some(TokenStream::new()),
        Type::Path(path) => {
            let last = path.path.segments.last()?;
            let name = last.ident.to_string();
            if name == "Option" {
                return Some(quote!(::core::option::Option::None));
            }
            let first_generic = match &last.arguments {
                syn::PathArguments::AngleBracketed(generics) => generics.args.first(),
                _ => None,
            };
            match first_generic {
                Some(syn::GenericArgument::Type(Type::Path(inner)))
                    if name.ends_with("Result")
                        && inner
                            .path
                            .segments
                            .last()
                            .is_some_and(|segment| segment.ident == "Option") =>
                {
                    Some(quote!(::core::result::Result::Ok(
                        ::core::option::Option::None
                    )))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn optional_duration(duration: Option<Duration>) -> TokenStream {
    match duration {
        Some(duration) => {
            // Seconds and nanoseconds: any parsed duration, however long, survives exactly.
            let (secs, nanos) = (duration.as_secs(), duration.subsec_nanos());
            quote!(::core::option::Option::Some(::core::time::Duration::new(#secs, #nanos)))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// Names a placeholder may use: every binding of the parameters (including those inside
/// patterns such as `Path(id): Path<u64>`), and `self` for methods.
fn parameter_names(function: &ItemFn) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for input in &function.sig.inputs {
        match input {
            FnArg::Receiver(_) => {
                names.insert("self".to_owned());
            }
            FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
        }
    }
    names
}

fn collect_bindings(pat: &Pat, names: &mut BTreeSet<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.insert(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| collect_bindings(&field.pat, names)),
        Pat::Reference(reference) => collect_bindings(&reference.pat, names),
        Pat::Paren(paren) => collect_bindings(&paren.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Type(typed) => collect_bindings(&typed.pat, names),
        _ => {}
    }
}

fn unknown_placeholder(name: &str, names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        return format!("unknown placeholder `{name}` in key: this function has no parameters");
    }
    let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    format!(
        "unknown placeholder `{name}` in key; parameters: {}",
        list.join(", ")
    )
}

/// Parameters named in the key's literal text the way other tools insert them: `{id}`
/// (format strings) or `#id` (lock4j's SpEL). Both are literal text here, so every call
/// would share one lock; each is reported with the `<id>` to write instead.
fn parameters_written_as_text(text: &str, names: &BTreeSet<String>) -> Vec<String> {
    let mut mistakes = Vec::new();
    for (at, sigil) in text.char_indices().filter(|(_, c)| matches!(c, '{' | '#')) {
        let after = &text[at + 1..];
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(after.len());
        let path = after[..end].trim_end_matches('.');
        let root = path.split('.').next().unwrap_or_default();
        if !names.contains(root) || root == "self" && path == "self" {
            continue;
        }
        let closed = after[end..].starts_with('}');
        match sigil {
            '{' if closed && end == path.len() => mistakes.push(format!(
                "`{{{path}}}` in the key is literal text (braces are Redis Cluster hash tags), so every call would take the same lock; write `<{path}>` to insert the parameter (or `{{<{path}>}}` for a hash tag made of it)"
            )),
            '#' => mistakes.push(format!(
                "`#{path}` in the key is literal text, so every call would take the same lock; write `<{path}>` to insert the parameter (the `#param` of lock4j's SpEL is `<param>` here)"
            )),
            _ => {}
        }
    }
    mistakes
}

/// Whether failure can be returned as `Err(LockError.into())`: the return type is a path
/// whose last segment is `Result` or ends in `Result` (`io::Result`, `AppResult`...).
fn returns_result(output: &ReturnType) -> bool {
    match output {
        ReturnType::Type(_, ty) => match &**ty {
            Type::Path(path) => path
                .path
                .segments
                .last()
                .is_some_and(|segment| segment.ident.to_string().ends_with("Result")),
            _ => false,
        },
        ReturnType::Default => false,
    }
}

/// The declared return type, unless it cannot be named in a type position (`impl Trait`).
fn returned_type(output: &ReturnType) -> Option<TokenStream> {
    match output {
        ReturnType::Default => Some(quote!(())),
        ReturnType::Type(_, ty) if contains_impl_trait(ty) => None,
        ReturnType::Type(_, ty) => Some(ty.to_token_stream()),
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    fn scan(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => ident == "impl",
            proc_macro2::TokenTree::Group(group) => scan(group.stream()),
            _ => false,
        })
    }
    scan(ty.to_token_stream())
}

#[cfg(test)]
mod snapshots {
    //! The generated code for representative inputs, formatted, compared with
    //! `tests/expand/*.rs`. Set `DLOCK_BLESS=1` to rewrite the files, then review the diff.

    use super::distributed_lock;

    fn check(name: &str, args: &str, item: &str) {
        let args: proc_macro2::TokenStream = args.parse().expect("args tokenize");
        let item: proc_macro2::TokenStream = item.parse().expect("item tokenizes");
        let output = distributed_lock(args, item);
        let file: syn2::File = syn2::parse2(output).expect("expansion parses as a file");
        let pretty = prettyplease::unparse(&file);
        let path = format!("{}/tests/expand/{name}.rs", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("DLOCK_BLESS").is_some() {
            std::fs::write(&path, &pretty).expect("write snapshot");
            return;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}; run with DLOCK_BLESS=1 to create it"));
        assert_eq!(
            pretty, expected,
            "expansion of {name} changed; DLOCK_BLESS=1 rewrites it"
        );
    }

    #[test]
    fn a_wait_beyond_u64_nanoseconds_is_kept_exactly() {
        // 18446744074 s is more nanoseconds than a u64 holds: it must not wrap to ~0.3 s.
        let tokens =
            super::optional_duration(Some(std::time::Duration::new(18_446_744_074, 5))).to_string();
        assert!(tokens.contains("18446744074u64 , 5u32"), "{tokens}");
    }

    #[test]
    fn lease_and_result() {
        check(
            "lease_and_result",
            r#"key = "goods:<id>", lease = "5s""#,
            "/// Sells one.\npub async fn buy(id: u64, qty: u32) -> Result<u32, AppError> { Ok(qty) }",
        );
    }

    #[test]
    fn method_with_client_wait_and_hash_tag() {
        check(
            "method_with_client_wait_and_hash_tag",
            r#"key = "{shop}:<self.id>:<order.user.0>", wait = "0s", client = self.locks"#,
            "async fn sell(&mut self, order: Order) -> AppResult<()> { #![allow(unused)] self.sold += 1; Ok(()) }",
        );
    }

    #[test]
    fn on_fail_with_impl_trait() {
        check(
            "on_fail_with_impl_trait",
            r#"key = "report:<name>", on_fail = busy"#,
            "async fn report(name: impl Display) -> impl Display { name.to_string() }",
        );
    }

    #[test]
    fn fair_kind() {
        check(
            "fair_kind",
            r#"key = "queue:<id>", kind = "fair", wait = "2s""#,
            "async fn serve(id: u64) -> Result<(), AppError> { Ok(()) }",
        );
    }

    #[test]
    fn read_kind() {
        check(
            "read_kind",
            r#"key = "catalog:<shop>", kind = "read""#,
            "async fn price(shop: u32, item: u64) -> Result<u64, AppError> { Ok(item) }",
        );
    }

    #[test]
    fn write_kind() {
        check(
            "write_kind",
            r#"key = "catalog:<shop>", kind = "write", lease = "10s""#,
            "async fn reprice(shop: u32, item: u64) -> Result<(), AppError> { Ok(()) }",
        );
    }

    #[test]
    fn multi_keys() {
        check(
            "multi_keys",
            r#"keys = ["account:<from>", "account:<to>"], wait = "2s""#,
            "async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), AppError> { Ok(()) }",
        );
    }

    #[test]
    fn semaphore_permits() {
        check(
            "semaphore_permits",
            r#"key = "pool:<name>", permits = 4, lease = "30s""#,
            "async fn query(name: &str) -> Result<u64, AppError> { Ok(1) }",
        );
    }

    #[test]
    fn on_lost_error() {
        check(
            "on_lost_error",
            r#"key = "report:<day>", on_lost = "error""#,
            "async fn report(day: u32) -> Result<u64, AppError> { Ok(1) }",
        );
    }

    #[test]
    fn on_lost_error_with_on_fail() {
        check(
            "on_lost_error_with_on_fail",
            r#"key = "report:<day>", on_lost = "error", on_fail = gave_up"#,
            "async fn report(day: u32) -> u64 { 1 }",
        );
    }

    #[test]
    fn on_lost_ignore() {
        check(
            "on_lost_ignore",
            r#"key = "report:<day>", on_lost = "ignore", lease = "1s""#,
            "async fn report(day: u32) -> Result<u64, AppError> { Ok(1) }",
        );
    }

    #[test]
    fn on_busy_skip() {
        check(
            "on_busy_skip",
            r#"key = "tick:<job>", on_busy = "skip""#,
            "async fn run(job: &str) -> Result<Option<u64>, AppError> { Ok(Some(1)) }",
        );
    }

    #[test]
    fn on_busy_skip_unit() {
        check(
            "on_busy_skip_unit",
            r#"keys = ["a:<job>", "b:<job>"], on_busy = "skip""#,
            "async fn run(job: &str) {}",
        );
    }

    #[test]
    fn on_busy_fail() {
        check(
            "on_busy_fail",
            r#"key = "report:<day>", on_busy = "fail""#,
            "async fn report(day: u32) -> Result<u64, AppError> { Ok(1) }",
        );
    }

    #[test]
    fn min_hold_with_skip() {
        check(
            "min_hold_with_skip",
            r#"key = "job:<name>", on_busy = "skip", min_hold = "50s""#,
            "async fn tick(name: &str) {}",
        );
    }

    #[test]
    fn renamed_crate() {
        check(
            "renamed_crate",
            r#"key = "goods:<id>", crate = dlock"#,
            "async fn buy(id: u64) -> Result<(), AppError> { Ok(()) }",
        );
    }

    #[test]
    fn mistakes_keep_the_function() {
        check(
            "mistakes_keep_the_function",
            r#"key = "goods:<idd>""#,
            "async fn buy(id: u64) -> Result<(), E> { Ok(()) }",
        );
    }
}
