//! `assert_declared!`: a team's pins of reviewed declarations. Parsed here (every mistake in a
//! pin reported with what to write), expanded into constants that compare the tool's declared
//! `Tool` constants with the pin, and panic, a compile error, with what the declaration is now
//! and what was pinned.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{ExprClosure, Ident, LitStr, Path, Token};

use crate::ctxt::Ctxt;
use crate::print::closure_text;
use crate::symbol::{self, CLASSES, WINDOWS};

/// One aspect of a declaration a pin holds.
enum Aspect {
    Approval(String),
    Recover,
    Compensate,
    KeyFields(Vec<String>),
    KeyCustom(String),
    Window(&'static str),
}

/// `Tool: class, aspect, ...`.
struct Pin {
    tool: Path,
    class: &'static str,
    aspects: Vec<Aspect>,
    /// The pin as written, for the message.
    text: String,
}

/// What a pin may hold after the class.
const ASPECTS: &[&str] = &["approval", "recover", "compensate", "key", "window"];

/// Parse `input` (pins separated by `;`), reporting every mistake; expand the pins that parse.
pub fn expand(input: TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let pins = match syn::parse2::<Pins>(input) {
        Ok(pins) => pins.0,
        Err(err) => {
            cx.syn_error(err);
            Vec::new()
        }
    };
    let pins: Vec<Pin> = pins.into_iter().filter_map(|raw| raw.validate(&cx)).collect();
    match cx.check() {
        Ok(()) => pins.iter().map(Pin::expand).collect(),
        Err(err) => err.to_compile_error(),
    }
}

/// The pins as written: `Tool: word, word = value, ...; ...`.
struct Pins(Vec<RawPin>);

struct RawPin {
    tool: Path,
    class: Ident,
    items: Vec<RawItem>,
}

struct RawItem {
    name: Ident,
    value: RawValue,
}

enum RawValue {
    None,
    Str(LitStr),
    Closure(Box<ExprClosure>),
    Fields(Vec<Ident>),
    /// Any other value: reported with the form to write.
    Other,
}

impl Parse for Pins {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut pins = Vec::new();
        while !input.is_empty() {
            pins.push(input.parse()?);
            if input.is_empty() {
                break;
            }
            input.parse::<Token![;]>()?;
        }
        if pins.is_empty() {
            return Err(input.error(
                "`assert_declared!` pins no tool\nhelp: write `assert_declared!(SendPayment: irreversible, approval = \"finance\")`",
            ));
        }
        Ok(Pins(pins))
    }
}

impl Parse for RawPin {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let tool: Path = input.parse()?;
        if !input.peek(Token![:]) {
            return Err(input
                .error("expected `:` and the class the tool is pinned to\nhelp: write `SendPayment: irreversible`"));
        }
        input.parse::<Token![:]>()?;
        let class: Ident = input.parse()?;
        let mut items = Vec::new();
        while input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.is_empty() || input.peek(Token![;]) {
                break;
            }
            items.push(input.parse()?);
        }
        if !input.is_empty() && !input.peek(Token![;]) {
            return Err(input.error("expected `,` before the next aspect, or `;` before the next pin"));
        }
        Ok(RawPin { tool, class, items })
    }
}

impl Parse for RawItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = input.call(Ident::parse_any)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            match input.parse::<syn::Expr>()? {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(lit),
                    ..
                }) => RawValue::Str(lit),
                syn::Expr::Closure(closure) => RawValue::Closure(Box::new(closure)),
                _ => RawValue::Other,
            }
        } else if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            let fields = content.parse_terminated(Ident::parse_any, Token![,])?;
            RawValue::Fields(fields.into_iter().collect())
        } else {
            RawValue::None
        };
        Ok(RawItem { name, value })
    }
}

impl RawPin {
    /// The pin, if every part of it means something (else each mistake is reported).
    fn validate(self, cx: &Ctxt) -> Option<Pin> {
        let before = cx.count();
        let class_text = self.class.to_string();
        let class = CLASSES.iter().copied().find(|c| *c == class_text);
        if class.is_none() {
            let help = match symbol::nearest(&class_text, CLASSES) {
                Some(near) => format!("did you mean `{near}`? The classes are {}", symbol::list(CLASSES)),
                None => format!("the classes are {}", symbol::list(CLASSES)),
            };
            cx.error(self.class.span(), format!("unknown effect class `{class_text}`"), help);
        }
        let mut aspects: Vec<Aspect> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        for item in self.items {
            let name = item.name.to_string();
            if seen.contains(&name) {
                cx.error(
                    item.name.span(),
                    format!("`{name}` is pinned twice"),
                    "pin each aspect once",
                );
                continue;
            }
            seen.push(name.clone());
            if let Some(aspect) = item.aspect(cx) {
                aspects.push(aspect);
            }
        }
        let class = class?;
        if cx.count() != before {
            return None;
        }
        let mut text = class.to_owned();
        for aspect in &aspects {
            text.push_str(", ");
            text.push_str(&aspect.text());
        }
        Some(Pin {
            tool: self.tool,
            class,
            aspects,
            text,
        })
    }
}

impl RawItem {
    fn aspect(self, cx: &Ctxt) -> Option<Aspect> {
        let name = self.name.to_string();
        let span = self.name.span();
        match (name.as_str(), self.value) {
            ("approval", RawValue::Str(role)) => Some(Aspect::Approval(role.value())),
            ("recover", RawValue::None) => Some(Aspect::Recover),
            ("compensate", RawValue::None) => Some(Aspect::Compensate),
            ("key", RawValue::Fields(fields)) => {
                Some(Aspect::KeyFields(fields.iter().map(crate::unraw::unraw).collect()))
            }
            ("key", RawValue::Closure(closure)) => Some(Aspect::KeyCustom(closure_text(&closure))),
            ("window", RawValue::Str(window)) => match WINDOWS.iter().find(|w| **w == window.value()) {
                Some(w) => Some(Aspect::Window(w)),
                None => {
                    cx.error(
                        window.span(),
                        format!("unknown key window `{}`", window.value()),
                        format!("the windows are {}", symbol::list(WINDOWS)),
                    );
                    None
                }
            },
            (known @ ("approval" | "recover" | "compensate" | "key" | "window"), _) => {
                let msg = match known {
                    "recover" | "compensate" => {
                        format!("a pin says that the tool declares `{known}`, not which function it calls")
                    }
                    "key" => "a pinned key is a list of fields or a closure".to_owned(),
                    _ => format!("a pinned `{known}` is a string"),
                };
                cx.error(span, msg, format!("write `{}`", form(known)));
                None
            }
            (other, _) => {
                let help = match symbol::nearest(other, ASPECTS) {
                    Some(near) => format!(
                        "did you mean `{}`? A pin holds the class, then any of {}",
                        form(near),
                        symbol::list(ASPECTS)
                    ),
                    None => format!("a pin holds the class, then any of {}", symbol::list(ASPECTS)),
                };
                cx.error(span, format!("`{other}` cannot be pinned"), help);
                None
            }
        }
    }
}

/// How each aspect is written in a pin.
fn form(aspect: &str) -> &'static str {
    match aspect {
        "approval" => "approval = \"role\"",
        "recover" => "recover",
        "compensate" => "compensate",
        "key" => "key(field, ...)` or `key = |a| ...",
        _ => "window = \"cross-run\"",
    }
}

impl Aspect {
    /// As written in a pin (and as the message shows the declaration).
    fn text(&self) -> String {
        match self {
            Aspect::Approval(role) => format!("approval = \"{role}\""),
            Aspect::Recover => "recover".to_owned(),
            Aspect::Compensate => "compensate".to_owned(),
            Aspect::KeyFields(fields) => format!("key({})", fields.join(", ")),
            Aspect::KeyCustom(text) => format!("key = {text}"),
            Aspect::Window(w) => format!("window = \"{w}\""),
        }
    }
}

impl Pin {
    /// A constant that panics, naming what was pinned and what is declared, when the pin does
    /// not hold.
    fn expand(&self) -> TokenStream {
        let p = crate::expand::private_root();
        let span = self.tool.span();
        let tool = &self.tool;
        let t = quote_spanned!(span=> <#tool as #p::Tool>);
        let class = self.class;
        let mut holds = vec![quote!(#p::pin::class_is(#t::CLASS, #class))];
        let mut now = vec![quote!(.push(#t::CLASS.as_str()))];
        for aspect in &self.aspects {
            now.push(quote!(.push(", ")));
            match aspect {
                Aspect::Approval(role) => {
                    holds.push(quote!(#p::pin::approval_is(#t::APPROVAL, #role)));
                    now.push(quote!(.approval(#t::APPROVAL)));
                }
                Aspect::Recover => {
                    holds.push(quote!(#t::HAS_RECOVER));
                    now.push(quote!(.flag("recover", #t::HAS_RECOVER)));
                }
                Aspect::Compensate => {
                    holds.push(quote!(#t::HAS_COMPENSATE));
                    now.push(quote!(.flag("compensate", #t::HAS_COMPENSATE)));
                }
                Aspect::KeyFields(fields) => {
                    holds.push(quote!(#p::pin::key_is_fields(#t::KEY_RULE, &[#(#fields),*])));
                    now.push(quote!(.key(#t::KEY_RULE)));
                }
                Aspect::KeyCustom(text) => {
                    holds.push(quote!(#p::pin::key_is_custom(#t::KEY_RULE, #text)));
                    now.push(quote!(.key(#t::KEY_RULE)));
                }
                Aspect::Window(w) => {
                    holds.push(quote!(#p::pin::window_is(#t::WINDOW, #w)));
                    now.push(quote!(.window(#t::WINDOW)));
                }
            }
        }
        let holds = holds.into_iter().reduce(|a, b| quote!(#a && #b)).unwrap_or_default();
        let name = quote!(#tool).to_string().replace(' ', "");
        let head = format!("`{name}` no longer matches its pin: pinned `{}`, declared `", self.text);
        let tail = "` now. If the change was reviewed, update the pin; if not, restore the declaration";
        let holds_ident = format_ident!("__HOLDS", span = Span::mixed_site());
        let text_ident = format_ident!("__NOW", span = Span::mixed_site());
        quote_spanned! {span=>
            const _: () = {
                const #holds_ident: bool = #holds;
                const #text_ident: #p::pin::Text = #p::pin::Text::EMPTY.push(#head) #(#now)* .push(#tail);
                ::core::assert!(#holds_ident, "{}", #text_ident.as_str());
            };
        }
    }
}
