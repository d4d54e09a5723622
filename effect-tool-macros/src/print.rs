//! Prints a key closure back as text for `KeyRule::Custom` and the manifest.
//!
//! Stable Rust gives a proc macro no source text for a multi-token span, and `stringify!` puts
//! spaces around every token (`a . order_id`). This printer spaces tokens the way rustfmt
//! would for the expressions keys are written with, so the manifest reads like the source:
//! `|a| format!("refund:{}:{}", a.order_id, a.amount_cents)`. The text depends only on the
//! tokens, so it is stable across builds and machines.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ExprClosure;

/// The closure as text.
pub fn closure_text(closure: &ExprClosure) -> String {
    print(closure.to_token_stream())
}

/// What the previous token was, for spacing.
#[derive(Clone, Copy, PartialEq)]
enum Prev {
    /// Start of a group: no space.
    Start,
    /// An identifier or keyword (the string is checked for keywords).
    Ident,
    /// A literal, or a closed group: a value.
    Value,
    /// A punct joined to the next one (`:` of `::`, `-` of `->`).
    Joint,
    /// A punct that glues to the next token (`.`, unary `&`, `!`, `-`, `*`, `::`, closure `|`).
    Glue,
    /// Any other punct (binary operators, `,`, `=`).
    Punct,
}

pub fn print(tokens: TokenStream) -> String {
    let mut out = String::new();
    print_into(tokens, &mut out);
    out
}

const KEYWORDS: &[&str] = &[
    "if", "else", "match", "in", "return", "as", "let", "move", "for", "while", "mut", "ref", "loop", "async", "await",
    "dyn", "impl",
];

fn print_into(tokens: TokenStream, out: &mut String) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut prev = Prev::Start;
    let mut prev_text = String::new();
    let mut closure_params = false;
    let mut angle = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let tt = &tokens[i];
        let next_is_group = matches!(tokens.get(i + 1), Some(TokenTree::Group(_)));
        match tt {
            TokenTree::Ident(ident) => {
                let text = ident.to_string();
                if matches!(prev, Prev::Ident | Prev::Value | Prev::Punct) {
                    out.push(' ');
                }
                out.push_str(&text);
                prev = Prev::Ident;
                prev_text = text;
            }
            TokenTree::Literal(lit) => {
                if matches!(prev, Prev::Ident | Prev::Value | Prev::Punct) {
                    out.push(' ');
                }
                out.push_str(&lit.to_string());
                prev = Prev::Value;
                prev_text.clear();
            }
            TokenTree::Group(group) => {
                let call = matches!(group.delimiter(), Delimiter::Parenthesis | Delimiter::Bracket)
                    && (matches!(prev, Prev::Value)
                        || (prev == Prev::Ident && !KEYWORDS.contains(&prev_text.as_str()))
                        || (prev == Prev::Glue && prev_text == "!"));
                if !call && matches!(prev, Prev::Ident | Prev::Value | Prev::Punct) {
                    out.push(' ');
                }
                match group.delimiter() {
                    Delimiter::Parenthesis => {
                        out.push('(');
                        print_into(group.stream(), out);
                        out.push(')');
                    }
                    Delimiter::Bracket => {
                        out.push('[');
                        print_into(group.stream(), out);
                        out.push(']');
                    }
                    Delimiter::Brace => {
                        let inner = print(group.stream());
                        if inner.is_empty() {
                            out.push_str("{}");
                        } else {
                            out.push_str("{ ");
                            out.push_str(&inner);
                            out.push_str(" }");
                        }
                    }
                    Delimiter::None => print_into(group.stream(), out),
                }
                prev = Prev::Value;
                prev_text.clear();
            }
            TokenTree::Punct(punct) => {
                let ch = punct.as_char();
                let unary_position = matches!(prev, Prev::Start | Prev::Punct | Prev::Glue)
                    || (prev == Prev::Ident && KEYWORDS.contains(&prev_text.as_str()));
                let text = ch.to_string();
                match ch {
                    ',' | ';' => {
                        out.push(ch);
                        prev = Prev::Punct;
                    }
                    '.' => {
                        // `..` ranges keep their joint spacing; a field/method dot glues.
                        out.push('.');
                        prev = if punct.spacing() == Spacing::Joint {
                            Prev::Joint
                        } else {
                            Prev::Glue
                        };
                    }
                    '?' => {
                        out.push('?');
                        prev = Prev::Value;
                    }
                    ':' if prev == Prev::Joint && prev_text == ":" => {
                        // Second colon of `::`.
                        out.push(':');
                        prev = Prev::Glue;
                    }
                    ':' if punct.spacing() == Spacing::Joint => {
                        // First colon of `::`.
                        if matches!(prev, Prev::Punct) {
                            out.push(' ');
                        }
                        out.push(':');
                        prev = Prev::Joint;
                    }
                    ':' => {
                        out.push(':');
                        prev = Prev::Punct;
                    }
                    '!' if prev == Prev::Ident && next_is_group => {
                        // A macro call: `format!(...)`.
                        out.push('!');
                        prev = Prev::Glue;
                    }
                    '<' if angle > 0 || (prev == Prev::Glue && prev_text == ":") => {
                        // Generic arguments after a turbofish: `collect::<Vec<_>>()`.
                        out.push('<');
                        angle += 1;
                        prev = Prev::Glue;
                    }
                    '>' if angle > 0 => {
                        out.push('>');
                        angle -= 1;
                        prev = Prev::Value;
                    }
                    '|' if closure_params => {
                        out.push('|');
                        closure_params = false;
                        prev = Prev::Punct;
                    }
                    '|' if unary_position => {
                        if matches!(prev, Prev::Punct) || (prev == Prev::Ident) {
                            out.push(' ');
                        }
                        out.push('|');
                        if punct.spacing() == Spacing::Joint
                            && matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '|')
                        {
                            // `||`: a closure without parameters.
                            out.push('|');
                            i += 1;
                            prev = Prev::Punct;
                        } else {
                            closure_params = true;
                            prev = Prev::Glue;
                        }
                    }
                    '&' | '-' | '*' | '!' if unary_position => {
                        if matches!(prev, Prev::Punct) || prev == Prev::Ident {
                            out.push(' ');
                        }
                        out.push(ch);
                        prev = Prev::Glue;
                    }
                    _ => {
                        if matches!(prev, Prev::Ident | Prev::Value | Prev::Punct) {
                            out.push(' ');
                        }
                        out.push(ch);
                        prev = if punct.spacing() == Spacing::Joint {
                            Prev::Joint
                        } else {
                            Prev::Punct
                        };
                    }
                }
                prev_text = text;
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::print;

    fn roundtrip(src: &str) -> String {
        print(src.parse().unwrap())
    }

    #[test]
    fn prints_like_the_source() {
        for src in [
            r#"|a| format!("refund:{}:{}", a.order_id, a.amount_cents)"#,
            "|a| a.order_id.clone()",
            "|a: &Args| a.id",
            "|a| a.items.iter().map(|i| i.sku.as_str()).collect::<Vec<_>>().join(\",\")",
            "|a| a.amount_cents > 10_000 && !a.internal",
            "|a| std::format!(\"{}\", a.x)",
            "|a| if a.x { 1 } else { 2 }",
            "|a| -a.x * 2",
            "|a| &a.name[..3]",
        ] {
            assert_eq!(roundtrip(src), src);
        }
    }
}
