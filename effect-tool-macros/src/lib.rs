//! The `#[tool]` attribute of effect-tool: tool declarations that only compile when they are
//! safe. One line next to the function says what running it twice does:
//!
//! ```
//! use effect_tool::{EffectCtx, ToolError, tool};
//!
//! /// Refund part of an order.
//! #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
//! async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
//!     Ok(format!("refund {order_id} {amount_cents} under {}", ctx.idempotency_key()))
//! }
//! ```
//!
//! The engine of effect-tool then journals every call of a non-pure tool under its effect key,
//! returns the recorded result instead of running again, shares one execution between parallel
//! identical calls, and after an unknown outcome asks the `recover` hook, runs an idempotent
//! tool again with the same key, or stops with `SideEffectRetryBlocked` so a person decides. A
//! declaration with no effect class, or one that is not safe (see [`macro@tool`]), does not
//! compile. Use the attribute through the facade, `effect_tool::tool`.
//!
//! One stage a file: `attr.rs` parses the keys, `ast.rs` reads the function, `valid.rs` checks
//! the rules between them, `expand.rs` generates code, `fallback.rs` is what is emitted when
//! there are errors, `ctxt.rs` collects every error of one declaration, `symbol.rs` names the
//! keys, `print.rs` prints key closures for the manifest, `tools.rs` handles `#[tools]` impl
//! blocks, `rules/` reads a team's rules from the crate's manifest and checks every declaration
//! against them, `unraw.rs` compares names as the model sees them.

#![warn(missing_docs)]

mod ast;
mod attr;
mod ctxt;
mod duration;
mod expand;
mod fallback;
mod pin;
mod print;
mod rules;
mod stream;
mod symbol;
mod tools;
mod unraw;
mod valid;

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;

/// Declare an async function as a tool, with what running it twice does.
///
/// ```
/// use effect_tool::{EffectCtx, Tool, ToolError, tool};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// pub struct Refund {
///     pub id: String,
/// }
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
///     // Pass the key downstream so the payment system applies the refund once.
///     let _key = ctx.idempotency_key();
///     Ok(Refund { id: format!("re_{order_id}_{amount_cents}") })
/// }
///
/// assert_eq!(IssueRefund::NAME, "issue_refund");
/// assert_eq!(IssueRefund::DESCRIPTION, "Refund part of an order.");
/// let args = IssueRefundArgs { order_id: "o-1".into(), amount_cents: 500 };
/// assert_eq!(IssueRefund.key(&args).as_deref(), Some("refund:o-1:500"));
/// let schema = IssueRefund::input_schema();
/// assert_eq!(schema["properties"]["order_id"]["description"], "The order to refund.");
/// assert!(schema["properties"].get("ctx").is_none());
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
/// | `recover_first` | with `recover`: ask it before every first execution too, not only after an unknown outcome, so an effect a restored journal (or an expired record) does not know of is recorded instead of made again; costs one `recover` per first execution |
/// | `recover_settle = "30s"` | with `recover`: how long a write takes to show in what it reads (a search index, a replica); it is asked no sooner than that after the outcome became unknown |
/// | `compensate = path` | `async fn(&EffectCtx, &Args, &Output) -> Result<(), Error>`: undo it (required for `compensable`) |
/// | `approval = "role"`, `when = \|a\| bool` | the call waits for a person's approval (when the condition holds) |
/// | `approval_ttl = "2h"` | how long a person's approval stays valid (default 24h); a call after it parks again |
/// | `timeout = "30s"` | longest execution; past it the outcome is unknown |
/// | `retry(max_attempts = 5, base_delay = "100ms", max_delay = "10s")` | retry limits within what the class allows |
/// | `name = "..."` | the name the model sees (default: the function's name) |
/// | `description = "..."` | what the model reads (default: the doc comment; one of the two is required) |
/// | `to_model = path` or `to_model = \|o\| ...` | `fn(&Output) -> ModelOutput`: what the model reads of an output (a summary, an image, a redacted form); the journal keeps and replays the whole output, and every result the model reads, executed or replayed, goes through it |
/// | `strict_input` | fail when a key is recorded under different arguments |
/// | `shared_keys` | the keys are shared by every principal calling the tool (over authenticated MCP, each principal's keys are otherwise its own) |
/// | `transactional` | the effect is a write to the database that holds the journal (SQLite, PostgreSQL), made in the journal's own transaction (`ctx.transaction::<SqliteTransaction>()`, `::<PgTransaction>()`): its writes and its record commit together, exactly once, never in doubt |
/// | `one_write` | idempotent tools only: a call whose key the journal has no record of runs before any journal write, and its record is its one write (inserted if the key still has none; a record another process wrote meanwhile wins and is replayed). Nothing shows in flight while it runs, and an identical call in another process runs too, with the same key (an identical call in this process still joins it); an unknown outcome is still recorded in doubt. Not with `approval`, `recover`, `transactional` or `stream` (each needs the claim) |
/// | `stream` | the function returns `impl Stream<Item = Result<Output, Error>>` (or `Result<impl Stream<..>, Error>`, when a set-up may fail first): each item is progress (`RunContext::with_progress`; over MCP, `notifications/progress` to a client that sent a `progressToken`), the last is the output that is recorded; no item at all is a definitive failure. A replay returns the recorded last item and reports no progress. Not with `transactional` |
/// | `strict` | `cargo test` fails, with the reasons, if the arguments' schema cannot be sent with OpenAI's `"strict": true` (a generated `#[cfg(test)]` test) |
/// | `open_world = true \| false` | the MCP `openWorldHint` |
/// | `crate = "path"` | where effect-tool is, for crates that re-export it |
///
/// Durations are a number and a unit, units `ms`, `s`, `m`, `h`, `d`, combinable: `"1h30m"`.
///
/// # Arguments
///
/// Every parameter except the context and `#[secret]` ones becomes a field of the argument
/// schema. A parameter of type `&EffectCtx` (anywhere in the list, at most once) is injected by
/// the runtime and is not part of the schema. Doc comments on parameters become the fields'
/// descriptions; `#[serde(...)]` and `#[schemars(...)]` attributes are copied onto the field, and
/// keys follow them: `key(field)` reads the field under its serialized name (`rename`), as
/// serialized (`with`, `default`); `alias` is accepted when decoding. `key(field)` on a
/// `flatten`, `skip` or `skip_serializing_if` field does not compile (the key could not tell
/// calls apart).
///
/// # Protected values: two kinds, never confused
///
/// | | `#[secret] smtp: SmtpPassword` | `#[sensitive] card_number: String` |
/// |---|---|---|
/// | who supplies it | the application | the model |
/// | in the schema / the model's context | never | yes (the model must send it) |
/// | the journal, `effect-tool show`, keys | never | never (left out by its serialized name, renames followed) |
/// | fingerprints, approvals | never | bound, not shown: the journaled input holds a keyed digest in its place (`{"$sensitive": "hmac-sha256:..."}`, HMAC under the journal's secret), so an approver sees that the field was given, and the approval is for that value only: a call that changes it parks again |
/// | logs and error texts | never | never (an argument error quotes it as `[sensitive]`) |
/// | how the tool gets it | from the run, by type: `RunContext::with_value(SmtpPassword(..))` | in the arguments |
/// | missing | `EffectError::MissingValue` before anything runs | the model's call is rejected |
/// | `recover` | the hook reads `ctx.value::<SmtpPassword>()` | in `args` (the call's own arguments) |
/// | `compensate` (`abandon_run`) | the run passed to `abandon_run` must hold it again; the hook reads `ctx.value::<T>()` | not in the journal: on a compensable tool it must be an `Option` (`None` in `compensate`) or `#[serde(default)]` (the default), else a compile error |
///
/// A `#[secret]` parameter has a type of its own (a newtype, not a bare `String`: values are
/// found by type) and is taken by value (cloned from the run) or by reference (`&T`). Values the
/// application holds can also live in the `#[tools]` value (`&self`). A `#[sensitive]` field
/// cannot be part of a key, nor `flatten`ed.
///
/// Before this release `#[secret]` meant what `#[sensitive]` means now (the model supplied the
/// value, and so saw it); such a declaration with a `String` no longer compiles, and the error
/// says which to choose.
///
/// # What is generated
///
/// For `async fn issue_refund(...)`:
/// - the function, unchanged and callable as written;
/// - `IssueRefundArgs`: a struct with one public field per argument (serde + schemars + Clone,
///   unknown fields rejected), with the function's visibility;
/// - `IssueRefund`: a unit struct (the function's name in PascalCase) implementing
///   `effect_tool::Tool`, with `Output`/`Error` the `Ok`/`Err` types of the return type, with
///   the function's visibility.
///
/// Both take the function's visibility: a `pub async fn` makes them `pub`, so its argument,
/// output and error types must be `pub` too (else rustc's "private type `...` in public
/// interface": make the type `pub`, or the function private).
///
/// The names are the function's name in PascalCase, and that plus `Args`; pick the function's
/// name so they do not clash with your own items.
///
/// # Compile-time checks
///
/// A declaration with no effect, an unknown class or key (with the nearest valid one
/// suggested), a duplicate key, `compensable` without `compensate`, `pure` with a key or hooks,
/// `when` without `approval`, a key closure that does not type-check or reads a `#[secret]` or
/// `#[sensitive]` argument, a key field that is not an argument, an argument type without
/// serde/schemars impls, a non-async function, a bad duration, `#[secret]` on the context or a
/// context not taken by reference does not compile; every error of one declaration is reported
/// in one build.
///
/// # Team rules
///
/// A crate states its own rules once, in its `Cargo.toml`, and every `#[tool]` and `#[tools]`
/// method of the crate is checked against them when it compiles:
///
/// ```toml
/// [package.metadata.effect-tool.rules]
/// irreversible-needs-approval-or-recover = true  # an irreversible tool names `approval` or `recover`
/// idempotent-needs-key = true                    # an idempotent tool says which arguments make its key
/// cross-run-needs-custom-key = true              # `window = "cross-run"` only with `key = |a| ...`
/// non-pure-needs-timeout = true                  # every tool with an effect has a `timeout`
/// approval-roles = ["finance", "support"]        # the roles `approval = "..."` may name
/// ```
///
/// A rule not stated is off. A declaration that breaks one does not compile; the error points
/// at the declaration and its `help:` says what to write, which rule asks for it and where the
/// rule is stated. A misspelt rule, a value of the wrong type or an empty list of roles is an
/// error at every declaration, never ignored. The rules of a crate apply to that crate only,
/// never to its dependencies.
///
/// `EFFECT_TOOL_RULES=path/to/rules.toml` (the same keys, at the file's top level; a relative
/// path is read from the crate's directory) replaces the manifest's table for the crates cargo
/// was asked to build, not their dependencies: for a crate's trybuild tests of its rules (see
/// [`assert_declared!`]) or to try stricter rules in CI. Cargo compiles the declarations again
/// when the manifest, the rules file or the variable changes.
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
    let mut func = ast::ToolFn::parse(&cx, item.attrs.clone(), item.vis.clone(), &item.sig, ast::Mode::Free);
    valid::check(&cx, &attrs, &func);
    let team = rules::Team::load();
    rules::check(&cx, &team, &attrs, &func);
    expand::allow_key_only(&mut func, &attrs);
    let block = item.body;
    let original = expand::original(&func, &block);
    let sound = func.sound;
    let mut out = match cx.check() {
        Ok(()) => {
            let mut out = original;
            out.extend(expand::tool(&func, &attrs, &expand::Target::Free));
            out
        }
        Err(errors) => fallback::emit(errors, original, &func, attrs, &expand::Target::Free),
    };
    // Items at the module's level: only where the tool's items are emitted too (a `#[tool]`
    // on a method outside `#[tools]` expands inside an impl block; it does not compile anyway).
    if sound {
        out.extend(team.tracking());
    }
    out.into()
}

/// Declare tools as methods of a value that holds clients or state.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use effect_tool::{EffectCtx, Tool, ToolError, tools};
///
/// pub struct Payments {
///     next_id: AtomicU64, // stands for a client, a connection pool, ...
/// }
///
/// #[tools]
/// impl Payments {
///     /// Refund part of an order.
///     #[tool(effect = "idempotent", key(order_id, amount_cents), recover = find_refund)]
///     pub async fn refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<u64, ToolError> {
///         let _key = ctx.idempotency_key();
///         Ok(self.next_id.fetch_add(1, Ordering::SeqCst))
///     }
///
///     /// A `&self` method of the same block, used as the `recover` hook.
///     async fn find_refund(&self, _ctx: &EffectCtx, _args: &PaymentsRefundArgs) -> Result<Option<u64>, ToolError> {
///         Ok(None)
///     }
/// }
///
/// let payments = Arc::new(Payments { next_id: AtomicU64::new(1) });
/// let tool = payments.refund_tool(); // or PaymentsRefund::new(payments.clone())
/// assert_eq!(PaymentsRefund::NAME, "refund");
/// # let _ = tool;
/// ```
///
/// Every `#[tool(...)]` method (taking `&self`) gets, beside the method itself (unchanged):
/// - `<Type><Method>Args` (e.g. `PaymentsRefundArgs`), the argument struct;
/// - `<Type><Method>` (e.g. `PaymentsRefund`), the tool type, holding an `Arc<Type>`, built
///   with `PaymentsRefund::new(arc)`;
/// - `Type::<method>_tool(self: &Arc<Self>)` (e.g. `payments.refund_tool()`).
///
/// All three take the method's visibility: a `pub async fn refund` gives a `pub` tool type,
/// args struct and `refund_tool()`, a private method private ones (usable in the module of the
/// impl block only). So the argument and output types of a `pub` tool method must be `pub`
/// too: the tool type's `Tool` impl names them, and a private one there is rustc's error
/// "private type `...` in public interface". Make that type `pub`, or the method private
/// (`async fn refund`) if the tool is only used in its own module. The value type itself (here
/// `Payments`) may be less visible than its methods.
///
/// In `recover = name` and `compensate = name`, a single name that is a `&self` method of the
/// same impl block is called as that method (`self.name(ctx, args)`); any other path is called
/// as a function. `Self` in argument and return types means the impl's type.
#[proc_macro_attribute]
pub fn tools(args: TokenStream, input: TokenStream) -> TokenStream {
    tools::expand(args.into(), input.into()).into()
}

/// Pin reviewed declarations: the build fails when a tool's declaration no longer matches
/// what was pinned.
///
/// ```
/// use effect_tool::{ToolError, assert_declared, tool};
///
/// /// Charge a card.
/// #[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
/// async fn send_payment(invoice_id: String, amount_cents: u64) -> Result<String, ToolError> {
///     Ok(format!("paid {invoice_id}: {amount_cents}"))
/// }
///
/// /// Refund part of an order.
/// #[tool(effect = "idempotent", key = |a| format!("refund:{}", a.order_id), window = "cross-run")]
/// async fn issue_refund(order_id: String) -> Result<String, ToolError> {
///     Ok(order_id)
/// }
///
/// assert_declared! {
///     SendPayment: irreversible, approval = "finance", key(invoice_id);
///     IssueRefund: idempotent, key = |a| format!("refund:{}", a.order_id), window = "cross-run";
/// }
/// ```
///
/// A pin is the tool type, `:`, the class, then any of: `approval = "role"`, `recover`,
/// `compensate` (the hook is declared), `key(field, ...)` (the fields, by serialized name, in
/// order), `key = |a| ...` (the key closure, as the manifest prints it), `window = "..."`.
/// What a pin does not name is not checked. Pins are separated by `;`.
///
/// When `send_payment` becomes `effect = "idempotent"`, or loses its approval, the build fails
/// at the pin, with the pin and the declaration as it is now:
///
/// ```text
/// error[E0080]: evaluation panicked: `SendPayment` no longer matches its pin: pinned
///     `irreversible, approval = "finance"`, declared `idempotent, no approval` now. If the
///     change was reviewed, update the pin; if not, restore the declaration
/// ```
///
/// Keep the pins in a file of their own (`tests/pins.rs`, or a module under `#[cfg(test)]`)
/// so that changing one is a line a reviewer sees. The comparison is done in constants: a pin
/// costs nothing at run time.
///
/// # Your own compile-fail tests
///
/// A team's rules (see [`macro@tool`], "Team rules") and pins are compile errors, so test
/// them as this project tests its own: with [trybuild](https://docs.rs/trybuild), a
/// `tests/ui/*.rs` file per declaration that must not compile, and the `.stderr` it must print
/// beside it.
///
/// ```toml
/// [dev-dependencies]
/// trybuild = "1"
/// ```
///
/// ```ignore
/// // tests/rules.rs
/// #[test]
/// fn declarations_our_rules_refuse() {
///     // trybuild builds the cases in a crate of its own, whose Cargo.toml it writes: name the
///     // rules for it (the same keys as `[package.metadata.effect-tool.rules]`, at the top level).
///     let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ui/rules.toml");
///     // SAFETY: the only test of this binary; trybuild's cargo inherits the variable.
///     unsafe { std::env::set_var("EFFECT_TOOL_RULES", rules) };
///     let t = trybuild::TestCases::new();
///     t.compile_fail("tests/ui/*.rs"); // e.g. an irreversible tool with no approval
///     t.pass("tests/ui/pass/*.rs"); // the declarations the rules accept, and the pins
/// }
/// ```
///
/// Run it once with `TRYBUILD=overwrite` to write the `.stderr` files, read each, and commit
/// them.
#[proc_macro]
pub fn assert_declared(input: TokenStream) -> TokenStream {
    pin::expand(input.into()).into()
}

/// Fail the build when two of the listed tool types have the same name.
///
/// ```
/// use effect_tool::{ToolError, tool, unique_tool_names};
///
/// /// Refund an order.
/// #[tool(effect = "idempotent")]
/// async fn refund(order_id: String) -> Result<String, ToolError> {
///     Ok(order_id)
/// }
///
/// mod v2 {
///     /// Refund an order, the new way.
///     #[effect_tool::tool(effect = "idempotent", name = "refund_v2")]
///     pub async fn refund(order_id: String) -> Result<String, effect_tool::ToolError> {
///         Ok(order_id)
///     }
/// }
///
/// unique_tool_names!(Refund, v2::Refund); // without `name = "refund_v2"`: a compile error
/// ```
///
/// Every pair of names is compared in a constant, so a clash is a compile error naming both
/// types. (A `Toolkit` also rejects a duplicate when the tool is added, at run time;
/// [`toolkit!`] does both.)
#[proc_macro]
pub fn unique_tool_names(input: TokenStream) -> TokenStream {
    let parser = Punctuated::<syn::Type, syn::Token![,]>::parse_terminated;
    let types = match syn::parse::Parser::parse(parser, input) {
        Ok(t) => t,
        Err(e) => return e.to_compile_error().into(),
    };
    let types: Vec<&syn::Type> = types.iter().collect();
    unique_names_check(&types).into()
}

/// Build a toolkit from tool types, checking at compile time that their names are unique.
///
/// ```
/// use std::sync::Arc;
///
/// use effect_tool::{ToolError, tool, toolkit, tools};
///
/// /// Look up an order.
/// #[tool(effect = "pure")]
/// async fn lookup_order(order_id: String) -> Result<String, ToolError> {
///     Ok(order_id)
/// }
///
/// pub struct Payments;
///
/// #[tools]
/// impl Payments {
///     /// Charge an invoice.
///     #[tool(effect = "irreversible", key(invoice))]
///     pub async fn charge(&self, invoice: String) -> Result<String, ToolError> {
///         Ok(invoice)
///     }
/// }
///
/// let payments = Arc::new(Payments);
/// let toolkit = toolkit![
///     LookupOrder,                                 // a `#[tool]` fn's unit struct
///     PaymentsCharge = payments.charge_tool(),     // a tool that holds a value
/// ];
/// assert_eq!(toolkit.names(), ["lookup_order", "charge"]);
/// ```
///
/// Each entry is a tool type, used as its own value (the unit structs `#[tool]` generates for
/// free functions), or `Type = expression` for tools that hold state (`#[tools]` methods). The
/// result is a `Toolkit` with the tools in the order written; two tools with the same name are
/// a compile error naming both types.
#[proc_macro]
pub fn toolkit(input: TokenStream) -> TokenStream {
    struct Entry {
        ty: syn::Type,
        value: Option<syn::Expr>,
    }
    impl syn::parse::Parse for Entry {
        fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
            let ty: syn::Type = input.parse()?;
            let value = if input.peek(syn::Token![=]) {
                input.parse::<syn::Token![=]>()?;
                Some(input.parse()?)
            } else {
                None
            };
            Ok(Entry { ty, value })
        }
    }
    let parser = Punctuated::<Entry, syn::Token![,]>::parse_terminated;
    let entries = match syn::parse::Parser::parse(parser, input) {
        Ok(t) => t,
        Err(e) => return e.to_compile_error().into(),
    };
    let types: Vec<&syn::Type> = entries.iter().map(|e| &e.ty).collect();
    let check = unique_names_check(&types);
    let p = expand::private_root();
    let adds = entries.iter().map(|e| {
        let ty = &e.ty;
        match &e.value {
            Some(value) => quote_spanned!(value.span()=> .with::<#ty>(#value)),
            None => quote_spanned!(ty.span()=> .with::<#ty>(#ty)),
        }
    });
    quote! {
        {
            #check
            #p::Toolkit::new() #(#adds)*
        }
    }
    .into()
}

/// A constant that fails when two of `types` have the same `Tool::NAME`.
fn unique_names_check(types: &[&syn::Type]) -> proc_macro2::TokenStream {
    let p = expand::private_root();
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
}
