//! The `#[tool]` attribute of effect-tool: tool declarations that only compile when they are
//! safe. Use it through the facade, `effect_tool::tool`; the documentation of the attribute is
//! on [`macro@tool`].
//!
//! One stage a file: `attr.rs` parses the keys, `ast.rs` reads the function, `valid.rs` checks
//! the rules between them, `expand.rs` generates code, `fallback.rs` is what is emitted when
//! there are errors, `ctxt.rs` collects every error of one declaration, `symbol.rs` names the
//! keys, `print.rs` prints key closures for the manifest, `tools.rs` handles `#[tools]` impl
//! blocks.

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod print;
mod symbol;
mod tools;
mod valid;

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;

/// Declare an async function as a tool, with what running it twice does.
///
/// ```ignore
/// use effect_tool::{tool, EffectCtx, ToolError};
///
/// /// Refund part of an order.
/// #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
/// async fn issue_refund(
///     ctx: &EffectCtx,
///     /// The order to refund.
///     order_id: String,
///     /// How much, in cents.
///     amount_cents: u64,
/// ) -> Result<Refund, ToolError> {
///     payments.refund(&order_id, amount_cents, ctx.idempotency_key()).await
/// }
/// ```
///
/// # Keys
///
/// | key | meaning |
/// |---|---|
/// | `effect = "pure" \| "idempotent" \| "compensable" \| "irreversible"` | required: what running it twice does |
/// | `key = \|a\| expr` | the effect key from the arguments (`a` is `&<Tool>Args`; the value is `Display`ed) |
/// | `key(field, ...)` | the effect key from these arguments, canonicalized and hashed |
/// | `window = "run" \| "thread" \| "cross-run"` | where the key is unique (default `run`) |
/// | `ttl = "24h"` | how long the record lives |
/// | `recover = path` | `async fn(&EffectCtx, &Args) -> Result<Option<Output>, Error>`: did the effect already happen? |
/// | `compensate = path` | `async fn(&EffectCtx, &Args, &Output) -> Result<(), Error>`: undo it (required for `compensable`) |
/// | `approval = "role"`, `when = \|a\| bool` | the call waits for a person's approval (when the condition holds) |
/// | `timeout = "30s"` | longest execution; past it the outcome is unknown |
/// | `retry(max_attempts = 5, base_delay = "100ms", max_delay = "10s")` | retry limits within what the class allows |
/// | `name = "..."` | the name the model sees (default: the function's name) |
/// | `strict_input` | fail when a key is recorded under different arguments |
/// | `open_world = true \| false` | the MCP `openWorldHint` |
/// | `crate = "path"` | where effect-tool is, for crates that re-export it |
///
/// Durations are a number and a unit, units `ms`, `s`, `m`, `h`, `d`, combinable: `"1h30m"`.
///
/// # Arguments
///
/// Every parameter except the context becomes a field of the argument schema. A parameter of
/// type `&EffectCtx` (anywhere in the list, at most once) is injected by the runtime and is not
/// part of the schema. Doc comments on parameters become the fields' descriptions;
/// `#[serde(...)]` and `#[schemars(...)]` attributes are copied onto the field. `#[secret]`
/// keeps a value out of the journal, the logs and the default key.
///
/// # What is generated
///
/// For `async fn issue_refund(...)`:
/// - the function, unchanged and callable as written;
/// - `IssueRefundArgs`: a struct with one public field per argument (serde + schemars + Clone,
///   unknown fields rejected), with the function's visibility;
/// - `IssueRefund`: a unit struct (the function's name in PascalCase) implementing
///   `effect_tool::Tool`, with `Output`/`Error` the `Ok`/`Err` types of the return type.
///
/// The names are the function's name in PascalCase, and that plus `Args`; pick the function's
/// name so they do not clash with your own items.
///
/// # Compile-time checks
///
/// A declaration with no effect, an unknown class or key (with the nearest valid one
/// suggested), a duplicate key, `compensable` without `compensate`, `pure` with a key or hooks,
/// `when` without `approval`, a key closure that does not type-check, an argument type without
/// serde/schemars impls, a non-async function, a bad duration, `#[secret]` on the context or a
/// context not taken by reference does not compile; every error of one declaration is reported
/// in one build.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let input2 = proc_macro2::TokenStream::from(input);
    let item: ast::FnShell = match syn::parse2(input2.clone()) {
        Ok(item) => item,
        Err(_) => {
            let err = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[tool]` goes on an `async fn`\nhelp: write `#[tool(effect = \"pure\")] async fn lookup(id: String) -> Result<Item, ToolError> { ... }`; for methods, put `#[effect_tool::tools]` on the impl block",
            );
            let mut out = err.to_compile_error();
            out.extend(input2);
            return out.into();
        }
    };
    let cx = ctxt::Ctxt::new();
    let attrs = attr::ToolAttrs::parse(&cx, args.into());
    let func = ast::ToolFn::parse(&cx, item.attrs.clone(), item.vis.clone(), &item.sig, ast::Mode::Free);
    valid::check(&cx, &attrs, &func);
    let block = item.body;
    let original = expand::original(&func, &block);
    let out = match cx.check() {
        Ok(()) => {
            let mut out = original;
            out.extend(expand::tool(&func, &attrs, &expand::Target::Free));
            out
        }
        Err(errors) => fallback::emit(errors, original, &func, attrs, &expand::Target::Free),
    };
    out.into()
}

/// Declare tools as methods of a value that holds clients or state.
///
/// ```ignore
/// use std::sync::Arc;
/// use effect_tool::{tool, tools, EffectCtx, ToolError};
///
/// struct Payments { client: PayClient }
///
/// #[tools]
/// impl Payments {
///     /// Refund part of an order.
///     #[tool(effect = "idempotent", key(order_id, amount_cents))]
///     async fn refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<Refund, ToolError> {
///         self.client.refund(&order_id, amount_cents, ctx.idempotency_key()).await
///     }
/// }
///
/// let payments = Arc::new(Payments { client });
/// let tool = payments.refund_tool();          // or PaymentsRefund::new(payments.clone())
/// ```
///
/// Every `#[tool(...)]` method (taking `&self`) gets, beside the method itself (unchanged):
/// - `<Type><Method>Args` (e.g. `PaymentsRefundArgs`), the argument struct;
/// - `<Type><Method>` (e.g. `PaymentsRefund`), the tool type, holding an `Arc<Type>`, built
///   with `PaymentsRefund::new(arc)`;
/// - `Type::<method>_tool(self: &Arc<Self>)` (e.g. `payments.refund_tool()`).
///
/// In `recover = name` and `compensate = name`, a single name that is a `&self` method of the
/// same impl block is called as that method (`self.name(ctx, args)`); any other path is called
/// as a function. `Self` in argument and return types means the impl's type.
#[proc_macro_attribute]
pub fn tools(args: TokenStream, input: TokenStream) -> TokenStream {
    tools::expand(args.into(), input.into()).into()
}

/// Fail the build when two of the listed tool types have the same name.
///
/// ```ignore
/// effect_tool::unique_tool_names!(IssueRefund, SendEmail, PaymentsRefund);
/// ```
///
/// Every pair of names is compared in a constant, so a clash is a compile error naming both
/// types (a toolkit also rejects duplicates when tools are registered, at run time).
#[proc_macro]
pub fn unique_tool_names(input: TokenStream) -> TokenStream {
    let parser = Punctuated::<syn::Type, syn::Token![,]>::parse_terminated;
    let types = match syn::parse::Parser::parse(parser, input) {
        Ok(t) => t,
        Err(e) => return e.to_compile_error().into(),
    };
    let types: Vec<&syn::Type> = types.iter().collect();
    let p = quote!(::effect_tool::__private);
    let mut checks = Vec::new();
    for (i, a) in types.iter().enumerate() {
        for b in &types[i + 1..] {
            let msg = format!(
                "two tools have the same name: `{}` and `{}`; a model could not tell them apart. Give one of them `#[tool(name = \"...\")]`",
                quote!(#a).to_string().replace(' ', ""),
                quote!(#b).to_string().replace(' ', ""),
            )
            .replace('{', "{{")
            .replace('}', "}}");
            checks.push(quote_spanned! {b.span()=>
                if #p::str_eq(<#a as #p::Tool>::NAME, <#b as #p::Tool>::NAME) {
                    ::core::panic!(#msg);
                }
            });
        }
    }
    quote! {
        const _: () = {
            #(#checks)*
        };
    }
    .into()
}
