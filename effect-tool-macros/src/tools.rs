//! `#[tools]` on an impl block: every `#[tool(...)]` method becomes a tool type holding an
//! `Arc` of the value, so tools can share clients and state through `&self`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{ImplItem, ItemImpl, ReceiverKind, Type};

use crate::ast::{Mode, ToolFn};
use crate::attr::ToolAttrs;
use crate::ctxt::Ctxt;
use crate::expand::{self, Target};
use crate::{fallback, rules, valid};

pub fn expand(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut item: ItemImpl = match syn::parse2(input.clone()) {
        Ok(item) => item,
        Err(_) => {
            let err = syn::Error::new(
                Span::call_site(),
                "`#[tools]` goes on an `impl` block whose methods are marked `#[tool(...)]`\nhelp: write `#[effect_tool::tools] impl MyService { #[tool(effect = \"pure\")] async fn lookup(&self, id: String) -> Result<Item, ToolError> { ... } }`",
            );
            let mut out = err.to_compile_error();
            out.extend(input);
            return out;
        }
    };

    let cx = Ctxt::new();
    if !args.is_empty() {
        cx.error_spanned(
            &args,
            "`#[tools]` takes no arguments",
            "put the keys on each method: `#[tool(effect = \"idempotent\", ...)]`",
        );
    }
    if let Some((path, _)) = &item.trait_ {
        cx.error_spanned(
            path,
            "`#[tools]` goes on an inherent impl block, not a trait impl",
            "declare the tool methods in `impl MyService { ... }`",
        );
    }
    if !item.generics.params.is_empty() {
        cx.error_spanned(
            &item.generics,
            "`#[tools]` cannot be used on a generic impl block: each tool needs one concrete argument schema",
            "implement the tools on a concrete type, e.g. `impl Service<HttpClient> { ... }`",
        );
    }
    let self_ty: Type = (*item.self_ty).clone();
    let self_name = match &self_ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    };
    let Some(self_name) = self_name else {
        cx.error_spanned(
            &self_ty,
            "`#[tools]` needs a named self type",
            "implement the tools on a struct: `impl MyService { ... }`",
        );
        let mut out = cx.check().err().map(|e| e.to_compile_error()).unwrap_or_default();
        out.extend(item.into_token_stream());
        return out;
    };
    let generic = !item.generics.params.is_empty() || item.trait_.is_some();

    let methods: Vec<syn::Ident> = item
        .items
        .iter()
        .filter_map(|it| match it {
            ImplItem::Fn(f) if f.sig.receiver().is_some() => Some(f.sig.ident.clone()),
            _ => None,
        })
        .collect();

    let team = rules::Team::load();
    let mut generated = team.tracking();
    let mut errors: Vec<syn::Error> = Vec::new();
    let mut found = false;
    for it in item.items.iter_mut() {
        let ImplItem::Fn(method) = it else { continue };
        let Some(pos) = method.attrs.iter().position(is_tool_attr) else {
            continue;
        };
        found = true;
        let attr = method.attrs.remove(pos);
        let tokens = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            _ => TokenStream::new(),
        };
        let mcx = Ctxt::new();
        let mut attrs = ToolAttrs::parse(&mcx, tokens);
        if attrs.span.is_none() {
            attrs.span = Some(syn::spanned::Spanned::span(&attr));
        }
        let receiver_ok =
            matches!(method.sig.receiver(), Some(r) if matches!(r.kind, ReceiverKind::Reference(_, _, None)));
        match method.sig.receiver() {
            _ if receiver_ok => {}
            Some(r) => mcx.error_spanned(
                r,
                "a tool method takes `&self`: one value serves concurrent calls",
                "write `&self` and keep mutable state behind a `Mutex` or atomics",
            ),
            None => mcx.error(
                method.sig.ident.span(),
                "a tool method in `#[tools]` takes `&self`",
                "add `&self` as the first parameter, or declare it as a free `#[tool]` function",
            ),
        }
        let mut func = ToolFn::parse(
            &mcx,
            method.attrs.clone(),
            method.vis.clone(),
            &method.sig,
            Mode::Method,
        );
        func.sound &= receiver_ok;
        valid::check(&mcx, &attrs, &func);
        rules::check(&mcx, &team, &attrs, &func);
        expand::allow_key_only(&mut func, &attrs);
        method.sig = func.sig.clone();
        if generic {
            // Already reported on the impl block; emit nothing for the method.
            let _ = mcx.check();
            continue;
        }
        let target = Target::Method {
            self_ty: &self_ty,
            self_name: self_name.clone(),
            methods: &methods,
        };
        match mcx.check() {
            Ok(()) => generated.extend(expand::tool(&func, &attrs, &target)),
            Err(e) => generated.extend(fallback::emit(e, TokenStream::new(), &func, attrs, &target)),
        }
    }
    if !found {
        cx.error(
            Span::call_site(),
            "`#[tools]` found no `#[tool(...)]` method in this impl block",
            "mark the methods that are tools: `#[tool(effect = \"pure\")] async fn lookup(&self, ...)`",
        );
    }
    if let Err(e) = cx.check() {
        errors.push(e);
    }
    let errors = errors.into_iter().map(|e| e.to_compile_error());
    quote! {
        #(#errors)*
        #item
        #generated
    }
}

fn is_tool_attr(attr: &syn::Attribute) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == "tool")
}
