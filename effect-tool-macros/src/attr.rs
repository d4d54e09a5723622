//! Parsing the arguments of `#[tool(...)]`: one setter per key, duplicates and unknown keys
//! reported (with the nearest valid key), values checked for their own shape. Rules between
//! keys are `valid.rs`'s job.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Expr, ExprClosure, Ident, LitBool, LitInt, LitStr, Path, Token};

use crate::ctxt::Ctxt;
use crate::duration::parse_duration;
use crate::symbol::{self, *};

/// A value with the span of the key that set it and the span of the value itself.
pub struct Set<T> {
    /// The key as written (`effect`, `key`, ...): where "this key conflicts" errors point.
    pub key: Span,
    /// The value: where "this value is wrong" errors point.
    pub span: Span,
    pub value: T,
}

/// The effect class as written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Pure,
    Idempotent,
    Compensable,
    Irreversible,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Pure => "pure",
            Class::Idempotent => "idempotent",
            Class::Compensable => "compensable",
            Class::Irreversible => "irreversible",
        }
    }
}

/// How the key is made.
pub enum KeySpec {
    /// `key = |a| expr`.
    Closure(Box<ExprClosure>),
    /// `key(field, ...)`.
    Fields(Vec<Ident>),
}

/// What the model reads of the output: `to_model = path` or `to_model = |o| ...`.
pub enum ViewSpec {
    /// A function `fn(&Output) -> ModelOutput`.
    Path(Path),
    /// A closure over the output.
    Closure(Box<ExprClosure>),
}

/// `retry(...)`.
#[derive(Default)]
pub struct Retry {
    /// Where `base_delay` was written (for "longer than max_delay").
    pub base_delay_span: Option<Span>,
    pub max_attempts: Option<u32>,
    pub base_delay: Option<u64>,
    pub max_delay: Option<u64>,
}

/// One cost of `cost(unit = |a| ..., ...)`: the unit's name (a run's spend budget) and the
/// closure that computes what a call costs in it.
pub struct Cost {
    pub unit: Ident,
    pub closure: Box<ExprClosure>,
}

/// Everything `#[tool(...)]` can say. Missing keys are `None`; defaults are applied in
/// `expand.rs`.
#[derive(Default)]
pub struct ToolAttrs {
    pub effect: Option<Set<Class>>,
    pub key: Option<Set<KeySpec>>,
    pub window: Option<Set<&'static str>>,
    pub ttl: Option<Set<u64>>,
    pub recover: Option<Set<Path>>,
    /// `recover_first`: ask `recover` before every first execution, not only after an unknown
    /// outcome (`Tool::RECOVER_FIRST`).
    pub recover_first: Option<Set<()>>,
    /// `recover_settle = "30s"`: how long a write takes to show in what `recover` reads, in
    /// milliseconds (`Tool::RECOVER_SETTLE`).
    pub recover_settle: Option<Set<u64>>,
    pub compensate: Option<Set<Path>>,
    pub approval: Option<Set<String>>,
    /// `approval_ttl = "2h"`: how long a person's approval stays valid, in milliseconds.
    pub approval_ttl: Option<Set<u64>>,
    pub when: Option<Set<Box<ExprClosure>>>,
    pub timeout: Option<Set<u64>>,
    pub retry: Option<Set<Retry>>,
    pub cost: Option<Set<Vec<Cost>>>,
    pub name: Option<Set<String>>,
    pub description: Option<Set<String>>,
    pub to_model: Option<Set<ViewSpec>>,
    pub strict_input: Option<Set<()>>,
    pub strict: Option<Set<()>>,
    pub shared_keys: Option<Set<()>>,
    pub transactional: Option<Set<()>>,
    /// `one_write`: an idempotent call runs before any journal write, its record the one
    /// write (`Tool::ONE_WRITE`).
    pub one_write: Option<Set<()>>,
    /// `stream`: the function returns a stream of progress values, the last one the output.
    pub stream: Option<Set<()>>,
    pub open_world: Option<Set<bool>>,
    pub krate: Option<Set<Path>>,
    /// Keys written with a value that was rejected (already reported): rules about a missing
    /// key do not fire for them.
    pub rejected: Vec<&'static str>,
    /// Where "no effect" errors point: the attribute's arguments, or the call site when empty.
    pub span: Option<Span>,
}

impl ToolAttrs {
    /// Parse the tokens inside `#[tool(...)]`, reporting every problem into `cx`.
    pub fn parse(cx: &Ctxt, tokens: TokenStream) -> ToolAttrs {
        let mut attrs = ToolAttrs {
            span: if tokens.is_empty() { None } else { Some(tokens.span()) },
            ..ToolAttrs::default()
        };
        let parser = syn::meta::parser(|meta| attrs.parse_one(cx, meta));
        if let Err(err) = parser.parse2(tokens) {
            cx.syn_error(err);
        }
        attrs
    }

    /// One `key = value` (or `key(...)`, or a flag) of the attribute: the key's own parser, or
    /// an error naming the nearest key.
    fn parse_one(&mut self, cx: &Ctxt, meta: ParseNestedMeta) -> syn::Result<()> {
        let Some(ident) = meta.path.get_ident().cloned() else {
            cx.error_spanned(
                &meta.path,
                "expected a key of `#[tool(...)]`, found a path",
                format!("the keys are {}", symbol::list(KEYS)),
            );
            return skip_value(&meta);
        };
        let key = ident.span();
        match ident.to_string().as_str() {
            EFFECT => self.parse_effect(cx, &meta, key),
            KEY => self.parse_key(cx, &meta, key),
            WINDOW => self.parse_window(cx, &meta, key),
            TTL => self.parse_duration_key(cx, &meta, key, TTL),
            TIMEOUT => self.parse_duration_key(cx, &meta, key, TIMEOUT),
            APPROVAL_TTL => self.parse_duration_key(cx, &meta, key, APPROVAL_TTL),
            RECOVER_SETTLE => self.parse_duration_key(cx, &meta, key, RECOVER_SETTLE),
            RECOVER_FIRST => parse_flag(
                cx,
                &meta,
                &mut self.recover_first,
                key,
                RECOVER_FIRST,
                "write `recover_first` to ask `recover` before every first execution (a restored journal then records an effect that exists instead of making it again)",
            ),
            STREAM => parse_flag(
                cx,
                &meta,
                &mut self.stream,
                key,
                STREAM,
                "write `stream` on a tool that returns `impl Stream<Item = Result<Output, Error>>`: each item is progress, the last one the output",
            ),
            RECOVER => self.parse_hook(cx, &meta, key, RECOVER),
            COMPENSATE => self.parse_hook(cx, &meta, key, COMPENSATE),
            APPROVAL => self.parse_approval(cx, &meta, key),
            WHEN => self.parse_when(cx, &meta, key),
            RETRY => self.parse_retry(cx, &meta, key),
            COST => self.parse_cost(cx, &meta, key),
            NAME => self.parse_name(cx, &meta, key),
            DESCRIPTION => self.parse_description(cx, &meta, key),
            TO_MODEL => self.parse_to_model(cx, &meta, key),
            STRICT_INPUT => parse_flag(
                cx,
                &meta,
                &mut self.strict_input,
                key,
                STRICT_INPUT,
                "write `strict_input` to fail a call whose key is recorded under different arguments",
            ),
            STRICT => parse_flag(
                cx,
                &meta,
                &mut self.strict,
                key,
                STRICT,
                "write `strict` to make a schema that cannot be sent with OpenAI's `\"strict\": true` fail `cargo test`",
            ),
            SHARED_KEYS => parse_flag(
                cx,
                &meta,
                &mut self.shared_keys,
                key,
                SHARED_KEYS,
                "write `shared_keys` to share the tool's keys across the principals calling it (over authenticated MCP, each principal's keys are its own otherwise)",
            ),
            TRANSACTIONAL => parse_flag(
                cx,
                &meta,
                &mut self.transactional,
                key,
                TRANSACTIONAL,
                "write `transactional` to run the tool's database writes in the journal's own transaction (`ctx.transaction::<SqliteTransaction>()` or `PgTransaction`)",
            ),
            ONE_WRITE => parse_flag(
                cx,
                &meta,
                &mut self.one_write,
                key,
                ONE_WRITE,
                "write `one_write` to run an idempotent call before any journal write, its record the one write",
            ),
            OPEN_WORLD => {
                let lit: LitBool = meta.value()?.parse()?;
                set(cx, &mut self.open_world, key, lit.span(), lit.value, OPEN_WORLD);
                Ok(())
            }
            CRATE => self.parse_crate(cx, &meta, key),
            SECRET => {
                cx.error(
                    key,
                    "`secret` marks an argument, not the tool",
                    "put `#[secret]` on the argument: `async fn login(#[secret] password: String)`",
                );
                skip_value(&meta)
            }
            other => {
                let help = match symbol::nearest(other, KEYS) {
                    Some(near) => format!("did you mean `{near}`? The keys are {}", symbol::list(KEYS)),
                    None => format!("the keys are {}", symbol::list(KEYS)),
                };
                cx.error(key, format!("unknown key `{other}` in `#[tool(...)]`"), help);
                skip_value(&meta)
            }
        }
    }

    /// The string literal of `name = "..."`, or `None` (reported, and `name` marked rejected so
    /// rules about a missing key stay quiet).
    fn string_of(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, name: &'static str) -> syn::Result<Option<LitStr>> {
        let lit = string_value(cx, meta.value()?, name)?;
        if lit.is_none() {
            self.rejected.push(name);
        }
        Ok(lit)
    }

    /// `effect = "pure" | "idempotent" | "compensable" | "irreversible"`.
    fn parse_effect(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, EFFECT)? else {
            return Ok(());
        };
        let value = lit.value();
        let class = match value.as_str() {
            "pure" => Some(Class::Pure),
            "idempotent" => Some(Class::Idempotent),
            "compensable" => Some(Class::Compensable),
            "irreversible" => Some(Class::Irreversible),
            _ => None,
        };
        match class {
            Some(class) => set(cx, &mut self.effect, key, lit.span(), class, EFFECT),
            None => {
                self.rejected.push(EFFECT);
                let help = match symbol::nearest(&value, CLASSES) {
                    Some(near) => format!("did you mean `effect = \"{near}\"`? The classes are {}", classes()),
                    None => format!("the classes are {}", classes()),
                };
                cx.error(lit.span(), format!("unknown effect class `{value}`"), help);
            }
        }
        Ok(())
    }

    /// `key(field, ...)` or `key = |a| expr`.
    fn parse_key(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        if meta.input.peek(syn::token::Paren) {
            let fields = key_fields(cx, meta, key)?;
            let span = meta.input.span();
            set(cx, &mut self.key, key, span, KeySpec::Fields(fields), KEY);
            return Ok(());
        }
        match meta.value()?.parse::<Expr>()? {
            Expr::Closure(closure) => {
                let span = closure.span();
                set(cx, &mut self.key, key, span, KeySpec::Closure(Box::new(closure)), KEY)
            }
            other => {
                self.rejected.push(KEY);
                cx.error_spanned(
                    &other,
                    "`key` takes a closure over the arguments",
                    "write `key = |a| format!(\"refund:{}\", a.order_id)` or list fields: `key(order_id, amount_cents)`",
                );
            }
        }
        Ok(())
    }

    /// `window = "run" | "thread" | "cross-run"`.
    fn parse_window(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, WINDOW)? else {
            return Ok(());
        };
        let value = lit.value();
        match WINDOWS.iter().find(|w| **w == value) {
            Some(w) => set(cx, &mut self.window, key, lit.span(), *w, WINDOW),
            None => {
                let help = match symbol::nearest(&value, WINDOWS) {
                    Some(near) => format!("did you mean `window = \"{near}\"`? The windows are {}", windows()),
                    None => format!("the windows are {}", windows()),
                };
                cx.error(lit.span(), format!("unknown key window `{value}`"), help);
            }
        }
        Ok(())
    }

    /// `ttl = "24h"`, `approval_ttl = "2h"`, `recover_settle = "30s"` or `timeout = "30s"`.
    fn parse_duration_key(
        &mut self,
        cx: &Ctxt,
        meta: &ParseNestedMeta,
        key: Span,
        name: &'static str,
    ) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, name)? else {
            return Ok(());
        };
        match duration(cx, &lit, name) {
            Some(ms) => {
                let slot = match name {
                    TTL => &mut self.ttl,
                    APPROVAL_TTL => &mut self.approval_ttl,
                    RECOVER_SETTLE => &mut self.recover_settle,
                    _ => &mut self.timeout,
                };
                set(cx, slot, key, lit.span(), ms, name);
            }
            None => self.rejected.push(name),
        }
        Ok(())
    }

    /// `recover = path` or `compensate = path` (a string literal holding the path is accepted
    /// too, as serde does for its paths).
    fn parse_hook(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span, name: &'static str) -> syn::Result<()> {
        let value = meta.value()?;
        let path = if value.peek(LitStr) {
            let lit: LitStr = value.parse()?;
            lit.parse::<Path>()?
        } else {
            match parse_path_value(value, name)? {
                Ok(path) => path,
                Err(err) => {
                    cx.syn_error(err);
                    self.rejected.push(name);
                    return Ok(());
                }
            }
        };
        let span = path.span();
        let slot = if name == RECOVER {
            &mut self.recover
        } else {
            &mut self.compensate
        };
        set(cx, slot, key, span, path, name);
        Ok(())
    }

    /// `approval = "role"`.
    fn parse_approval(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, APPROVAL)? else {
            return Ok(());
        };
        if lit.value().trim().is_empty() {
            self.rejected.push(APPROVAL);
            cx.error(
                lit.span(),
                "`approval` names no role",
                "name who approves, e.g. `approval = \"finance\"`",
            );
        } else {
            set(cx, &mut self.approval, key, lit.span(), lit.value(), APPROVAL);
        }
        Ok(())
    }

    /// `when = |a| bool`.
    fn parse_when(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        match meta.value()?.parse::<Expr>()? {
            Expr::Closure(closure) => {
                let span = closure.span();
                set(cx, &mut self.when, key, span, Box::new(closure), WHEN)
            }
            other => cx.error_spanned(
                &other,
                "`when` takes a closure over the arguments that returns a bool",
                "write `when = |a| a.amount_cents > 10_000`",
            ),
        }
        Ok(())
    }

    /// `retry(max_attempts = 5, base_delay = "100ms", max_delay = "10s")`.
    fn parse_retry(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        if !meta.input.peek(syn::token::Paren) {
            cx.error(
                key,
                "`retry` takes a list of limits",
                "write `retry(max_attempts = 5, base_delay = \"200ms\", max_delay = \"30s\")`",
            );
            return skip_value(meta);
        }
        let span = meta.input.span();
        let mut retry = Retry::default();
        let mut seen: Vec<String> = Vec::new();
        meta.parse_nested_meta(|inner| retry.parse_limit(cx, inner, &mut seen))?;
        set(cx, &mut self.retry, key, span, retry, RETRY);
        Ok(())
    }

    /// `cost(unit = |a| ..., ...)`: what a call costs in each unit (a run's spend budget). A
    /// cost without a unit (`cost = |a| ...`) is refused: no budget could be matched to it.
    fn parse_cost(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        if !meta.input.peek(syn::token::Paren) {
            self.rejected.push(COST);
            cx.error(
                key,
                "`cost` names the budget it spends: a cost without a unit matches no budget of the run",
                "write `cost(refund_cents = |a| a.amount_cents)` and give the run `Budgets::new().spend(\"refund_cents\", 25_000)`",
            );
            return skip_value(meta);
        }
        let span = meta.input.span();
        let mut costs: Vec<Cost> = Vec::new();
        meta.parse_nested_meta(|inner| {
            let Some(unit) = inner.path.get_ident().cloned() else {
                cx.error_spanned(
                    &inner.path,
                    "expected the name of a unit, found a path",
                    "write `cost(refund_cents = |a| a.amount_cents)`",
                );
                return skip_value(&inner);
            };
            match inner.value()?.parse::<Expr>()? {
                Expr::Closure(closure) => {
                    if costs.iter().any(|c| c.unit == unit) {
                        cx.error(
                            unit.span(),
                            format!("the cost in `{unit}` is declared twice"),
                            "declare each unit once: `cost(refund_cents = |a| ..., refunds = |_| 1)`",
                        );
                    } else {
                        costs.push(Cost {
                            unit,
                            closure: Box::new(closure),
                        });
                    }
                }
                other => cx.error_spanned(
                    &other,
                    format!("the cost in `{unit}` takes a closure over the arguments"),
                    format!("write `cost({unit} = |a| a.amount_cents)`"),
                ),
            }
            Ok(())
        })?;
        if costs.is_empty() {
            self.rejected.push(COST);
            return Ok(());
        }
        set(cx, &mut self.cost, key, span, costs, COST);
        Ok(())
    }

    /// `name = "..."`: what providers accept as a tool name.
    fn parse_name(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, NAME)? else {
            return Ok(());
        };
        let value = lit.value();
        let valid = !value.is_empty()
            && value.len() <= 64
            && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if valid {
            set(cx, &mut self.name, key, lit.span(), value, NAME);
        } else {
            cx.error(
                lit.span(),
                format!("`{value}` cannot be a tool name: providers accept 1 to 64 of a-z, A-Z, 0-9, `_` and `-`"),
                "write a name such as `name = \"issue_refund\"`",
            );
        }
        Ok(())
    }

    /// `description = "..."`: not empty.
    fn parse_description(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, DESCRIPTION)? else {
            return Ok(());
        };
        if lit.value().trim().is_empty() {
            self.rejected.push(DESCRIPTION);
            cx.error(
                lit.span(),
                "`description` is empty: the model reads it to decide when to call the tool",
                "say what the tool does, e.g. `description = \"Refund part of an order.\"`",
            );
        } else {
            let text = lit.value().trim().to_owned();
            set(cx, &mut self.description, key, lit.span(), text, DESCRIPTION);
        }
        Ok(())
    }

    /// `to_model = path` (a string literal holding the path is accepted too) or
    /// `to_model = |output| ...`.
    fn parse_to_model(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let value = meta.value()?;
        let spec = if value.peek(LitStr) {
            let lit: LitStr = value.parse()?;
            match lit.parse::<Path>() {
                Ok(path) => ViewSpec::Path(path),
                Err(_) => {
                    self.rejected.push(TO_MODEL);
                    cx.error(
                        lit.span(),
                        format!("`{}` is not a path", lit.value()),
                        "name the view function: `to_model = summary`, defined as `fn summary(output: &Output) -> ModelOutput`",
                    );
                    return Ok(());
                }
            }
        } else {
            match value.parse::<Expr>()? {
                Expr::Path(p) if p.qself.is_none() => ViewSpec::Path(p.path),
                Expr::Closure(closure) => ViewSpec::Closure(Box::new(closure)),
                other => {
                    self.rejected.push(TO_MODEL);
                    cx.error_spanned(
                        &other,
                        "`to_model` takes the path of a function over the tool's output, or a closure",
                        "write `to_model = summary`, defined as `fn summary(output: &Output) -> effect_tool::ModelOutput`, or `to_model = |o| ModelOutput::text(...)`",
                    );
                    return Ok(());
                }
            }
        };
        let span = match &spec {
            ViewSpec::Path(p) => p.span(),
            ViewSpec::Closure(c) => c.span(),
        };
        set(cx, &mut self.to_model, key, span, spec, TO_MODEL);
        Ok(())
    }

    /// `crate = "path"`.
    fn parse_crate(&mut self, cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<()> {
        let Some(lit) = self.string_of(cx, meta, CRATE)? else {
            return Ok(());
        };
        match lit.parse::<Path>() {
            Ok(path) => set(cx, &mut self.krate, key, lit.span(), path, CRATE),
            Err(_) => cx.error(
                lit.span(),
                format!("`{}` is not a path", lit.value()),
                "name the crate that re-exports effect-tool, e.g. `crate = \"::my_sdk::effect_tool\"`",
            ),
        }
        Ok(())
    }
}

impl Retry {
    /// One limit of `retry(...)`, reported when given twice or unknown.
    fn parse_limit(&mut self, cx: &Ctxt, inner: ParseNestedMeta, seen: &mut Vec<String>) -> syn::Result<()> {
        let name = inner.path.get_ident().map(ToString::to_string).unwrap_or_default();
        if seen.contains(&name) {
            cx.error_spanned(
                &inner.path,
                format!("duplicate `{name}` in `retry(...)`"),
                "give each limit once",
            );
            return skip_value(&inner);
        }
        seen.push(name.clone());
        match name.as_str() {
            MAX_ATTEMPTS => {
                let lit: LitInt = inner.value()?.parse()?;
                match lit.base10_parse::<u32>() {
                    Ok(0) | Err(_) => cx.error(
                        lit.span(),
                        "`max_attempts` must be a whole number of at least 1 (the first execution counts)",
                        "write `max_attempts = 1` to never retry, `max_attempts = 5` for four retries",
                    ),
                    Ok(n) => self.max_attempts = Some(n),
                }
            }
            BASE_DELAY | MAX_DELAY => {
                let key = if name == BASE_DELAY { BASE_DELAY } else { MAX_DELAY };
                let Some(lit) = string_value(cx, inner.value()?, key)? else {
                    return Ok(());
                };
                if let Some(ms) = duration(cx, &lit, &name) {
                    if name == BASE_DELAY {
                        self.base_delay_span = Some(lit.span());
                        self.base_delay = Some(ms);
                    } else {
                        self.max_delay = Some(ms);
                    }
                }
            }
            _ => {
                let help = match symbol::nearest(&name, RETRY_KEYS) {
                    Some(near) => format!("did you mean `{near}`? `retry(...)` takes {}", symbol::list(RETRY_KEYS)),
                    None => format!("`retry(...)` takes {}", symbol::list(RETRY_KEYS)),
                };
                cx.error_spanned(&inner.path, format!("unknown retry limit `{name}`"), help);
                return skip_value(&inner);
            }
        }
        Ok(())
    }
}

/// The argument names of `key(field, ...)`.
fn key_fields(cx: &Ctxt, meta: &ParseNestedMeta, key: Span) -> syn::Result<Vec<Ident>> {
    let mut fields = Vec::new();
    meta.parse_nested_meta(|field| {
        match field.path.get_ident() {
            Some(ident) if field.input.is_empty() || field.input.peek(Token![,]) => fields.push(ident.clone()),
            _ => cx.error_spanned(
                &field.path,
                "`key(...)` lists argument names",
                "write the names of the arguments the key is made of: `key(order_id, amount_cents)`",
            ),
        }
        skip_value(&field)
    })?;
    if fields.is_empty() {
        cx.error(
            key,
            "`key()` lists no argument",
            "name the arguments the key is made of, `key(order_id)`, or remove `key` for the default key (a hash of every argument)",
        );
    }
    Ok(fields)
}

/// A flag (`strict_input`, `strict`, `shared_keys`, `transactional`, `one_write`, `stream`,
/// `recover_first`): no value.
fn parse_flag(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    slot: &mut Option<Set<()>>,
    key: Span,
    name: &'static str,
    help: &str,
) -> syn::Result<()> {
    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        cx.error(key, format!("`{name}` is a flag and takes no value"), help);
        return skip_value(meta);
    }
    set(cx, slot, key, key, (), name);
    Ok(())
}

/// The string literal after `key =`. Anything else (`timeout = 30`, `effect = idempotent`) is
/// reported with the quoted form to write, and `None` is returned (parsing goes on).
fn string_value(cx: &Ctxt, input: ParseStream, key: &'static str) -> syn::Result<Option<LitStr>> {
    let expr: Expr = input.parse()?;
    if let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Str(lit),
        ..
    }) = &expr
    {
        return Ok(Some(lit.clone()));
    }
    let written = quote::ToTokens::to_token_stream(&expr).to_string().replace(' ', "");
    let quoted = match key {
        EFFECT => symbol::nearest(&written, CLASSES).unwrap_or("idempotent").to_owned(),
        WINDOW => symbol::nearest(&written, WINDOWS).unwrap_or("run").to_owned(),
        TTL | APPROVAL_TTL | RECOVER_SETTLE | TIMEOUT | BASE_DELAY | MAX_DELAY => match &expr {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(n), ..
            }) if n.suffix().is_empty() => format!("{}s", n.base10_digits()),
            _ if parse_duration(&written).is_ok() => written,
            _ => match key {
                TTL => "24h",
                APPROVAL_TTL => "2h",
                _ => "30s",
            }
            .to_owned(),
        },
        _ => written,
    };
    let note = match key {
        TTL | APPROVAL_TTL | RECOVER_SETTLE | TIMEOUT | BASE_DELAY | MAX_DELAY => {
            " (a number and a unit: ms, s, m, h, d)"
        }
        EFFECT => " (one of `pure`, `idempotent`, `compensable`, `irreversible`)",
        _ => "",
    };
    cx.error_spanned(
        &expr,
        format!("`{key}` takes a string literal"),
        format!("write it quoted: `{key} = \"{quoted}\"`{note}"),
    );
    Ok(None)
}

/// Store a value, reporting a duplicate key at its second occurrence.
fn set<T>(cx: &Ctxt, slot: &mut Option<Set<T>>, key: Span, span: Span, value: T, name: &str) {
    if slot.is_some() {
        cx.error(key, format!("duplicate key `{name}`"), format!("give `{name}` once"));
    } else {
        *slot = Some(Set { key, span, value });
    }
}

/// Skip whatever value follows an unknown or rejected key, so parsing goes on to the next key
/// and every problem is reported in one build.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let value = meta.value()?;
        value.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _: TokenStream = meta.input.step(|cursor| match cursor.token_tree() {
            Some((tt, rest)) => Ok((tt.into(), rest)),
            None => Err(cursor.error("expected a parenthesized list")),
        })?;
    }
    Ok(())
}

/// A path value such as `recover = check_refund` (a closure or call is a mistake we explain).
/// The outer `Result` is a syntax error (parsing stops); the inner one a value of the wrong shape
/// (reported, parsing goes on).
fn parse_path_value(input: ParseStream, key: &str) -> syn::Result<syn::Result<Path>> {
    let expr: Expr = input.parse()?;
    Ok(match expr {
        Expr::Path(p) if p.qself.is_none() => Ok(p.path),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "`{key}` takes the path of an async function\nhelp: write `{key} = {}` and define it as {}",
                if key == RECOVER {
                    "check_refund"
                } else {
                    "undo_reservation"
                },
                if key == RECOVER {
                    "`async fn check_refund(ctx: &EffectCtx, args: &IssueRefundArgs) -> Result<Option<Output>, Error>`"
                } else {
                    "`async fn undo_reservation(ctx: &EffectCtx, args: &ReserveArgs, output: &Output) -> Result<(), Error>`"
                }
            ),
        )),
    })
}

fn classes() -> String {
    symbol::list(CLASSES)
}

fn windows() -> String {
    symbol::list(WINDOWS)
}

/// The duration the user probably meant: spaces removed, long unit names shortened
/// (`"30 sec"` → `"30s"`, `"1 day"` → `"1d"`), if that parses.
fn suggest_duration(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| -> Option<()> {
        if !word.is_empty() {
            let unit = match word.to_ascii_lowercase().as_str() {
                "ms" | "msec" | "msecs" | "millis" | "millisecond" | "milliseconds" => "ms",
                "s" | "sec" | "secs" | "second" | "seconds" => "s",
                "m" | "min" | "mins" | "minute" | "minutes" => "m",
                "h" | "hr" | "hrs" | "hour" | "hours" => "h",
                "d" | "day" | "days" => "d",
                _ => return None,
            };
            out.push_str(unit);
            word.clear();
        }
        Some(())
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            flush(&mut word, &mut out)?;
            out.push(c);
        } else if c.is_ascii_alphabetic() {
            word.push(c);
        } else if !c.is_whitespace() {
            return None;
        }
    }
    flush(&mut word, &mut out)?;
    (out != text && parse_duration(&out).is_ok()).then_some(out)
}

fn duration(cx: &Ctxt, lit: &LitStr, key: &str) -> Option<u64> {
    match parse_duration(&lit.value()) {
        Ok(0) => {
            cx.error(
                lit.span(),
                format!("`{key}` must be longer than zero"),
                format!("write a positive duration such as `{key} = \"30s\"`, or remove `{key}`"),
            );
            None
        }
        Ok(ms) => Some(ms),
        Err(why) => {
            let units = "write a number and a unit, e.g. \"500ms\", \"30s\", \"5m\", \"24h\", \"7d\" or \"1h30m\" (units: ms, s, m, h, d)";
            let help = match suggest_duration(&lit.value()) {
                Some(fixed) => format!("did you mean `{key} = \"{fixed}\"`? {units}"),
                None => units.to_owned(),
            };
            cx.error(
                lit.span(),
                format!("invalid duration `{}` for `{key}`: {why}", lit.value()),
                help,
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::duration::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("24h"), Ok(86_400_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("30 sec").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert_eq!(super::suggest_duration("30 sec").as_deref(), Some("30s"));
        assert_eq!(super::suggest_duration("1 day").as_deref(), Some("1d"));
        assert_eq!(super::suggest_duration("2 Hours 5 minutes").as_deref(), Some("2h5m"));
        assert_eq!(super::suggest_duration("30s"), None);
        assert_eq!(super::suggest_duration("24"), None);
    }
}
