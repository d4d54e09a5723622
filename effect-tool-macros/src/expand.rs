//! Code generation: from a validated declaration to the args struct, the tool type and its
//! `Tool` impl. Every runtime item is named through `<crate>::__private_<version>`, except the checks a
//! compile error can name, which are named through the public, documented `<crate>::hooks`;
//! locals are prefixed with `__`, helper items live in `const _: () = { ... };`.
//!
//! Generated names (documented for users in the facade's `tool` docs):
//! - free function `issue_refund` → tool type `IssueRefund` (a unit struct), args `IssueRefundArgs`;
//! - method `refund` of `impl Service` under `#[tools]` → tool type `ServiceRefund` (holds an
//!   `Arc<Service>`; `ServiceRefund::new(arc)` or `service.refund_tool()`), args `ServiceRefundArgs`.

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ExprClosure, Pat, Path, Type};

use crate::ast::{Param, ToolFn, pascal_case};
use crate::attr::{Class, KeySpec, ToolAttrs, ViewSpec};
use crate::unraw::unraw;

/// Where the tool's function lives.
pub enum Target<'a> {
    /// A free function, called by name.
    Free,
    /// A method of `self_ty`, called on the `Arc` the tool type holds.
    Method {
        self_ty: &'a Type,
        /// The name of the self type (`Service`), prefixed to the tool type's name.
        self_name: String,
        /// The `&self` methods of the impl block: `recover = name` / `compensate = name` naming
        /// one of them is called as a method.
        methods: &'a [Ident],
    },
}

/// The names of the generated items.
pub struct Names {
    pub tool: Ident,
    pub args: Ident,
}

impl Names {
    pub fn new(func: &ToolFn, target: &Target) -> Names {
        let base = pascal_case(&func.ident.to_string());
        let tool = match target {
            Target::Free => base,
            Target::Method { self_name, .. } => format!("{self_name}{base}"),
        };
        let span = func.ident.span();
        Names {
            args: Ident::new(&format!("{tool}Args"), span),
            tool: Ident::new(&tool, span),
        }
    }
}

/// The path of the facade's private module, named after the release
/// ([`PRIVATE`](crate::symbol::PRIVATE)): `::effect_tool::__private_0_1_0` or
/// `<crate>::__private_0_1_0`.
pub fn private(attrs: &ToolAttrs) -> TokenStream {
    let module = Ident::new(crate::symbol::PRIVATE, Span::call_site());
    match &attrs.krate {
        Some(k) => {
            let path = &k.value;
            quote!(#path::#module)
        }
        None => private_root(),
    }
}

/// `::effect_tool::__private_<version>`, for the function-like macros (which have no
/// `crate = "..."` override).
pub fn private_root() -> TokenStream {
    let module = Ident::new(crate::symbol::PRIVATE, Span::call_site());
    quote!(::effect_tool::#module)
}

/// The path of the facade's public `hooks` module (`::effect_tool::hooks` or `<crate>::hooks`):
/// the traits and functions whose names a compile error about a declaration's types or hooks
/// shows, each documented there.
pub fn hooks(attrs: &ToolAttrs) -> TokenStream {
    match &attrs.krate {
        Some(k) => {
            let path = &k.value;
            quote!(#path::hooks)
        }
        None => quote!(::effect_tool::hooks),
    }
}

fn private_str(attrs: &ToolAttrs, sub: &str) -> String {
    let path = private(attrs).to_string().replace(' ', "");
    format!("{path}::{sub}")
}

/// The function as written, minus the argument attributes the macro consumed.
pub fn original(func: &ToolFn, block: &TokenStream) -> TokenStream {
    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    quote! {
        #(#attrs)*
        #vis #sig #block
    }
}

/// Mark the parameters the key reads with `#[allow(unused_variables)]`: an argument used only by
/// `key(...)` or the key closure is not unused, and rustc's advice (a `_` prefix) would rename the
/// field the model sees.
pub fn allow_key_only(func: &mut ToolFn, attrs: &ToolAttrs) {
    let Some(key) = &attrs.key else { return };
    let names: Vec<String> = func.args.iter().map(|a| unraw(&a.ident)).collect();
    let used: Vec<String> = match &key.value {
        KeySpec::Fields(fields) => fields.iter().map(unraw).collect(),
        KeySpec::Closure(closure) => crate::valid::field_reads(closure.body.to_token_stream(), &names)
            .into_iter()
            .map(|(name, _)| name)
            .collect(),
    };
    for input in func.sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(pt) = input
            && let Pat::Ident(pi) = &*pt.pat
            && used.contains(&unraw(&pi.ident))
        {
            pt.attrs.push(syn::parse_quote!(#[allow(unused_variables)]));
        }
    }
}

/// The args struct, the tool type and its impl (not the function itself).
pub fn tool(func: &ToolFn, attrs: &ToolAttrs, target: &Target) -> TokenStream {
    let g = Gen::new(func, attrs, target);
    let checks = g.type_checks();
    let args_struct = g.args_struct();
    let tool_struct = g.tool_struct();
    let tool_impl = g.tool_impl();
    let strict_test = strict_test(&g.p, attrs, &g.names.tool, &g.names.args);
    quote! {
        #checks
        #args_struct
        #tool_struct
        #tool_impl
        #strict_test
    }
}

/// What every stage of the generation reads: the declaration, and the paths and names derived
/// from it once.
struct Gen<'a> {
    func: &'a ToolFn,
    attrs: &'a ToolAttrs,
    target: &'a Target<'a>,
    /// `<crate>::__private_<version>`.
    p: TokenStream,
    /// `<crate>::hooks`.
    h: TokenStream,
    names: Names,
    /// The function's name, without `r#`.
    fn_name: String,
    /// The name the model sees.
    tool_name: String,
    /// `#[tool(stream)]`: the stream's shape (its item is the output and error).
    stream: Option<crate::stream::Shape<'a>>,
}

impl<'a> Gen<'a> {
    fn new(func: &'a ToolFn, attrs: &'a ToolAttrs, target: &'a Target<'a>) -> Gen<'a> {
        let fn_name = unraw(&func.ident);
        Gen {
            p: private(attrs),
            h: hooks(attrs),
            names: Names::new(func, target),
            tool_name: attrs.name.as_ref().map_or_else(|| fn_name.clone(), |n| n.value.clone()),
            fn_name,
            stream: attrs
                .stream
                .as_ref()
                .and(func.ret.as_ref())
                .and_then(crate::stream::shape),
            func,
            attrs,
            target,
        }
    }

    /// `Self` replaced by the impl's type in a method's types (generated items live outside the
    /// impl block).
    fn replace_self(&self, tokens: TokenStream) -> TokenStream {
        match self.target {
            Target::Method { self_ty, .. } => replace_self(tokens, self_ty),
            Target::Free => tokens,
        }
    }

    /// `Duration::from_millis(ms)`.
    fn duration(&self, ms: u64) -> TokenStream {
        let p = &self.p;
        quote!(#p::Duration::from_millis(#ms))
    }

    /// Checks of the argument and output types, first, so a missing serde/schemars impl is
    /// reported with its explanation first.
    fn type_checks(&self) -> TokenStream {
        let arg_checks = self.func.args.iter().map(|arg| {
            let ty = self.replace_self(arg.ty.to_token_stream());
            let hs = respan(&self.h, arg.ty.span());
            quote_spanned!(arg.ty.span()=> #hs::assert_tool_arg::<#ty>();)
        });
        let (ok_span, _) = self.result_spans();
        let output_ty = self.output_ty();
        let out_hs = respan(&self.h, ok_span);
        let output_check = quote_spanned!(ok_span=> #out_hs::assert_tool_output::<#output_ty>(););
        quote! {
            const _: () = {
                #(#arg_checks)*
                #output_check
            };
        }
    }

    /// The args struct: one public field per argument the model sends.
    fn args_struct(&self) -> TokenStream {
        let p = &self.p;
        let serde_crate = private_str(self.attrs, "serde");
        let schemars_crate = private_str(self.attrs, "schemars");
        let fields = self.func.args.iter().map(|arg| {
            // The field's description in the schema: the doc comment's lines joined as markdown
            // joins them (schemars would keep every line break of the source).
            let docs = match crate::ast::doc_text_checked(&arg.docs) {
                Some(text) if text.is_empty() => Vec::new(),
                Some(text) => vec![quote!(#[doc = #text])],
                None => arg.docs.iter().map(ToTokens::to_token_stream).collect(),
            };
            let pass = &arg.pass;
            let ident = &arg.ident;
            let ty = self.replace_self(arg.ty.to_token_stream());
            quote! { #(#docs)* #(#pass)* pub #ident: #ty, }
        });
        let args_doc = format!(
            "The arguments of the `{}` tool, as the model sends them (generated by `#[tool]`).",
            self.tool_name
        );
        let vis = &self.func.vis;
        let args_ident = &self.names.args;
        quote! {
            #[doc = #args_doc]
            #[derive(#p::Clone, #p::serde::Serialize, #p::serde::Deserialize, #p::schemars::JsonSchema)]
            #[serde(crate = #serde_crate, deny_unknown_fields)]
            // The tool's description is exported beside the schema; the struct's doc is for rustdoc.
            #[schemars(crate = #schemars_crate, description = "")]
            #[allow(missing_docs)]
            #vis struct #args_ident {
                #(#fields)*
            }
        }
    }

    /// The tool type: a unit struct for a free function; for a method, a struct holding the
    /// value, its constructor and the value's `<method>_tool()`.
    fn tool_struct(&self) -> TokenStream {
        let p = &self.p;
        let vis = &self.func.vis;
        let tool_ident = &self.names.tool;
        let tool_name = &self.tool_name;
        let tool_doc = if self.func.docs.is_empty() {
            format!("The `{tool_name}` tool (generated by `#[tool]`).")
        } else {
            format!("The `{tool_name}` tool (generated by `#[tool]`): {}", self.func.docs)
        };
        let Target::Method { self_ty, .. } = self.target else {
            return quote! {
                #[doc = #tool_doc]
                #[derive(#p::Clone, #p::Copy, #p::Debug, #p::Default)]
                #vis struct #tool_ident;
            };
        };
        let ctor_doc = "The tool, calling its method on this value.";
        let method_doc = format!(
            "The `{tool_name}` tool, calling `{}` on this value (generated by `#[tool]`).",
            self.fn_name
        );
        let method_ident = format_ident!("{}_tool", self.fn_name);
        quote! {
            #[doc = #tool_doc]
            #[derive(#p::Clone)]
            #vis struct #tool_ident {
                __inner: #p::Arc<#self_ty>,
            }

            // The tool type takes the method's visibility; the value type may be less
            // visible (a private service with `pub` methods), which is fine here.
            #[allow(private_interfaces)]
            impl #tool_ident {
                #[doc = #ctor_doc]
                #vis fn new(inner: #p::Arc<#self_ty>) -> Self {
                    Self { __inner: inner }
                }
            }

            impl #self_ty {
                #[doc = #method_doc]
                #vis fn #method_ident(self: &#p::Arc<Self>) -> #tool_ident {
                    #tool_ident::new(#p::Clone::clone(self))
                }
            }

            const _: () = {
                #[automatically_derived]
                impl #p::Debug for #tool_ident {
                    fn fmt(&self, __f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                        __f.write_str(#tool_name)
                    }
                }
            };
        }
    }

    /// The `Tool` impl: the declaration's constants and hooks, and `call`.
    fn tool_impl(&self) -> TokenStream {
        let p = &self.p;
        let tool_ident = &self.names.tool;
        let args_ident = &self.names.args;
        let tool_name = &self.tool_name;
        let class = match self.attrs.effect.as_ref().map(|e| e.value) {
            Some(Class::Pure) | None => quote!(Pure),
            Some(Class::Idempotent) => quote!(Idempotent),
            Some(Class::Compensable) => quote!(Compensable),
            Some(Class::Irreversible) => quote!(Irreversible),
        };
        let description = self.attrs.description.as_ref().map_or(&self.func.docs, |d| &d.value);
        let (output_item, error_item) = self.output_and_error();
        let output_type = self.output_type_text();
        let items = [
            self.key_items(),
            self.cost_items(),
            self.window_and_durations(),
            self.protected_items(),
            self.approval_items(),
            self.flag_items(),
            self.retry_item(),
            self.hook_items(),
            self.view_items(),
        ];
        let call = self.call_fn();
        quote! {
            const _: () = {
                #[automatically_derived]
                impl #p::Tool for #tool_ident {
                    type Args = #args_ident;
                    #output_item
                    #error_item
                    const NAME: &'static str = #tool_name;
                    const CLASS: #p::EffectClass = #p::EffectClass::#class;
                    const DESCRIPTION: &'static str = #description;
                    #(#items)*

                    #[allow(clippy::needless_borrow)]
                    fn output_schema() -> #p::Option<#p::serde_json::Value> {
                        #[allow(unused_imports)]
                        use #p::output_schema::{ViaJsonSchema as _, ViaNothing as _};
                        (&&#p::output_schema::OutputSchemaProbe::<Self::Output>::new()).output_schema()
                    }

                    fn output_type() -> &'static str {
                        #output_type
                    }

                    #call
                }
            };
        }
    }

    /// The spans of `T` and `E` when the return type is written `Result<T, E>`, else the whole
    /// return type's: where errors about the output or error type point.
    fn result_spans(&self) -> (Span, Span) {
        if let Some(stream) = &self.stream {
            let item_span = stream.item.span();
            return result_args(stream.item).unwrap_or((item_span, item_span));
        }
        let ret_span = self.ret_span();
        self.func
            .ret
            .as_ref()
            .and_then(result_args)
            .unwrap_or((ret_span, ret_span))
    }

    fn ret_span(&self) -> Span {
        self.func.ret.as_ref().map_or_else(Span::call_site, |r| r.span())
    }

    /// The output type as written (`Refund`, `Vec<Refund>`), for the manifest; `Self` as the
    /// impl's type. When the return type is not written `Result<T, E>` (an alias), the
    /// compiler's name of the output type.
    fn output_type_text(&self) -> TokenStream {
        let written = match &self.stream {
            Some(stream) => result_ok_type(stream.item),
            None => self.func.ret.as_ref().and_then(result_ok_type),
        };
        let written = written.map(|ty| {
            let text = self.replace_self(ty.to_token_stream()).to_string();
            let compact: String = text.split_whitespace().collect();
            compact.replace(',', ", ")
        });
        match written {
            Some(text) => quote!(#text),
            None => quote!(::core::any::type_name::<Self::Output>()),
        }
    }

    /// The type whose `ToolReturn` gives the output and the error: the return type, or a
    /// stream's item.
    fn returned(&self) -> TokenStream {
        match &self.stream {
            Some(stream) => self.replace_self(stream.item.to_token_stream()),
            None => self.replace_self(self.func.ret.to_token_stream()),
        }
    }

    fn output_ty(&self) -> TokenStream {
        let (ok_span, _) = self.result_spans();
        let ret = self.returned();
        let h = &self.h;
        quote_spanned!(ok_span=> <#ret as #h::ToolReturn>::Output)
    }

    /// `type Output` and `type Error`. The tool type takes the function's visibility, and its
    /// `Tool` impl names the output and error types: when one of them is less visible, rustc's
    /// "private type `...` in public interface" points at the function's `pub`, the visibility
    /// that makes the tool type public.
    fn output_and_error(&self) -> (TokenStream, TokenStream) {
        let (_, err_span) = self.result_spans();
        let ret = self.returned();
        let h = &self.h;
        let output_ty = self.output_ty();
        let error_ty = quote_spanned!(err_span=> <#ret as #h::ToolReturn>::Error);
        let vis_span = match &self.func.vis {
            syn::Visibility::Public(p) => p.span,
            syn::Visibility::Restricted(r) => r.pub_token.span,
            syn::Visibility::Inherited => Span::call_site(),
        };
        (
            quote_spanned!(vis_span=> type Output = #output_ty;),
            quote_spanned!(vis_span=> type Error = #error_ty;),
        )
    }

    /// `KEY_RULE`, and `key()` for a key closure.
    fn key_items(&self) -> TokenStream {
        let p = &self.p;
        let Some(key) = &self.attrs.key else {
            return TokenStream::new();
        };
        match &key.value {
            KeySpec::Fields(fields) => {
                // The serialized names: the key is read from the input as the journal keeps it.
                let names: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        let f = unraw(f);
                        self.func
                            .args
                            .iter()
                            .find(|a| unraw(&a.ident) == f)
                            .map_or(f, |a| a.serde.name.clone())
                    })
                    .collect();
                quote!(const KEY_RULE: #p::KeyRule = #p::KeyRule::Fields(&[#(#names),*]);)
            }
            KeySpec::Closure(closure) => {
                let text = crate::print::closure_text(closure);
                let body_span = closure.body.span();
                let closure = typed_closure(closure, &self.names.args, &|t| self.replace_self(t));
                let hs = respan(&self.h, body_span);
                // The arguments' local is invisible to the user's closure (mixed-site hygiene):
                // the closure reaches the arguments only through its parameter, which `valid`
                // checks (`key = |_| helper(__args)` would bypass that check).
                let local = Ident::new("__args", Span::mixed_site());
                let call = quote_spanned!(body_span=> #hs::key_of(#local, #closure));
                quote! {
                    const KEY_RULE: #p::KeyRule = #p::KeyRule::Custom(#text);
                    fn key(&self, #local: &Self::Args) -> #p::Option<#p::String> {
                        #p::Some(#call)
                    }
                }
            }
        }
    }

    /// `WINDOW`, `TTL` and `TIMEOUT`, when declared.
    fn window_and_durations(&self) -> TokenStream {
        let p = &self.p;
        let mut items = Vec::new();
        if let Some(window) = &self.attrs.window {
            let variant = match window.value {
                "thread" => quote!(Thread),
                "cross-run" => quote!(CrossRun),
                _ => quote!(Run),
            };
            items.push(quote!(const WINDOW: #p::Window = #p::Window::#variant;));
        }
        if let Some(ttl) = &self.attrs.ttl {
            let d = self.duration(ttl.value);
            items.push(quote!(const TTL: #p::Option<#p::Duration> = #p::Some(#d);));
        }
        if let Some(timeout) = &self.attrs.timeout {
            let d = self.duration(timeout.value);
            items.push(quote!(const TIMEOUT: #p::Option<#p::Duration> = #p::Some(#d);));
        }
        quote!(#(#items)*)
    }

    /// `SENSITIVE` (every name serde accepts for a `#[sensitive]` field: serialized,
    /// deserialize-only, aliases; a value sent under any of them is masked) and `INJECTED`
    /// (the `#[secret]` values the run must hold).
    fn protected_items(&self) -> TokenStream {
        let p = &self.p;
        let mut items = Vec::new();
        let mut sensitive: Vec<String> = Vec::new();
        for a in self.func.args.iter().filter(|a| a.sensitive.is_some()) {
            for name in std::iter::once(&a.serde.name).chain(&a.serde.read_names) {
                if !sensitive.contains(name) {
                    sensitive.push(name.clone());
                }
            }
        }
        if !sensitive.is_empty() {
            items.push(quote!(const SENSITIVE: &'static [&'static str] = &[#(#sensitive),*];));
        }
        if !self.func.injected.is_empty() {
            let entries = self.func.injected.iter().map(|inj| {
                let ty = self.replace_self(inj.value_ty.to_token_stream());
                let name = inj.value_ty.to_token_stream().to_string().replace(' ', "");
                quote! {
                    #p::Injected {
                        type_name: #name,
                        present: #p::RunContext::has_value::<#ty>,
                    }
                }
            });
            items.push(quote!(const INJECTED: &'static [#p::Injected] = &[#(#entries),*];));
        }
        quote!(#(#items)*)
    }

    /// `APPROVAL`, `APPROVAL_TTL`, and `APPROVAL_WHEN` with `needs_approval()` for a `when` closure.
    fn approval_items(&self) -> TokenStream {
        let p = &self.p;
        let mut items = Vec::new();
        if let Some(approval) = &self.attrs.approval {
            let role = &approval.value;
            items.push(quote!(const APPROVAL: #p::Option<&'static str> = #p::Some(#role);));
        }
        if let Some(ttl) = &self.attrs.approval_ttl {
            let d = self.duration(ttl.value);
            items.push(quote!(const APPROVAL_TTL: #p::Option<#p::Duration> = #p::Some(#d);));
        }
        if let Some(when) = &self.attrs.when {
            let text = crate::print::closure_text(&when.value);
            let body_span = when.value.body.span();
            let closure = typed_closure(&when.value, &self.names.args, &|t| self.replace_self(t));
            let hs = respan(&self.h, body_span);
            let local = Ident::new("__args", Span::mixed_site());
            let call = quote_spanned!(body_span=> #hs::approval_when(#local, #closure));
            items.push(quote! {
                const APPROVAL_WHEN: #p::Option<&'static str> = #p::Some(#text);
                fn needs_approval(&self, #local: &Self::Args) -> bool {
                    #call
                }
            });
        }
        quote!(#(#items)*)
    }

    /// `COSTS` and `costs()` for `cost(unit = |a| ...)`.
    fn cost_items(&self) -> TokenStream {
        let Some(cost) = &self.attrs.cost else {
            return TokenStream::new();
        };
        let local = Ident::new("__args", Span::mixed_site());
        let units: Vec<String> = cost.value.iter().map(|c| unraw(&c.unit)).collect();
        let amounts = cost.value.iter().map(|c| {
            let body_span = c.closure.body.span();
            let closure = typed_closure(&c.closure, &self.names.args, &|t| self.replace_self(t));
            let hs = respan(&self.h, body_span);
            quote_spanned!(body_span=> #hs::cost_of(#local, #closure))
        });
        quote! {
            const COSTS: &'static [&'static str] = &[#(#units),*];
            fn costs(&self, #local: &Self::Args) -> ::std::vec::Vec<(&'static str, u64)> {
                ::std::vec![#((#units, #amounts)),*]
            }
        }
    }

    /// `STRICT_INPUT`, `SHARED_KEYS`, `TRANSACTIONAL`, `ONE_WRITE` and `OPEN_WORLD`, when
    /// declared.
    fn flag_items(&self) -> TokenStream {
        let p = &self.p;
        let mut items = Vec::new();
        if self.attrs.strict_input.is_some() {
            items.push(quote!(
                const STRICT_INPUT: bool = true;
            ));
        }
        if self.attrs.shared_keys.is_some() {
            items.push(quote!(
                const SHARED_KEYS: bool = true;
            ));
        }
        if self.attrs.transactional.is_some() {
            items.push(quote!(
                const TRANSACTIONAL: bool = true;
            ));
        }
        if self.attrs.one_write.is_some() {
            items.push(quote!(
                const ONE_WRITE: bool = true;
            ));
        }
        if let Some(open) = &self.attrs.open_world {
            let b = open.value;
            items.push(quote!(const OPEN_WORLD: #p::Option<bool> = #p::Some(#b);));
        }
        quote!(#(#items)*)
    }

    /// `RETRY`: the limits given, the rest from `RetryPolicy::DEFAULT`.
    fn retry_item(&self) -> TokenStream {
        let p = &self.p;
        let Some(retry) = &self.attrs.retry else {
            return TokenStream::new();
        };
        let r = &retry.value;
        let mut fields = Vec::new();
        if let Some(n) = r.max_attempts {
            fields.push(quote!(max_attempts: #n,));
        }
        if let Some(ms) = r.base_delay {
            let d = self.duration(ms);
            fields.push(quote!(base_delay: #d,));
        }
        if let Some(ms) = r.max_delay {
            let d = self.duration(ms);
            fields.push(quote!(max_delay: #d,));
        }
        let rest = if fields.len() < 3 {
            quote!(..#p::RetryPolicy::DEFAULT)
        } else {
            quote!()
        };
        quote!(const RETRY: #p::RetryPolicy = #p::RetryPolicy { #(#fields)* #rest };)
    }

    /// `recover()` (with `RECOVER_FIRST` and `RECOVER_SETTLE` when declared) and `compensate()`,
    /// calling the declared hooks.
    fn hook_items(&self) -> TokenStream {
        let p = &self.p;
        let h = &self.h;
        let mut items = Vec::new();
        if let Some(recover) = &self.attrs.recover {
            let call = hook_call(h, &recover.value, self.target, "recover", quote!(__ctx, __args));
            let mut recover_options = TokenStream::new();
            if self.attrs.recover_first.is_some() {
                recover_options.extend(quote!(
                    const RECOVER_FIRST: bool = true;
                ));
            }
            if let Some(settle) = &self.attrs.recover_settle {
                let d = self.duration(settle.value);
                recover_options.extend(quote!(const RECOVER_SETTLE: #p::Option<#p::Duration> = #p::Some(#d);));
            }
            items.push(quote! {
                #recover_options
                const HAS_RECOVER: bool = true;
                async fn recover(
                    &self,
                    __ctx: &#p::EffectCtx,
                    __args: &Self::Args,
                ) -> #p::Result<#p::Option<Self::Output>, Self::Error> {
                    #call
                }
            });
        }
        if let Some(compensate) = &self.attrs.compensate {
            let call = hook_call(
                h,
                &compensate.value,
                self.target,
                "compensate",
                quote!(__ctx, __args, __output),
            );
            items.push(quote! {
                const HAS_COMPENSATE: bool = true;
                async fn compensate(
                    &self,
                    __ctx: &#p::EffectCtx,
                    __args: &Self::Args,
                    __output: &Self::Output,
                ) -> #p::Result<(), Self::Error> {
                    #call
                }
            });
        }
        quote!(#(#items)*)
    }

    /// `HAS_VIEW` and `to_model()`, calling the declared view (`to_model = path` or a closure,
    /// its parameter typed as the tool's output) through the hook trait that names the
    /// signature expected when it does not fit.
    fn view_items(&self) -> TokenStream {
        let Some(view) = &self.attrs.to_model else {
            return TokenStream::new();
        };
        let p = &self.p;
        let tool_ident = &self.names.tool;
        let (span, view_fn) = match &view.value {
            ViewSpec::Path(path) => (path.span(), self.replace_self(path.to_token_stream())),
            ViewSpec::Closure(closure) => {
                let mut closure: ExprClosure = match syn::parse2(self.replace_self(closure.to_token_stream())) {
                    Ok(c) => c,
                    Err(_) => (**closure).clone(),
                };
                if let Some(first) = closure.inputs.first_mut()
                    && !matches!(first, Pat::Type(_))
                {
                    let pat = first.clone();
                    let ty: Type = syn::parse_quote_spanned!(pat.span()=> &<#tool_ident as #p::Tool>::Output);
                    *first = Pat::Type(syn::PatType {
                        attrs: Vec::new(),
                        pat: Box::new(pat),
                        colon_token: Default::default(),
                        ty: Box::new(ty),
                    });
                }
                (closure.span(), closure.to_token_stream())
            }
        };
        let hs = respan(&self.h, span);
        let call = quote_spanned!(span=> #hs::ToModelHook::<Self::Output, _>::view(#view_fn, __output));
        quote! {
            const HAS_VIEW: bool = true;
            fn to_model(&self, __output: &Self::Output) -> #p::Option<#p::ModelOutput> {
                #p::Some(#call)
            }
        }
    }

    /// `call()`: the function called with the context, the arguments' fields and the values
    /// taken from the run, its return turned into the tool's result.
    fn call_fn(&self) -> TokenStream {
        let p = &self.p;
        let h = &self.h;
        let func = self.func;
        let call_args = func.params.iter().map(|param| match param {
            Param::Ctx => quote!(__ctx),
            Param::Arg(i) => {
                let ident = &func.args[*i].ident;
                quote!(__args.#ident)
            }
            Param::Injected(i) => {
                let inj = &func.injected[*i];
                let ty = self.replace_self(inj.value_ty.to_token_stream());
                let name = inj.value_ty.to_token_stream().to_string().replace(' ', "");
                let span = inj.ty.span();
                let ps = respan(p, span);
                let value = quote_spanned!(span=> #ps::injected::<#ty>(__ctx, #name));
                if inj.by_ref {
                    value
                } else {
                    quote_spanned!(span=> #ps::Clone::clone(#value))
                }
            }
        });
        let fn_ident = &func.ident;
        let callee = match self.target {
            Target::Free => quote!(#fn_ident),
            Target::Method { .. } => quote!(self.__inner.#fn_ident),
        };
        let ret_span = self.ret_span();
        let into_result = respan(&quote!(#h::ToolReturn::into_result), ret_span);
        let call_ret = respan(&quote!(#p::Result<Self::Output, Self::Error>), ret_span);
        let body = match &self.stream {
            None => quote!(#into_result(#callee(#(#call_args),*).await)),
            Some(stream) => {
                // Each item is progress, the last the output; none at all is a definitive
                // failure, made by the error type (`hooks::StreamError`).
                let (_, err_span) = self.result_spans();
                let hs = respan(h, err_span);
                let tool_name = &self.tool_name;
                let empty_error =
                    quote_spanned!(err_span=> <Self::Error as #hs::StreamError>::empty_stream(#tool_name));
                let empty = quote!(|| #empty_error);
                let last = quote!(#p::stream::last);
                if stream.setup {
                    quote! {
                        match #into_result(#callee(#(#call_args),*).await) {
                            #p::Ok(__stream) => #last(__ctx, __stream, #empty).await,
                            #p::Err(__error) => #p::Err(__error),
                        }
                    }
                } else {
                    quote!(#last(__ctx, #callee(#(#call_args),*).await, #empty).await)
                }
            }
        };
        quote! {
            async fn call(
                &self,
                __ctx: &#p::EffectCtx,
                __args: Self::Args,
            ) -> #call_ret {
                #body
            }
        }
    }
}

/// `strict`: a test (compiled only under `cfg(test)`, in the module of the declaration) that
/// fails with the reasons when the arguments' schema cannot be sent with OpenAI's
/// `"strict": true`, so `cargo test` says what to change.
fn strict_test(p: &TokenStream, attrs: &ToolAttrs, tool: &Ident, args: &Ident) -> TokenStream {
    let Some(flag) = &attrs.strict else {
        return TokenStream::new();
    };
    let test = format_ident!("__effect_tool_strict_{}", tool, span = flag.key);
    quote_spanned! {flag.key=>
        #[cfg(test)]
        #[test]
        #[allow(non_snake_case)]
        fn #test() {
            #p::assert_strict::<#args>();
        }
    }
}

/// The spans of `T` and `E` in a return type written `Result<T, E>`.
/// The `T` of a return type written `Result<T, E>`.
fn result_ok_type(ret: &Type) -> Option<&Type> {
    let Type::Path(path) = ret else { return None };
    let last = path.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(ok), Some(_), None) if last.ident == "Result" => Some(ok),
        _ => None,
    }
}

fn result_args(ret: &Type) -> Option<(Span, Span)> {
    let Type::Path(path) = ret else { return None };
    let last = path.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        syn::GenericArgument::Type(t) => Some(t.span()),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(ok), Some(err), None) if last.ident == "Result" => Some((ok, err)),
        _ => None,
    }
}

/// `recover = path` / `compensate = path`: a method of the impl block when the path is the
/// name of one of its `&self` methods, else a function called with the same arguments. The call
/// goes through a hook trait of the facade's `hooks` whose `on_unimplemented` prints the signature
/// expected, so a hook of the wrong shape is reported as such (not as rustc's raw mismatch).
fn hook_call(h: &TokenStream, path: &Path, target: &Target, hook: &str, args: TokenStream) -> TokenStream {
    let span = path.span();
    let hs = respan(h, span);
    let (free, method, generics) = if hook == "recover" {
        (
            quote_spanned!(span=> RecoverHook),
            quote_spanned!(span=> RecoverMethod),
            quote_spanned!(span=> Self::Args, Self::Output, Self::Error),
        )
    } else {
        (
            quote_spanned!(span=> CompensateHook),
            quote_spanned!(span=> CompensateMethod),
            quote_spanned!(span=> Self::Args, Self::Output, Self::Error),
        )
    };
    if let (Target::Method { methods, self_ty, .. }, Some(ident)) = (target, path.get_ident())
        && methods.contains(ident)
    {
        return quote_spanned!(span=>
            #hs::#method::<#self_ty, #generics, _>::call_hook(<#self_ty>::#ident, &*self.__inner, #args).await
        );
    }
    quote_spanned!(span=> #hs::#free::<#generics, _>::call_hook(#path, #args).await)
}

/// `|a| expr` → `|a: &Args| expr`, so rustc checks the closure against the args struct and
/// reports mistakes at the user's tokens.
fn typed_closure(
    closure: &ExprClosure,
    args_ident: &Ident,
    replace_self: &dyn Fn(TokenStream) -> TokenStream,
) -> TokenStream {
    let mut closure = closure.clone();
    if let Some(first) = closure.inputs.first_mut()
        && !matches!(first, Pat::Type(_))
    {
        let pat = first.clone();
        let ty: Type = syn::parse_quote_spanned!(pat.span()=> &#args_ident);
        *first = Pat::Type(syn::PatType {
            attrs: Vec::new(),
            pat: Box::new(pat),
            colon_token: Default::default(),
            ty: Box::new(ty),
        });
    }
    replace_self(closure.to_token_stream())
}

/// The same tokens, all at `span` (so an error in a generated call points at the user's tokens).
fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut ng = Group::new(g.delimiter(), respan(&g.stream(), span));
                ng.set_span(span);
                TokenTree::Group(ng)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// Replace `Self` by the impl's self type (generated items live outside the impl block).
fn replace_self(tokens: TokenStream, self_ty: &Type) -> TokenStream {
    tokens
        .into_iter()
        .flat_map(|tt| -> Vec<TokenTree> {
            match tt {
                TokenTree::Ident(ref i) if i == "Self" => self_ty.to_token_stream().into_iter().collect(),
                TokenTree::Group(g) => {
                    let mut ng = Group::new(g.delimiter(), replace_self(g.stream(), self_ty));
                    ng.set_span(g.span());
                    vec![TokenTree::Group(ng)]
                }
                other => vec![other],
            }
        })
        .collect()
}
