//! Rules between the keys of `#[tool(...)]` and between the keys and the function: what makes a
//! declaration unsafe or meaningless. Each rule reports at the key that breaks it, with a `help:`
//! line that says what to write.

use proc_macro2::Span;
use quote::ToTokens;

use crate::ast::ToolFn;
use crate::attr::{Class, KeySpec, ToolAttrs};
use crate::ctxt::Ctxt;
use crate::symbol;
use crate::unraw::unraw;

pub fn check(cx: &Ctxt, attrs: &ToolAttrs, func: &ToolFn) {
    let class = match &attrs.effect {
        Some(effect) => Some(effect.value),
        None => {
            // An unknown class was already reported where it was written.
            if !cx_reported_effect(attrs) {
                cx.error(
                    attrs.span.unwrap_or_else(Span::call_site),
                    format!("tool `{}` declares no effect class", func.ident),
                    "say what running it twice does: `#[tool(effect = \"pure\" | \"idempotent\" | \"compensable\" | \"irreversible\")]`",
                );
            }
            None
        }
    };

    if func.docs.trim().is_empty() && attrs.description.is_none() && !attrs.rejected.contains(&symbol::DESCRIPTION) {
        cx.error(
            func.ident.span(),
            format!("tool `{}` has no description: the model reads it to decide when to call the tool", func.ident),
            "write a doc comment on the function, e.g. `/// Refund part of an order.`, or give it as `#[tool(description = \"...\")]`",
        );
    }

    if let Some(Class::Pure) = class {
        let pure_help = |key: &str| {
            format!(
                "remove `{key}`: a pure tool changes nothing, so it is not journaled; if it has an effect, declare `effect = \"idempotent\"` (or compensable/irreversible)"
            )
        };
        let pure_key = |span: Option<Span>, key: &str| {
            if let Some(span) = span {
                cx.error(span, format!("a pure tool takes no `{key}`"), pure_help(key));
            }
        };
        pure_key(attrs.key.as_ref().map(|s| s.key), symbol::KEY);
        pure_key(attrs.recover.as_ref().map(|s| s.key), symbol::RECOVER);
        pure_key(attrs.compensate.as_ref().map(|s| s.key), symbol::COMPENSATE);
        pure_key(attrs.approval.as_ref().map(|s| s.key), symbol::APPROVAL);
        pure_key(attrs.approval_ttl.as_ref().map(|s| s.key), symbol::APPROVAL_TTL);
        pure_key(attrs.window.as_ref().map(|s| s.key), symbol::WINDOW);
        pure_key(attrs.ttl.as_ref().map(|s| s.key), symbol::TTL);
        pure_key(attrs.strict_input.as_ref().map(|s| s.key), symbol::STRICT_INPUT);
        pure_key(attrs.shared_keys.as_ref().map(|s| s.key), symbol::SHARED_KEYS);
        pure_key(attrs.transactional.as_ref().map(|s| s.key), symbol::TRANSACTIONAL);
        pure_key(attrs.recover_first.as_ref().map(|s| s.key), symbol::RECOVER_FIRST);
        pure_key(attrs.recover_settle.as_ref().map(|s| s.key), symbol::RECOVER_SETTLE);
        pure_key(attrs.one_write.as_ref().map(|s| s.key), symbol::ONE_WRITE);
    }
    if class != Some(Class::Pure) {
        recover_options(cx, attrs, func);
        one_write_rules(cx, attrs, class, func);
    }
    stream_rules(cx, attrs, func);

    if let (Some(tx), Some(_)) = (&attrs.transactional, &attrs.approval) {
        cx.error(
            tx.key,
            "a `transactional` tool cannot wait for `approval`: a call parked for a person would wait outside the journal's transaction",
            "remove `approval` (the transaction already makes the call exactly once), or remove `transactional` and keep the approval",
        );
    }

    if let (Some(Class::Compensable), None, Some(effect)) = (class, &attrs.compensate, &attrs.effect)
        && !attrs.rejected.contains(&symbol::COMPENSATE)
    {
        cx.error(
            effect.span,
            format!("compensable tool `{}` declares no `compensate`", func.ident),
            "name the function that undoes it: `compensate = undo_it` with `async fn undo_it(ctx: &EffectCtx, args: &Args, output: &Output) -> Result<(), Error>`; or, if it cannot be undone, declare `effect = \"irreversible\"`",
        );
    }
    if let (Some(Class::Idempotent | Class::Irreversible), Some(comp)) = (class, &attrs.compensate) {
        cx.error(
            comp.key,
            format!(
                "`compensate` is only run for compensable tools, and this one is {}",
                class.map_or("", Class::as_str)
            ),
            "declare `effect = \"compensable\"` if the effect can be undone, or remove `compensate`",
        );
    }

    if let (Some(when), None) = (&attrs.when, &attrs.approval) {
        cx.error(
            when.key,
            "`when` without `approval`: nobody is named to approve",
            "add the approving role: `approval = \"finance\", when = |a| ...`",
        );
    }

    if let (Some(ttl), None, false) = (&attrs.approval_ttl, &attrs.approval, class == Some(Class::Pure)) {
        cx.error(
            ttl.key,
            "`approval_ttl` without `approval`: there is no approval to expire",
            "add the approving role: `approval = \"finance\", approval_ttl = \"2h\"`, or remove `approval_ttl`",
        );
    }
    if let Some(cost) = &attrs.cost {
        for c in &cost.value {
            closure_arity(cx, &c.closure, &format!("cost({})", c.unit), "|a| a.amount_cents");
        }
    }

    if let Some(key) = &attrs.key {
        match &key.value {
            KeySpec::Closure(closure) => {
                closure_arity(cx, closure, "key", "|a| format!(\"refund:{}\", a.order_id)");
                let sensitive: Vec<String> = func
                    .args
                    .iter()
                    .filter(|a| a.sensitive.is_some())
                    .map(|a| unraw(&a.ident))
                    .collect();
                for (name, span) in field_reads(closure.body.to_token_stream(), &sensitive) {
                    cx.error(
                        span,
                        format!("the key reads `{name}`, which is `#[sensitive]`: keys are stored in the journal and shown to operators"),
                        "make the key from the arguments that identify the effect, not from sensitive ones",
                    );
                }
                if !sensitive.is_empty() {
                    key_reads_fields_only(cx, closure, func);
                }
                let injected: Vec<String> = func.injected.iter().map(|a| unraw(&a.ident)).collect();
                for (name, span) in field_reads(closure.body.to_token_stream(), &injected) {
                    cx.error(
                        span,
                        format!("the key reads `{name}`, which is `#[secret]`: it is taken from the run, it is not an argument, and keys are stored and shown to operators"),
                        "make the key from the arguments that identify the effect",
                    );
                }
            }
            KeySpec::Fields(fields) => {
                let names: Vec<String> = func.args.iter().map(|a| unraw(&a.ident)).collect();
                let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut seen: Vec<String> = Vec::new();
                for field in fields {
                    let f = unraw(field);
                    if seen.contains(&f) {
                        cx.error(
                            field.span(),
                            format!("`{f}` is listed twice in `key(...)`"),
                            "list each argument once",
                        );
                        continue;
                    }
                    seen.push(f.clone());
                    if func.injected.iter().any(|a| unraw(&a.ident) == f) {
                        cx.error(
                            field.span(),
                            format!("`{f}` is `#[secret]` and cannot be part of the key: it is taken from the run, not sent by the model, and keys are stored and shown to operators"),
                            "key on the arguments that identify the effect",
                        );
                        continue;
                    }
                    match func.args.iter().find(|a| unraw(&a.ident) == f) {
                        None => {
                            let help = match symbol::nearest(&f, &name_refs) {
                                Some(near) => format!("did you mean `{near}`? The arguments are {}", symbol::list(&name_refs)),
                                None if name_refs.is_empty() => "this tool takes no arguments: remove `key(...)`".to_owned(),
                                None => format!("the arguments are {}", symbol::list(&name_refs)),
                            };
                            cx.error(field.span(), format!("`key` names `{f}`, which is not an argument of `{}`", func.ident), help);
                        }
                        Some(arg) if arg.sensitive.is_some() => cx.error(
                            field.span(),
                            format!("`{f}` is `#[sensitive]` and cannot be part of the key: keys are stored and shown to operators"),
                            "key on the arguments that identify the effect, not on sensitive ones",
                        ),
                        Some(arg) => key_field_serde(cx, &f, arg),
                    }
                }
            }
        }
    }
    for arg in &func.args {
        let name = unraw(&arg.ident);
        if let (Some(_), Some(flatten)) = (arg.sensitive, arg.serde.flatten) {
            cx.error(
                flatten,
                format!("`{name}` is `#[sensitive]` and `#[serde(flatten)]`: its fields are merged into the input under their own names, so they cannot be kept out of the journal"),
                format!("remove `#[serde(flatten)]` from `{name}`, or take the sensitive fields as arguments of their own, each `#[sensitive]`"),
            );
        }
        // The journal does not keep it, and `compensate` decodes the recorded arguments.
        if let (Some(Class::Compensable), Some(span), None) = (class, arg.sensitive, arg.serde.default)
            && !is_option(&arg.ty)
        {
            cx.error(
                span,
                format!("`{name}` is `#[sensitive]`, so the journal does not keep it, and `compensate` of this compensable tool receives the recorded arguments: it would have no value for `{name}`"),
                format!("say what `compensate` sees instead: `#[serde(default)] {name}` (the default value) or `{name}: Option<...>` (`None`); or, if the application holds the value, take it from the run with `#[secret]`"),
            );
        }
    }
    if let Some(when) = &attrs.when {
        closure_arity(cx, &when.value, "when", "|a| a.amount_cents > 10_000");
    }

    if let Some(retry) = &attrs.retry
        && let (Some(base), Some(max)) = (retry.value.base_delay, retry.value.max_delay)
        && base > max
    {
        cx.error(
            retry.value.base_delay_span.unwrap_or(retry.span),
            "`base_delay` is longer than `max_delay`",
            "make `max_delay` at least `base_delay`: it caps every delay between attempts",
        );
    }
}

/// `recover_first` and `recover_settle` say when the `recover` hook is asked: without one there
/// is nothing to ask.
fn recover_options(cx: &Ctxt, attrs: &ToolAttrs, func: &ToolFn) {
    if attrs.recover.is_some() || attrs.rejected.contains(&symbol::RECOVER) {
        return;
    }
    if let Some(first) = &attrs.recover_first {
        cx.error(
            first.key,
            format!("`recover_first` without `recover`: tool `{}` has no hook to ask before its first execution", func.ident),
            "name the function that looks the effect up in the remote system: `recover = find_it, recover_first` with `async fn find_it(ctx: &EffectCtx, args: &Args) -> Result<Option<Output>, Error>`; or remove `recover_first`",
        );
    }
    if let Some(settle) = &attrs.recover_settle {
        cx.error(
            settle.key,
            format!("`recover_settle` without `recover`: tool `{}` has no hook to wait for", func.ident),
            "name the function that looks the effect up in the remote system: `recover = find_it, recover_settle = \"30s\"`; or remove `recover_settle`",
        );
    }
}

/// `one_write` runs a call before any journal write: only an idempotent call may go unclaimed,
/// and only one that nothing else needs a claim for (a person's approval, `recover`, the
/// journal's transaction, a stream's progress).
fn one_write_rules(cx: &Ctxt, attrs: &ToolAttrs, class: Option<Class>, func: &ToolFn) {
    let Some(one_write) = &attrs.one_write else { return };
    let at = one_write.key;
    if let Some(class @ (Class::Compensable | Class::Irreversible)) = class {
        cx.error(
            at,
            format!(
                "`one_write` is only for idempotent tools, and `{}` is {}: with no claim in the journal while a call runs, an identical call in another process would run the effect again",
                func.ident,
                class.as_str()
            ),
            "remove `one_write`: the claim written before the call runs is what keeps another process from making the effect a second time",
        );
        return;
    }
    if let Some(approval) = &attrs.approval {
        cx.error(
            at,
            "a `one_write` tool cannot wait for `approval`: a person's decision needs the claim that parks the call, and a `one_write` call writes nothing before it runs",
            format!(
                "remove `one_write` (calls are then claimed before they run, so one that needs approval can wait for `{}`), or remove `approval`",
                approval.value
            ),
        );
    }
    if attrs.recover.is_some() {
        cx.error(
            at,
            "`one_write` with `recover`: `recover` is asked about a claimed call whose outcome is unknown, and a `one_write` call runs without a claim",
            "remove `one_write` to keep the hook (each call is then claimed before it runs), or remove `recover` (an idempotent call whose outcome is unknown then runs again with the same key)",
        );
    }
    if attrs.transactional.is_some() {
        cx.error(
            at,
            "`one_write` with `transactional`: the journal's transaction already makes the claim and the record one commit",
            "remove `one_write`: a `transactional` call writes the journal once already, and is never in doubt",
        );
    }
    if attrs.stream.is_some() {
        cx.error(
            at,
            "a `stream` tool cannot be `one_write`: its progress would be shown while the journal knows nothing of the call, and the output recorded may be another process's, not the run the progress came from",
            "remove `one_write` (each call is then claimed, and shows in flight while it streams), or remove `stream` and return one output",
        );
    }
}

/// `stream` needs a return type written as a stream, a stream needs `stream`, and a stream's
/// progress cannot be told from inside the journal's transaction.
fn stream_rules(cx: &Ctxt, attrs: &ToolAttrs, func: &ToolFn) {
    let Some(ret) = &func.ret else { return };
    let streams = crate::stream::is_stream(ret);
    match (&attrs.stream, streams) {
        (Some(_), false) => cx.error_spanned(
            ret,
            format!("`{}` is a `stream` tool and does not return a stream: its items are the progress, the last one the output", func.ident),
            "write `-> impl Stream<Item = Result<Step, ToolError>>` (the items as written there are recorded), or `-> Result<impl Stream<Item = Result<Step, ToolError>>, ToolError>` when the set-up can fail first; or remove `stream` for a tool that returns one output",
        ),
        (None, true) => cx.error_spanned(
            ret,
            format!("`{}` returns a stream, and a tool records one output", func.ident),
            "add `stream` to `#[tool(...)]`: each item is then reported as progress and the last one recorded as the output (what a replay returns)",
        ),
        _ => {}
    }
    if let (Some(stream), Some(_)) = (&attrs.stream, &attrs.transactional) {
        cx.error(
            stream.key,
            "a `transactional` tool cannot be a `stream`: its progress would tell the caller of writes that the journal's transaction can still roll back",
            "remove `stream` and return the last value (the transaction makes the call exactly once), or remove `transactional` and keep the progress",
        );
    }
}

/// A `key(...)` field is looked up by its serialized name in the serialized input: serde
/// attributes that take it out of that input, or merge it into it, cannot be keyed on.
fn key_field_serde(cx: &Ctxt, name: &str, arg: &crate::ast::Arg) {
    let closure_help = format!(
        "make the key with a closure, which reads the value itself: `key = |a| format!(\"...:{{}}\", a.{name})`"
    );
    if let Some(span) = arg.serde.flatten {
        cx.error(
            span,
            format!("`key({name})` names a flattened argument: its fields are merged into the input, so it has no value of its own to key on"),
            format!("remove `#[serde(flatten)]` from `{name}`, or {closure_help}"),
        );
    }
    if let Some(span) = arg.serde.skip_if {
        cx.error(
            span,
            format!("`key({name})` names an argument that `skip_serializing_if` sometimes leaves out of the input: calls that differ in it would share one key"),
            format!("remove `skip_serializing_if` from `{name}`, or {closure_help}"),
        );
    }
    if let Some(span) = arg.serde.skip {
        cx.error(
            span,
            format!("`key({name})` names an argument that is never serialized: every call would have the same key"),
            format!("remove the `skip` from `{name}`, or key on other arguments"),
        );
    }
}

/// The key closure of a tool with `#[sensitive]` arguments must show which fields it reads:
/// its parameter may only appear as `a.field` (a field read, not a method call), so that
/// [`field_reads`] sees every field the key depends on. Anything else (`helper(a)`, `&a`,
/// `a.clone()`, `format!("{a}")`, a destructuring pattern) hands the whole arguments, sensitive
/// fields included, to code the macro cannot read, and is refused. This is a rule about the
/// tokens, and it is sound: the parameter is the only way the closure can reach the arguments.
fn key_reads_fields_only(cx: &Ctxt, closure: &syn::ExprClosure, func: &ToolFn) {
    let Some(first) = closure.inputs.first() else { return };
    let sensitive: Vec<String> = func
        .args
        .iter()
        .filter(|a| a.sensitive.is_some())
        .map(|a| unraw(&a.ident))
        .collect();
    let which = match sensitive.as_slice() {
        [one] => format!("the `#[sensitive]` argument `{one}`"),
        many => format!(
            "the `#[sensitive]` arguments {}",
            symbol::list(&many.iter().map(String::as_str).collect::<Vec<_>>())
        ),
    };
    // A field the key may read, for the examples.
    let field = func
        .args
        .iter()
        .find(|a| a.sensitive.is_none())
        .map_or_else(|| "id".to_owned(), |a| unraw(&a.ident));
    let pat = match first {
        syn::Pat::Type(t) => &*t.pat,
        other => other,
    };
    let param = match pat {
        syn::Pat::Wild(_) => return,
        syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.to_string(),
        other => {
            cx.error_spanned(
                other,
                format!("the key closure destructures the arguments: this tool has {which}, which must never reach a key, and the macro can only check fields read by name (`a.{field}`)"),
                format!("take the arguments as one name and read the fields the key is made of: `key = |a| format!(\"...:{{}}\", a.{field})`"),
            );
            return;
        }
    };
    for span in whole_uses(closure.body.to_token_stream(), &param) {
        cx.error(
            span,
            format!("the key closure uses `{param}` whole, so the key could depend on {which}, which must never reach a key (keys are stored in the journal and shown to operators); the macro can only check fields read by name (`{param}.{field}`)"),
            format!("read the fields the key is made of: `key = |{param}| format!(\"...:{{}}\", {param}.{field})`; a helper takes those fields, not `{param}`: `key = |{param}| make_key(&{param}.{field})`"),
        );
    }
}

/// The spans where the closure parameter `param` is used other than as `param.field` (a field
/// read): passed on, borrowed, a method called on it, or named in a format string (`"{a}"`).
fn whole_uses(tokens: proc_macro2::TokenStream, param: &str) -> Vec<Span> {
    use proc_macro2::{Spacing, TokenTree};
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let is_punct = |t: Option<&TokenTree>, c: char| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c);
    let mut found = Vec::new();
    for (i, tt) in tokens.iter().enumerate() {
        match tt {
            TokenTree::Group(g) => found.extend(whole_uses(g.stream(), param)),
            TokenTree::Literal(lit) => {
                // Inline format arguments: `format!("{a}")`, `"{a:?}"`.
                let text = lit.to_string();
                if text.contains(&format!("{{{param}}}")) || text.contains(&format!("{{{param}:")) {
                    found.push(lit.span());
                }
            }
            TokenTree::Ident(ident) if ident == param => {
                // `x.a` (a field of something else), `path::a` and a lifetime `'a` are not the
                // parameter; `..a` (a range) and `S { f: a }` are.
                let prev = i.checked_sub(1).and_then(|j| tokens.get(j));
                let joint_before = |c: char| matches!(i.checked_sub(2).and_then(|j| tokens.get(j)), Some(TokenTree::Punct(p)) if p.as_char() == c && p.spacing() == Spacing::Joint);
                if (is_punct(prev, '.') && !joint_before('.'))
                    || (is_punct(prev, ':') && joint_before(':'))
                    || is_punct(prev, '\'')
                {
                    continue;
                }
                let dot = matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '.' && p.spacing() == Spacing::Alone);
                let field = matches!(tokens.get(i + 2), Some(TokenTree::Ident(_)));
                let call = matches!(tokens.get(i + 3), Some(TokenTree::Group(g)) if g.delimiter() == proc_macro2::Delimiter::Parenthesis)
                    || is_punct(tokens.get(i + 3), ':');
                if !(dot && field && !call) {
                    found.push(ident.span());
                }
            }
            _ => {}
        }
    }
    found
}

/// Every `.name` in `tokens` where `name` is one of `names` (field reads of secret arguments).
pub fn field_reads(tokens: proc_macro2::TokenStream, names: &[String]) -> Vec<(String, Span)> {
    use proc_macro2::TokenTree;
    let mut found = Vec::new();
    if names.is_empty() {
        return found;
    }
    let mut after_dot = false;
    for tt in tokens {
        match tt {
            TokenTree::Punct(p) => after_dot = p.as_char() == '.',
            TokenTree::Ident(ident) => {
                let s = unraw(&ident);
                if after_dot && names.contains(&s) {
                    found.push((s, ident.span()));
                }
                after_dot = false;
            }
            TokenTree::Group(g) => {
                found.extend(field_reads(g.stream(), names));
                after_dot = false;
            }
            TokenTree::Literal(_) => after_dot = false,
        }
    }
    found
}

fn cx_reported_effect(attrs: &ToolAttrs) -> bool {
    attrs.rejected.contains(&symbol::EFFECT)
}

fn closure_arity(cx: &Ctxt, closure: &syn::ExprClosure, key: &str, example: &str) {
    if closure.inputs.len() != 1 {
        cx.error_spanned(
            &closure.inputs,
            format!(
                "the `{key}` closure takes one parameter, the tool's arguments (it has {})",
                closure.inputs.len()
            ),
            format!("write `{key} = {example}`"),
        );
    }
    if let Some(a) = &closure.asyncness {
        cx.error(
            a.span,
            format!("the `{key}` closure cannot be async"),
            format!("write `{key} = {example}`"),
        );
    }
}

/// Whether a type is written `Option<..>` (serde decodes a missing field as `None`).
fn is_option(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Option"))
}
