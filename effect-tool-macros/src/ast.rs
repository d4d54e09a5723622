//! The function under `#[tool]`, read into what the other stages need: its arguments (with
//! docs, `#[secret]` and serde/schemars attributes), the injected context, the return type
//! and the doc comment. Problems with the signature itself are reported here.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, Pat, ReturnType, Signature, Type, Visibility};

use crate::ctxt::Ctxt;
use crate::symbol::{EFFECT_CTX, SECRET, SENSITIVE};
use crate::unraw::unraw;

/// Where the function lives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A free `async fn`.
    Free,
    /// A method of an impl block under `#[tools]`.
    Method,
}

/// One argument the model passes.
pub struct Arg {
    pub ident: Ident,
    pub ty: Type,
    /// `#[doc]` attributes: the schema description.
    pub docs: Vec<Attribute>,
    /// `#[serde(...)]` and `#[schemars(...)]`, copied onto the args field.
    pub pass: Vec<Attribute>,
    /// `#[sensitive]`, with its span: the model supplies it, the journal never keeps it.
    pub sensitive: Option<Span>,
    /// What the argument's `#[serde(...)]` attributes change about its JSON form.
    pub serde: SerdeArg,
}

/// What `#[serde(...)]` on an argument does to the JSON the model sends and the journal keeps.
/// Other serde keys (`with`, `deserialize_with`, ...) change only how the value is read or
/// written, not under which name: they need nothing here.
pub struct SerdeArg {
    /// The serialized name: `rename = "..."` (or `rename(serialize = "...")`), else the Rust
    /// name. Keys and redaction look fields up by it.
    pub name: String,
    /// The other names serde accepts when decoding: `rename(deserialize = "...")` and every
    /// `alias = "..."` (a `#[sensitive]` value is masked under each of them too).
    pub read_names: Vec<String>,
    /// `flatten`: the value's fields are merged into the arguments; it has no name of its own.
    pub flatten: Option<Span>,
    /// `skip_serializing_if = "..."`: the field is sometimes absent from the serialized input.
    pub skip_if: Option<Span>,
    /// `skip` / `skip_serializing`: the field is never in the serialized input.
    pub skip: Option<Span>,
    /// `default` / `default = "..."`: an absent field decodes to a default value.
    pub default: Option<Span>,
}

impl SerdeArg {
    /// Read the `#[serde(...)]` attributes of an argument named `rust_name`. Syntax serde itself
    /// rejects is left for serde to report (its messages point at the same tokens).
    fn read(attrs: &[Attribute], rust_name: &str) -> SerdeArg {
        let mut out = SerdeArg {
            name: rust_name.to_owned(),
            read_names: Vec::new(),
            flatten: None,
            skip_if: None,
            skip: None,
            default: None,
        };
        for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
            let _ = attr.parse_nested_meta(|meta| {
                let span = meta.path.span();
                let key = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
                match key.as_str() {
                    "rename" => {
                        if meta.input.peek(syn::Token![=]) {
                            let lit: syn::LitStr = meta.value()?.parse()?;
                            out.name = lit.value();
                        } else {
                            meta.parse_nested_meta(|inner| {
                                let lit: syn::LitStr = inner.value()?.parse()?;
                                if inner.path.is_ident("serialize") {
                                    out.name = lit.value();
                                } else if inner.path.is_ident("deserialize") {
                                    out.read_names.push(lit.value());
                                }
                                Ok(())
                            })?;
                        }
                    }
                    "alias" => {
                        let lit: syn::LitStr = meta.value()?.parse()?;
                        out.read_names.push(lit.value());
                    }
                    "flatten" => out.flatten = Some(span),
                    "skip" | "skip_serializing" => {
                        out.skip = Some(span);
                        skip_rest(&meta)?;
                    }
                    "skip_serializing_if" => {
                        out.skip_if = Some(span);
                        skip_rest(&meta)?;
                    }
                    "default" => {
                        out.default = Some(span);
                        skip_rest(&meta)?;
                    }
                    _ => skip_rest(&meta)?,
                }
                Ok(())
            });
        }
        out
    }
}

/// Skip the value of a serde key (`= ...` or `(...)`), whatever it is.
fn skip_rest(meta: &syn::meta::ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_rest(&inner))?;
    }
    Ok(())
}

/// A value the tool takes from the run (`#[secret] name: T`): not an argument of the schema.
pub struct InjectedArg {
    pub ident: Ident,
    /// The type as written (`T` or `&T`).
    pub ty: Type,
    /// `T` itself (without the `&`).
    pub value_ty: Type,
    /// Whether the function takes it by reference (`&T`) rather than a clone (`T`).
    pub by_ref: bool,
}

/// A parameter of the function, in order: what the generated `call` passes.
pub enum Param {
    Ctx,
    Arg(usize),
    Injected(usize),
}

/// A function read without its body: attributes, visibility and signature are parsed, the body
/// is kept as tokens (parsing it would cost compile time and nothing here needs it).
pub struct FnShell {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    pub body: proc_macro2::TokenStream,
}

impl syn::parse::Parse for FnShell {
    fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        let body: proc_macro2::Group = input.parse()?;
        if body.delimiter() != proc_macro2::Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected the function's body"));
        }
        Ok(FnShell {
            attrs,
            vis,
            sig,
            body: quote::ToTokens::into_token_stream(body),
        })
    }
}

/// The function under `#[tool]`.
pub struct ToolFn {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    /// The signature as re-emitted: the argument attributes that belong to the macro removed.
    pub sig: Signature,
    pub ident: Ident,
    /// The doc comment, lines joined: the tool's description.
    pub docs: String,
    pub args: Vec<Arg>,
    /// The `#[secret]` parameters, taken from the run.
    pub injected: Vec<InjectedArg>,
    pub params: Vec<Param>,
    /// The return type (its `Ok` and `Err` become the tool's output and error).
    pub ret: Option<Type>,
    /// Whether the signature is fit to generate a tool from (else only the function and the
    /// errors are emitted).
    pub sound: bool,
}

impl ToolFn {
    pub fn parse(cx: &Ctxt, attrs: Vec<Attribute>, vis: Visibility, sig: &Signature, mode: Mode) -> ToolFn {
        let before = cx.count();
        let mut out_sig = sig.clone();
        let help_async = format!("declare it `async fn {}(...)`", sig.ident);
        if sig.asyncness.is_none() {
            cx.error(sig.fn_token.span, "a tool must be an `async fn`", help_async);
        }
        if let Some(c) = &sig.constness {
            cx.error(
                c.span,
                "a tool cannot be a `const fn`",
                "remove `const` and make it `async fn`",
            );
        }
        if let syn::Safety::Unsafe(u) = &sig.safety {
            cx.error(
                u.span,
                "a tool cannot be an `unsafe fn`: the model calls it with any arguments",
                "remove `unsafe` and keep the unsafe block inside the function body",
            );
        }
        if let Some(abi) = &sig.abi {
            cx.error_spanned(
                abi,
                "a tool cannot have an `extern` ABI",
                "remove the `extern` qualifier",
            );
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            let spanned: &dyn quote::ToTokens = if sig.generics.params.is_empty() {
                &sig.generics.where_clause
            } else {
                &sig.generics
            };
            cx.error_spanned(
                spanned,
                "a tool cannot be generic: the model needs one concrete argument schema",
                "use concrete types, or write one `#[tool]` function per type that calls a generic helper",
            );
        }
        if let Some(v) = &sig.variadic {
            cx.error_spanned(v, "a tool cannot be variadic", "take a `Vec<T>` argument instead");
        }
        let ret = match &sig.output {
            ReturnType::Type(_, ty) => Some((**ty).clone()),
            ReturnType::Default => {
                cx.error(
                    sig.paren_token.span.close(),
                    "a tool must return `Result<Output, Error>`",
                    format!(
                        "write `async fn {}(...) -> Result<YourOutput, ToolError>` (the error says whether a failure is definitive, transient or unknown)",
                        sig.ident
                    ),
                );
                None
            }
        };

        let mut args = Vec::new();
        let mut injected = Vec::new();
        let mut params = Vec::new();
        let mut has_ctx = false;
        for input in out_sig.inputs.iter_mut() {
            let pat_ty = match input {
                FnArg::Receiver(r) => {
                    if mode == Mode::Free {
                        cx.error(
                            r.self_token.span,
                            "`#[tool]` on a method needs `#[effect_tool::tools]` on its impl block",
                            "put `#[effect_tool::tools]` on the `impl` block; it generates one tool type per `#[tool]` method, holding an `Arc` of the value",
                        );
                    }
                    continue;
                }
                FnArg::Typed(pt) => pt,
            };
            let secret = pat_ty
                .attrs
                .iter()
                .find(|a| a.path().is_ident(SECRET))
                .map(|a| a.span());
            let sensitive = pat_ty
                .attrs
                .iter()
                .find(|a| a.path().is_ident(SENSITIVE))
                .map(|a| a.span());
            if is_ctx(&pat_ty.ty) {
                check_ctx(cx, &pat_ty.ty);
                if let Some(span) = secret {
                    cx.error(
                        span,
                        "`#[secret]` cannot mark the context: it is never stored, logged or part of the schema",
                        "remove `#[secret]` from the context parameter; mark the secret arguments instead",
                    );
                }
                if let Some(span) = sensitive {
                    cx.error(
                        span,
                        "`#[sensitive]` cannot mark the context: it is never stored, logged or part of the schema",
                        "remove `#[sensitive]` from the context parameter",
                    );
                }
                if has_ctx {
                    cx.error_spanned(
                        &pat_ty.ty,
                        "a tool takes the context once",
                        "remove the second `&EffectCtx` parameter",
                    );
                }
                has_ctx = true;
                params.push(Param::Ctx);
                pat_ty.attrs.retain(|a| !is_macro_attr(a));
                continue;
            }
            let ident = match &*pat_ty.pat {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.clone(),
                other => {
                    cx.error_spanned(
                        other,
                        "a tool argument needs a plain name: it becomes a field of the argument schema",
                        "write `name: Type` and destructure inside the function",
                    );
                    continue;
                }
            };
            if secret.is_some() {
                if let Some(both) = sensitive {
                    cx.error(
                        both,
                        format!("`{ident}` is both `#[secret]` (the application gives it) and `#[sensitive]` (the model gives it)"),
                        "keep `#[secret]` if the application holds the value (it never reaches the model), or `#[sensitive]` if the model supplies it",
                    );
                }
                if let Some(attr) = pat_ty
                    .attrs
                    .iter()
                    .find(|a| a.path().is_ident("serde") || a.path().is_ident("schemars"))
                {
                    cx.error_spanned(
                        attr,
                        format!("`{ident}` is `#[secret]`: it is taken from the run, never serialized and not in the schema, so `#[{}]` has nothing to do", attr.path().get_ident().map(ToString::to_string).unwrap_or_default()),
                        "remove the attribute",
                    );
                }
                let (value_ty, by_ref) = match &*pat_ty.ty {
                    Type::Reference(r) if r.mutability.is_none() => ((*r.elem).clone(), true),
                    other => (other.clone(), false),
                };
                if let Some(common) = common_type(&value_ty) {
                    cx.error_spanned(
                        &pat_ty.ty,
                        format!(
                            "`#[secret] {ident}` is taken from the run by its type, and `{common}` says nothing about what it is: any `{common}` given to the run would match"
                        ),
                        format!(
                            "give it a type of its own, e.g. `pub struct {}({common});`, and give the run that: `RunContext::new(..).with_value({}(...))`; if the model supplies the value, mark it `#[sensitive]` instead",
                            pascal_case(&ident.to_string()),
                            pascal_case(&ident.to_string())
                        ),
                    );
                }
                pat_ty.attrs.retain(|a| !is_macro_attr(a));
                params.push(Param::Injected(injected.len()));
                injected.push(InjectedArg {
                    ident,
                    ty: (*pat_ty.ty).clone(),
                    value_ty,
                    by_ref,
                });
                continue;
            }
            if let Some(r) = find_reference(&pat_ty.ty) {
                cx.error_spanned(
                    r,
                    format!(
                        "tool argument `{ident}` borrows: arguments are decoded from the model's JSON and must be owned"
                    ),
                    "take an owned type: `String` instead of `&str`, `Vec<T>` instead of `&[T]`",
                );
            }
            if let Type::ImplTrait(it) = &*pat_ty.ty {
                cx.error_spanned(
                    it,
                    format!("tool argument `{ident}` cannot be `impl Trait`: the schema needs a concrete type"),
                    "write the concrete type, e.g. `String`",
                );
            }
            let docs = pat_ty
                .attrs
                .iter()
                .filter(|a| a.path().is_ident("doc"))
                .cloned()
                .collect();
            let pass: Vec<Attribute> = pat_ty
                .attrs
                .iter()
                .filter(|a| a.path().is_ident("serde") || a.path().is_ident("schemars"))
                .cloned()
                .collect();
            let serde = SerdeArg::read(&pass, &unraw(&ident));
            pat_ty.attrs.retain(|a| !is_macro_attr(a));
            params.push(Param::Arg(args.len()));
            args.push(Arg {
                ident,
                ty: (*pat_ty.ty).clone(),
                docs,
                pass,
                sensitive,
                serde,
            });
        }

        ToolFn {
            docs: doc_text(&attrs),
            attrs,
            vis,
            ident: sig.ident.clone(),
            sig: out_sig,
            args,
            injected,
            params,
            ret,
            // A signature with any problem: only the function and the errors are emitted.
            sound: cx.count() == before,
        }
    }
}

/// Attributes the macro consumes from an argument: docs, `#[secret]`, `#[sensitive]`, serde
/// and schemars.
fn is_macro_attr(a: &Attribute) -> bool {
    let p = a.path();
    p.is_ident("doc") || p.is_ident(SECRET) || p.is_ident(SENSITIVE) || p.is_ident("serde") || p.is_ident("schemars")
}

/// A standard type that names no particular value (`String`, `u64`, `Vec<..>`, ...), as written.
fn common_type(ty: &Type) -> Option<String> {
    const COMMON: &[&str] = &[
        "String", "str", "bool", "char", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128",
        "isize", "f32", "f64", "Vec", "Option", "HashMap", "BTreeMap", "Value",
    ];
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            let name = last.ident.to_string();
            COMMON.contains(&name.as_str()).then_some(name)
        }
        Type::Paren(p) => common_type(&p.elem),
        _ => None,
    }
}

/// Whether `ty` is the context, in any of its forms (`&EffectCtx`, `EffectCtx`, `&mut ...`).
fn is_ctx(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => is_ctx(&r.elem),
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().is_some_and(|s| s.ident == EFFECT_CTX),
        Type::Paren(p) => is_ctx(&p.elem),
        _ => false,
    }
}

fn check_ctx(cx: &Ctxt, ty: &Type) {
    match ty {
        Type::Reference(r) if r.mutability.is_none() => {}
        Type::Reference(r) => cx.error_spanned(
            r,
            "the context is shared, not lent mutably",
            "take it by shared reference: `ctx: &EffectCtx`",
        ),
        other => cx.error_spanned(
            other,
            "the context is lent to the tool, not given",
            "take it by reference: `ctx: &EffectCtx`",
        ),
    }
}

/// The first reference (or `&`-bearing slice/str) inside a type, if any.
fn find_reference(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Reference(_) => Some(ty),
        Type::Paren(p) => find_reference(&p.elem),
        Type::Group(g) => find_reference(&g.elem),
        Type::Array(a) => find_reference(&a.elem),
        Type::Slice(s) => find_reference(&s.elem),
        Type::Tuple(t) => t.elems.iter().find_map(find_reference),
        Type::Path(p) => p.path.segments.iter().find_map(|seg| match &seg.arguments {
            syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::Type(t) => find_reference(t),
                _ => None,
            }),
            _ => None,
        }),
        _ => None,
    }
}

/// The text of the `#[doc]` attributes as the model should read it: lines joined as markdown
/// (and rustdoc) joins them, so a comment wrapped at 100 columns reads as one sentence.
/// `None` when a `#[doc]` is not a string literal (`#[doc = include_str!(..)]`): the macro
/// cannot read it.
pub fn doc_text_checked(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        let syn::Meta::NameValue(nv) = &attr.meta else {
            return None;
        };
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s), ..
        }) = &nv.value
        else {
            return None;
        };
        for line in s.value().split('\n') {
            lines.push(line.strip_prefix(' ').unwrap_or(line).to_owned());
        }
    }
    Some(join_markdown_lines(&lines))
}

/// [`doc_text_checked`], with what cannot be read left out.
pub fn doc_text(attrs: &[Attribute]) -> String {
    let literal: Vec<Attribute> = attrs
        .iter()
        .filter(|a| {
            matches!(&a.meta, syn::Meta::NameValue(nv) if matches!(&nv.value, syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(_), .. })))
        })
        .cloned()
        .collect();
    doc_text_checked(&literal).unwrap_or_default()
}

/// Lines of markdown, joined as a renderer shows them: a line that continues a paragraph (or a
/// list item) is joined to it with a space (a soft break); a blank line (a paragraph break), a
/// hard break (two trailing spaces, or a trailing backslash), and lines that begin a block of
/// their own (a heading, a list item, a quote, a table row, code) keep a line break. Code
/// blocks, fenced or indented, are kept as written.
pub fn join_markdown_lines(lines: &[String]) -> String {
    let mut out = String::new();
    let mut fence: Option<&str> = None;
    // Whether the last line written is text the next line may continue.
    let mut open = false;
    let mut hard = false;
    let mut blank = false;
    for line in lines {
        let t = line.trim();
        if let Some(marker) = fence {
            out.push('\n');
            out.push_str(line.trim_end());
            if t.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if t.is_empty() {
            blank = !out.is_empty();
            open = false;
            continue;
        }
        let code = !open && line.starts_with("    ");
        let block =
            code || t.starts_with('#') || t.starts_with('>') || t.starts_with('|') || is_fence(t) || is_list_item(t);
        let sep = if out.is_empty() {
            ""
        } else if blank {
            "\n\n"
        } else if !open || block || hard {
            "\n"
        } else {
            " "
        };
        out.push_str(sep);
        let (body, ends_hard) = match line.trim_end().strip_suffix('\\') {
            Some(rest) if !code => (rest, true),
            _ => (line.trim_end(), line.ends_with("  ")),
        };
        out.push_str(if sep == " " { body.trim_start() } else { body });
        hard = ends_hard;
        blank = false;
        open = !(code || t.starts_with('#') || t.starts_with('|'));
        if is_fence(t) {
            fence = Some(&t[..3]);
            open = false;
        }
    }
    out
}

fn is_fence(t: &str) -> bool {
    t.starts_with("```") || t.starts_with("~~~")
}

/// `- item`, `* item`, `+ item`, `1. item`, `1) item`.
fn is_list_item(t: &str) -> bool {
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &t[digits..];
    let marker = if digits > 0 {
        rest.strip_prefix('.').or_else(|| rest.strip_prefix(')'))
    } else {
        rest.strip_prefix('-')
            .or_else(|| rest.strip_prefix('*'))
            .or_else(|| rest.strip_prefix('+'))
    };
    marker.is_some_and(|m| m.is_empty() || m.starts_with(' '))
}

/// `issue_refund` → `IssueRefund`.
pub fn pascal_case(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.is_empty() { "Tool".to_owned() } else { out }
}

#[cfg(test)]
mod tests {
    use super::{join_markdown_lines, pascal_case};

    fn join(text: &str) -> String {
        join_markdown_lines(&text.lines().map(str::to_owned).collect::<Vec<_>>())
    }

    #[test]
    fn wrapped_lines_read_as_one_sentence() {
        assert_eq!(
            join("Refund part of an order, or all of it on\nrequest."),
            "Refund part of an order, or all of it on request."
        );
        assert_eq!(join("One.\n\n\nTwo\n  continued."), "One.\n\nTwo continued.");
        assert_eq!(
            join("\nLeading and trailing blanks.\n\n"),
            "Leading and trailing blanks."
        );
    }

    #[test]
    fn hard_breaks_stay() {
        assert_eq!(join("Line one  \nline two"), "Line one\nline two");
        assert_eq!(join("Line one\\\nline two"), "Line one\nline two");
    }

    #[test]
    fn blocks_keep_their_lines() {
        assert_eq!(
            join("Steps:\n- look up\n  the order\n- refund it\n1. then\n2) done"),
            "Steps:\n- look up the order\n- refund it\n1. then\n2) done"
        );
        assert_eq!(join("# Title\nText\nmore"), "# Title\nText more");
        assert_eq!(
            join("Use:\n```\nlet a = 1;\n  let b = 2;\n```\nafter"),
            "Use:\n```\nlet a = 1;\n  let b = 2;\n```\nafter"
        );
        assert_eq!(
            join("Code:\n\n    let a = 1;\n    let b = 2;\n\nText"),
            "Code:\n\n    let a = 1;\n    let b = 2;\n\nText"
        );
        assert_eq!(
            join("| a | b |\n|---|---|\n| 1 | 2 |"),
            "| a | b |\n|---|---|\n| 1 | 2 |"
        );
        assert_eq!(join("> quoted\n> more"), "> quoted\n> more");
        assert_eq!(
            join("A rate of\n-5 is not a list\n2024 neither"),
            "A rate of -5 is not a list 2024 neither"
        );
    }

    #[test]
    fn pascal() {
        assert_eq!(pascal_case("issue_refund"), "IssueRefund");
        assert_eq!(pascal_case("r#type"), "Type");
        assert_eq!(pascal_case("_private_thing"), "PrivateThing");
        assert_eq!(pascal_case("send_email_v2"), "SendEmailV2");
        assert_eq!(pascal_case("already"), "Already");
    }
}
