//! Code generation: from a validated declaration to the args struct, the tool type and its
//! `Tool` impl. Every runtime item is named through `<crate>::__private`, except the checks a
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
use crate::attr::{Class, KeySpec, ToolAttrs};
use crate::valid::unraw;

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

/// The path of the facade's private module: `::effect_tool::__private` or `<crate>::__private`.
pub fn private(attrs: &ToolAttrs) -> TokenStream {
    match &attrs.krate {
        Some(k) => {
            let path = &k.value;
            quote!(#path::__private)
        }
        None => quote!(::effect_tool::__private),
    }
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
    let p = private(attrs);
    let h = hooks(attrs);
    let names = Names::new(func, target);
    let tool_ident = &names.tool;
    let args_ident = &names.args;
    let vis = &func.vis;
    let fn_name = unraw(&func.ident);
    let tool_name = attrs.name.as_ref().map_or_else(|| fn_name.clone(), |n| n.value.clone());
    let replace_self = |tokens: TokenStream| match target {
        Target::Method { self_ty, .. } => replace_self(tokens, self_ty),
        Target::Free => tokens,
    };

    // The args struct.
    let serde_crate = private_str(attrs, "serde");
    let schemars_crate = private_str(attrs, "schemars");
    let fields = func.args.iter().map(|arg| {
        // The field's description in the schema: the doc comment's lines joined as markdown
        // joins them (schemars would keep every line break of the source).
        let docs = match crate::ast::doc_text_checked(&arg.docs) {
            Some(text) if text.is_empty() => Vec::new(),
            Some(text) => vec![quote!(#[doc = #text])],
            None => arg.docs.iter().map(ToTokens::to_token_stream).collect(),
        };
        let pass = &arg.pass;
        let ident = &arg.ident;
        let ty = replace_self(arg.ty.to_token_stream());
        quote! { #(#docs)* #(#pass)* pub #ident: #ty, }
    });
    let args_doc =
        format!("The arguments of the `{tool_name}` tool, as the model sends them (generated by `#[tool]`).");
    let args_struct = quote! {
        #[doc = #args_doc]
        #[derive(#p::Clone, #p::serde::Serialize, #p::serde::Deserialize, #p::schemars::JsonSchema)]
        #[serde(crate = #serde_crate, deny_unknown_fields)]
        // The tool's description is exported beside the schema; the struct's doc is for rustdoc.
        #[schemars(crate = #schemars_crate, description = "")]
        #[allow(missing_docs)]
        #vis struct #args_ident {
            #(#fields)*
        }
    };

    // The tool type.
    let tool_doc = if func.docs.is_empty() {
        format!("The `{tool_name}` tool (generated by `#[tool]`).")
    } else {
        format!("The `{tool_name}` tool (generated by `#[tool]`): {}", func.docs)
    };
    let tool_struct = match target {
        Target::Free => quote! {
            #[doc = #tool_doc]
            #[derive(#p::Clone, #p::Copy, #p::Debug, #p::Default)]
            #vis struct #tool_ident;
        },
        Target::Method { self_ty, .. } => {
            let ctor_doc = "The tool, calling its method on this value.";
            let method_doc =
                format!("The `{tool_name}` tool, calling `{fn_name}` on this value (generated by `#[tool]`).");
            let method_ident = format_ident!("{}_tool", fn_name);
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
    };

    // The Tool impl.
    let ret = replace_self(func.ret.to_token_stream());
    let class = match attrs.effect.as_ref().map(|e| e.value) {
        Some(Class::Pure) | None => quote!(Pure),
        Some(Class::Idempotent) => quote!(Idempotent),
        Some(Class::Compensable) => quote!(Compensable),
        Some(Class::Irreversible) => quote!(Irreversible),
    };
    let description = attrs.description.as_ref().map_or(&func.docs, |d| &d.value);
    let mut items = Vec::new();

    if let Some(key) = &attrs.key {
        match &key.value {
            KeySpec::Fields(fields) => {
                // The serialized names: the key is read from the input as the journal keeps it.
                let names: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        let f = unraw(f);
                        func.args
                            .iter()
                            .find(|a| unraw(&a.ident) == f)
                            .map_or(f, |a| a.serde.name.clone())
                    })
                    .collect();
                items.push(quote!(const KEY_RULE: #p::KeyRule = #p::KeyRule::Fields(&[#(#names),*]);));
            }
            KeySpec::Closure(closure) => {
                let text = crate::print::closure_text(closure);
                let body_span = closure.body.span();
                let closure = typed_closure(closure, args_ident, &replace_self);
                let hs = respan(&h, body_span);
                // The arguments' local is invisible to the user's closure (mixed-site hygiene):
                // the closure reaches the arguments only through its parameter, which `valid`
                // checks (`key = |_| helper(__args)` would bypass that check).
                let local = Ident::new("__args", Span::mixed_site());
                let call = quote_spanned!(body_span=> #hs::key_of(#local, #closure));
                items.push(quote! {
                    const KEY_RULE: #p::KeyRule = #p::KeyRule::Custom(#text);
                    fn key(&self, #local: &Self::Args) -> #p::Option<#p::String> {
                        #p::Some(#call)
                    }
                });
            }
        }
    }
    if let Some(window) = &attrs.window {
        let variant = match window.value {
            "thread" => quote!(Thread),
            "cross-run" => quote!(CrossRun),
            _ => quote!(Run),
        };
        items.push(quote!(const WINDOW: #p::Window = #p::Window::#variant;));
    }
    let duration = |ms: u64| quote!(#p::Duration::from_millis(#ms));
    if let Some(ttl) = &attrs.ttl {
        let d = duration(ttl.value);
        items.push(quote!(const TTL: #p::Option<#p::Duration> = #p::Some(#d);));
    }
    if let Some(timeout) = &attrs.timeout {
        let d = duration(timeout.value);
        items.push(quote!(const TIMEOUT: #p::Option<#p::Duration> = #p::Some(#d);));
    }
    // Every name serde accepts for a sensitive field (serialized, deserialize-only, aliases):
    // a value sent under any of them is masked.
    let mut sensitive: Vec<String> = Vec::new();
    for a in func.args.iter().filter(|a| a.sensitive.is_some()) {
        for name in std::iter::once(&a.serde.name).chain(&a.serde.read_names) {
            if !sensitive.contains(name) {
                sensitive.push(name.clone());
            }
        }
    }
    if !sensitive.is_empty() {
        items.push(quote!(const SENSITIVE: &'static [&'static str] = &[#(#sensitive),*];));
    }
    if !func.injected.is_empty() {
        let entries = func.injected.iter().map(|inj| {
            let ty = replace_self(inj.value_ty.to_token_stream());
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
    if let Some(approval) = &attrs.approval {
        let role = &approval.value;
        items.push(quote!(const APPROVAL: #p::Option<&'static str> = #p::Some(#role);));
    }
    if let Some(when) = &attrs.when {
        let text = crate::print::closure_text(&when.value);
        let body_span = when.value.body.span();
        let closure = typed_closure(&when.value, args_ident, &replace_self);
        let hs = respan(&h, body_span);
        let local = Ident::new("__args", Span::mixed_site());
        let call = quote_spanned!(body_span=> #hs::approval_when(#local, #closure));
        items.push(quote! {
            const APPROVAL_WHEN: #p::Option<&'static str> = #p::Some(#text);
            fn needs_approval(&self, #local: &Self::Args) -> bool {
                #call
            }
        });
    }
    if attrs.strict_input.is_some() {
        items.push(quote!(
            const STRICT_INPUT: bool = true;
        ));
    }
    if attrs.shared_keys.is_some() {
        items.push(quote!(
            const SHARED_KEYS: bool = true;
        ));
    }
    if let Some(open) = &attrs.open_world {
        let b = open.value;
        items.push(quote!(const OPEN_WORLD: #p::Option<bool> = #p::Some(#b);));
    }
    if let Some(retry) = &attrs.retry {
        let r = &retry.value;
        let mut fields = Vec::new();
        if let Some(n) = r.max_attempts {
            fields.push(quote!(max_attempts: #n,));
        }
        if let Some(ms) = r.base_delay {
            let d = duration(ms);
            fields.push(quote!(base_delay: #d,));
        }
        if let Some(ms) = r.max_delay {
            let d = duration(ms);
            fields.push(quote!(max_delay: #d,));
        }
        let rest = if fields.len() < 3 {
            quote!(..#p::RetryPolicy::DEFAULT)
        } else {
            quote!()
        };
        items.push(quote!(const RETRY: #p::RetryPolicy = #p::RetryPolicy { #(#fields)* #rest };));
    }
    if let Some(recover) = &attrs.recover {
        let call = hook_call(&h, &recover.value, target, "recover", quote!(__ctx, __args));
        items.push(quote! {
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
    if let Some(compensate) = &attrs.compensate {
        let call = hook_call(
            &h,
            &compensate.value,
            target,
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

    let call_args = func.params.iter().map(|param| match param {
        Param::Ctx => quote!(__ctx),
        Param::Arg(i) => {
            let ident = &func.args[*i].ident;
            quote!(__args.#ident)
        }
        Param::Injected(i) => {
            let inj = &func.injected[*i];
            let ty = replace_self(inj.value_ty.to_token_stream());
            let name = inj.value_ty.to_token_stream().to_string().replace(' ', "");
            let span = inj.ty.span();
            let ps = respan(&p, span);
            let value = quote_spanned!(span=> #ps::injected::<#ty>(__ctx, #name));
            if inj.by_ref {
                value
            } else {
                quote_spanned!(span=> #ps::Clone::clone(#value))
            }
        }
    });
    let fn_ident = &func.ident;
    let callee = match target {
        Target::Free => quote!(#fn_ident),
        Target::Method { .. } => quote!(self.__inner.#fn_ident),
    };
    // Errors about the output or error type point at that type when the return type is
    // written `Result<T, E>`, else at the whole return type.
    let ret_span = func.ret.as_ref().map_or_else(Span::call_site, |r| r.span());
    let (ok_span, err_span) = func.ret.as_ref().and_then(result_args).unwrap_or((ret_span, ret_span));
    let output_ty = quote_spanned!(ok_span=> <#ret as #h::ToolReturn>::Output);
    let error_ty = quote_spanned!(err_span=> <#ret as #h::ToolReturn>::Error);
    let into_result = respan(&quote!(#h::ToolReturn::into_result), ret_span);
    let call_ret = respan(&quote!(#p::Result<Self::Output, Self::Error>), ret_span);
    let arg_checks = func.args.iter().map(|arg| {
        let ty = replace_self(arg.ty.to_token_stream());
        let hs = respan(&h, arg.ty.span());
        quote_spanned!(arg.ty.span()=> #hs::assert_tool_arg::<#ty>();)
    });

    // The tool type takes the function's visibility, and its `Tool` impl names the output and
    // error types: when one of them is less visible, rustc's "private type `...` in public
    // interface" points at the function's `pub`, the visibility that makes the tool type public.
    let vis_span = match vis {
        syn::Visibility::Public(p) => p.span,
        syn::Visibility::Restricted(r) => r.pub_token.span,
        syn::Visibility::Inherited => Span::call_site(),
    };
    let output_item = quote_spanned!(vis_span=> type Output = #output_ty;);
    let error_item = quote_spanned!(vis_span=> type Error = #error_ty;);
    let out_hs = respan(&h, ok_span);
    let output_check = quote_spanned!(ok_span=> #out_hs::assert_tool_output::<#output_ty>(););
    let strict_test = strict_test(&p, attrs, tool_ident, args_ident);
    quote! {
        // First, so a missing serde/schemars impl is reported with its explanation first.
        const _: () = {
            #(#arg_checks)*
            #output_check
        };

        #args_struct
        #tool_struct

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

                async fn call(
                    &self,
                    __ctx: &#p::EffectCtx,
                    __args: Self::Args,
                ) -> #call_ret {
                    #into_result(#callee(#(#call_args),*).await)
                }
            }
        };

        #strict_test
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
