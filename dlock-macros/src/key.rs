//! Key templates: literal text with `<param>` / `<param.field.sub>` placeholders, parsed at
//! compile time into a `format!` string and its arguments.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::LitStr;

/// One piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    /// A parameter (or `self`) followed by field names / tuple indices.
    Placeholder(Vec<String>),
}

/// Splits `template` into text and placeholders.
///
/// `{` and `}` are ordinary text, so Redis Cluster hash tags such as `{goods}:<id>` work.
pub(crate) fn parse_template(template: &str) -> Result<Vec<Piece>, String> {
    if template.is_empty() {
        return Err("the lock `key` is empty; give the lock a name, e.g. \"goods:<id>\"".into());
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('<') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 1..];
        let close = after.find('>').ok_or_else(|| {
            format!("unterminated placeholder in key {template:?}: a `<` has no matching `>`")
        })?;
        let inner = &after[..close];
        if inner.is_empty() {
            return Err(format!(
                "empty placeholder `<>` in key {template:?}; write `<param>` with a parameter name"
            ));
        }
        let path: Vec<String> = inner.split('.').map(str::trim).map(str::to_owned).collect();
        for (i, segment) in path.iter().enumerate() {
            let valid = if i == 0 {
                segment == "self" || is_identifier(segment)
            } else {
                is_identifier(segment) || is_tuple_index(segment)
            };
            if !valid {
                return Err(format!(
                    "invalid placeholder `<{inner}>` in key {template:?}; write `<param>` or `<param.field>`"
                ));
            }
        }
        pieces.push(Piece::Placeholder(path));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(pieces)
}

/// A Rust identifier (not a keyword), so that generating it cannot fail.
fn is_identifier(text: &str) -> bool {
    // The whole text: `parse_str` skips comments, so `id//x` would parse as `id`.
    syn::parse_str::<syn::Ident>(text).is_ok_and(|ident| ident == text)
}

/// A tuple field index as Rust writes it (`0`, `12`; no sign or leading zero) that fits
/// the `u32` of `syn::Index`, so that generating it cannot fail.
fn is_tuple_index(text: &str) -> bool {
    text.parse::<u32>()
        .is_ok_and(|index| index.to_string() == text)
}

/// The expression that builds the key at run time: one `format!` call, no template parsing.
pub(crate) fn key_expression(pieces: &[Piece], literal: &LitStr) -> TokenStream {
    let mut format = String::new();
    let mut values = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            Piece::Placeholder(path) => {
                format.push_str("{}");
                let root = if path[0] == "self" {
                    quote!(self)
                } else {
                    let ident = format_ident!("{}", path[0], span = literal.span());
                    quote!(#ident)
                };
                let fields = path[1..]
                    .iter()
                    .map(|segment| match segment.parse::<u32>() {
                        Ok(index) => {
                            let index = syn::Index {
                                index,
                                span: literal.span(),
                            };
                            quote!(. #index)
                        }
                        Err(_) => {
                            let ident = format_ident!("{}", segment, span = literal.span());
                            quote!(. #ident)
                        }
                    });
                values.push(quote!(#root #(#fields)*));
            }
        }
    }
    let format = LitStr::new(&format, literal.span());
    quote!(::std::format!(#format #(, #values)*))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    fn placeholder(path: &[&str]) -> Piece {
        Piece::Placeholder(path.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(
            parse_template("{goods}:<id>:<req.user.0>").unwrap(),
            vec![
                text("{goods}:"),
                placeholder(&["id"]),
                text(":"),
                placeholder(&["req", "user", "0"])
            ]
        );
        assert_eq!(parse_template("plain").unwrap(), vec![text("plain")]);
        assert_eq!(
            parse_template("<self.id>").unwrap(),
            vec![placeholder(&["self", "id"])]
        );
    }

    #[test]
    fn rejects_malformed_templates() {
        assert!(parse_template("").unwrap_err().contains("empty"));
        assert!(parse_template("goods:<id")
            .unwrap_err()
            .contains("unterminated"));
        assert!(parse_template("goods:<>")
            .unwrap_err()
            .contains("empty placeholder"));
        assert!(parse_template("goods:<1x>")
            .unwrap_err()
            .contains("invalid placeholder"));
        assert!(parse_template("goods:<a..b>")
            .unwrap_err()
            .contains("invalid placeholder"));
        // Found by the property tests: generating `.4294967296` panicked the macro.
        for bad in [
            "<a.4294967296>",
            "<a.007>",
            "<a.+1>",
            "<a.99999999999999999999>",
        ] {
            assert_eq!(
                parse_template(bad).unwrap_err(),
                format!("invalid placeholder `{bad}` in key {bad:?}; write `<param>` or `<param.field>`")
            );
        }
        assert_eq!(
            parse_template("<a.4294967295>").unwrap(),
            vec![placeholder(&["a", "4294967295"])]
        );
    }

    /// The template the pieces were parsed from, up to whitespace inside placeholders.
    fn reassemble(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Placeholder(path) => format!("<{}>", path.join(".")),
            })
            .collect()
    }

    /// Templates near the grammar: text with braces and stray `<`, `>`, `.`, and
    /// placeholders whose segments are identifiers, keywords, raw identifiers, tuple indices
    /// (some too big for a `u32`, some with leading zeros), unicode or whitespace.
    fn template_like() -> impl Strategy<Value = String> {
        let segment = prop_oneof![
            Just("id"),
            Just("self"),
            Just("fn"),
            Just("r#type"),
            Just("_"),
            Just("0"),
            Just("007"),
            Just("4294967295"),
            Just("4294967296"),
            Just("99999999999999999999999"),
            Just("ключ"),
            Just(" a "),
            Just(""),
        ];
        let placeholder =
            (prop::collection::vec(segment, 1..4), any::<bool>()).prop_map(|(segments, closed)| {
                format!("<{}{}", segments.join("."), if closed { ">" } else { "" })
            });
        let part = prop_oneof![
            "[a-z:{}]{0,4}",
            Just("<".to_owned()),
            Just(">".to_owned()),
            Just(".".to_owned()),
            placeholder,
        ];
        prop::collection::vec(part, 0..8).prop_map(|parts| parts.concat())
    }

    fn check_template(template: &str) -> Result<(), TestCaseError> {
        match parse_template(template) {
            Err(message) => prop_assert!(!message.is_empty()),
            Ok(pieces) => {
                prop_assert!(!pieces.is_empty());
                for pair in pieces.windows(2) {
                    let both_text = matches!(pair, [Piece::Text(_), Piece::Text(_)]);
                    prop_assert!(!both_text, "adjacent text pieces: {:?}", pieces);
                }
                for piece in &pieces {
                    match piece {
                        Piece::Text(text) => prop_assert!(!text.is_empty() && !text.contains('<')),
                        Piece::Placeholder(path) => prop_assert!(path
                            .iter()
                            .all(|s| !s.is_empty() && !s.contains([' ', '.', '<', '>']))),
                    }
                }
                let literal = LitStr::new(template, proc_macro2::Span::call_site());
                key_expression(&pieces, &literal);
                // Whitespace aside, the pieces are the template: parsing them back gives
                // the same pieces, and without whitespace the very same text.
                let again = reassemble(&pieces);
                prop_assert_eq!(parse_template(&again), Ok(pieces));
                if !template.chars().any(char::is_whitespace) {
                    prop_assert_eq!(&again, template);
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_comment_after_a_placeholder_name_is_refused_not_a_panic() {
        // Found by the property test below: `parse_str` skips comments, so these used to
        // pass as identifiers and panic when the key's code was generated.
        for template in ["<TI\u{23a}//>", "<id//x>", "<id/*c*/>", "<a.b//>"] {
            assert!(parse_template(template).is_err(), "{template:?} accepted");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_string_parses_or_is_refused_with_a_message(template in any::<String>()) {
            check_template(&template)?;
        }

        #[test]
        fn near_templates_parse_or_are_refused_with_a_message(template in template_like()) {
            check_template(&template)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The whole attribute, key and durations included, with arbitrary strings: an
        /// expansion or compile errors, never a panic of the macro.
        #[test]
        fn the_attribute_never_panics(
            key in prop_oneof![template_like(), any::<String>()],
            wait in prop_oneof![duration_like(), any::<String>()],
            lease in prop_oneof![duration_like(), any::<String>()],
        ) {
            let span = proc_macro2::Span::call_site();
            let (key, wait, lease) = (
                LitStr::new(&key, span),
                LitStr::new(&wait, span),
                LitStr::new(&lease, span),
            );
            let item = quote! {
                async fn f(&self, id: u64, a: (u8, u8)) -> Result<(), E> { Ok(()) }
            };
            let args = quote!(key = #key, wait = #wait, lease = #lease);
            let output = crate::expand::distributed_lock(args, item).to_string();
            prop_assert!(output.contains("async fn f"), "{}", output);
        }
    }

    /// Duration-like strings: numbers from 0 to beyond `u64`, units, signs, fractions.
    fn duration_like() -> impl Strategy<Value = String> {
        let number = prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            Just("18446744073709551616".to_owned()),
            Just("99999999999999999999999".to_owned()),
            "[0-9]{1,3}\\.[0-9]{1,12}",
        ];
        let unit = prop_oneof![
            Just(""),
            Just("ns"),
            Just("us"),
            Just("ms"),
            Just("s"),
            Just("m"),
            Just("h"),
            Just("d"),
            Just("w"),
            Just("y"),
            Just("years"),
            Just("parsecs"),
        ];
        let sign = prop_oneof![Just(""), Just("-"), Just("+"), Just(" ")];
        prop::collection::vec((sign, number, unit), 0..3).prop_map(|parts| {
            parts
                .into_iter()
                .map(|(sign, number, unit)| format!("{sign}{number}{unit}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
    }

    #[test]
    fn braces_are_escaped_for_format() {
        let literal = LitStr::new("{goods}:<id>", proc_macro2::Span::call_site());
        let pieces = parse_template(&literal.value()).unwrap();
        let expr = key_expression(&pieces, &literal).to_string();
        assert!(expr.contains("\"{{goods}}:{}\""), "{expr}");
    }
}
