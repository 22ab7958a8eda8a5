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
                is_identifier(segment)
                    || segment.chars().all(|c| c.is_ascii_digit()) && !segment.is_empty()
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
    syn::parse_str::<syn::Ident>(text).is_ok()
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
    }

    #[test]
    fn braces_are_escaped_for_format() {
        let literal = LitStr::new("{goods}:<id>", proc_macro2::Span::call_site());
        let pieces = parse_template(&literal.value()).unwrap();
        let expr = key_expression(&pieces, &literal).to_string();
        assert!(expr.contains("\"{{goods}}:{}\""), "{expr}");
    }
}
