//! The compile-time checks of `#[tool]` and `#[tools]`: what a declaration's types and hooks
//! must be. A declaration that does not fit is a compile error whose first line says what to
//! write; its `help:` and `note:` lines name the trait or function of this module that was not
//! satisfied, and each one's documentation below says what it asks for.
//!
//! You never implement or call these yourself: the code the macros generate does, and every
//! type or function of the right shape already satisfies them.
//!
//! | item | checks that | the error reads |
//! |---|---|---|
//! | [`ToolReturn`] | a tool function returns a `Result` | "a tool function must return `Result<Output, Error>`" |
//! | [`StreamError`] | a `stream` tool's error can say that the stream yielded nothing | "`E` cannot be the error of a `stream` tool" |
//! | [`ToolArg`], [`assert_tool_arg`] | an argument type has a JSON form and a schema | "`T` cannot be a tool argument" |
//! | [`ToolOutput`], [`assert_tool_output`] | an output type has a JSON form | "`T` cannot be a tool's output" |
//! | [`ToolOutputSchema`], [`assert_tool_output_schema`] | an output type has a JSON Schema | "`T` cannot be a tool's output: it has no JSON Schema" |
//! | [`RecoverHook`], [`RecoverMethod`] | `recover = ...` names a function (method) of the right shape | "`recover = ...` names a function that is not a recover hook of this tool" |
//! | [`CompensateHook`], [`CompensateMethod`] | `compensate = ...` names a function (method) of the right shape | "`compensate = ...` names a function that is not a compensation of this tool" |
//! | [`ToModelHook`] | `to_model = ...` names a function (or closure) of the right shape | "`to_model = ...` is not a view of this tool's output" |
//! | [`key_of`] | a `key = \|a\| ...` closure's value is `Display` | "`T` doesn't implement `std::fmt::Display`" |
//! | [`approval_when`] | a `when = \|a\| ...` closure returns `bool` | "mismatched types" |
//!
//! Their names and signatures are shown to you in errors, so they follow the crate's version;
//! anything else about them may change in any release.

use std::future::Future;

use effect_tool_core::EffectCtx;

/// The return type of a tool function: a `Result`, whose `Ok` type becomes the tool's
/// [`Tool::Output`](crate::Tool::Output) and whose `Err` type its [`Tool::Error`](crate::Tool::Error).
///
/// Implemented for every `Result<T, E>`, so aliases such as `std::io::Result<T>` work too. A
/// tool function that returns anything else is a compile error naming this trait: write its
/// return type as `Result<YourOutput, YourError>`.
#[diagnostic::on_unimplemented(
    message = "a tool function must return `Result<Output, Error>`, not `{Self}`",
    label = "this is not a `Result`",
    note = "write the return type as `Result<YourOutput, YourError>` (the error type says whether a failure is definitive, transient or unknown: see `ClassifyError`); `effect_tool::hooks::ToolReturn` documents this check"
)]
pub trait ToolReturn {
    /// The `Ok` type.
    type Output;
    /// The `Err` type.
    type Error;
    /// The value as a `Result`.
    fn into_result(self) -> ::core::result::Result<Self::Output, Self::Error>;
}

impl<T, E> ToolReturn for ::core::result::Result<T, E> {
    type Output = T;
    type Error = E;
    #[inline]
    fn into_result(self) -> ::core::result::Result<T, E> {
        self
    }
}

/// The error type of a `#[tool(stream)]` function: it can say that the stream ended without a
/// value, so there is no output to record (a definitive failure: running it again with the
/// same arguments would yield nothing again).
///
/// Implemented for every type that is `From<ToolError>`, [`ToolError`](effect_tool_core::ToolError)
/// itself among them; the value is a definitive [`ToolError`](effect_tool_core::ToolError) that
/// names the tool and says its stream ended without a value, converted. Another error type is a
/// compile error naming this trait: implement `From<effect_tool::ToolError>` for it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error of a `stream` tool: it cannot say that the stream ended without a value",
    label = "this error type has no `From<ToolError>`",
    note = "implement `From<effect_tool::ToolError>` for `{Self}` (a stream that yields nothing fails definitively with a `ToolError::definitive(..)`), or use `ToolError`; `effect_tool::hooks::StreamError` documents this check"
)]
pub trait StreamError: Sized {
    /// The error of a stream of tool `tool` that ended without a value.
    fn empty_stream(tool: &str) -> Self;
}

impl<E: From<effect_tool_core::ToolError>> StreamError for E {
    fn empty_stream(tool: &str) -> Self {
        E::from(effect_tool_core::ToolError::definitive(format!(
            "tool `{tool}`'s stream ended without a value, so there is no output to record; make the stream yield at least one item (its last item is the output)"
        )))
    }
}

/// A type a tool can take as an argument: it decodes from the model's JSON, encodes to JSON for
/// the journal, has a JSON Schema for the model, and is `Clone`.
///
/// Implemented for every type that is `Clone`, serde's `Serialize` and `Deserialize`, and
/// schemars' `JsonSchema`. An argument type without them is a compile error naming this trait:
/// derive them on the type (`#[derive(Clone, serde::Serialize, serde::Deserialize,
/// schemars::JsonSchema)]`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool argument: it needs `Clone`, serde's `Serialize` and `Deserialize` and schemars' `JsonSchema`",
    label = "this argument type has no JSON form",
    note = "derive them on your type: `#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]`, or pass a type that has them (String, u64, Vec<T>, ...); `effect_tool::hooks::ToolArg` documents this check"
)]
pub trait ToolArg {}

impl<T> ToolArg for T where
    T: ::core::clone::Clone + ::serde::Serialize + ::serde::de::DeserializeOwned + ::schemars::JsonSchema
{
}

/// Compiles only when `T` is a [`ToolArg`]. `#[tool]` calls it once per argument, at the
/// argument's type, so a missing impl is reported at that type.
pub const fn assert_tool_arg<T: ToolArg + ?Sized>() {}

/// A type a tool can return as its output: the journal records it as JSON and replays it, so it
/// encodes and decodes.
///
/// Implemented for every type that is serde's `Serialize` and `Deserialize`. An output type
/// without them is a compile error naming this trait: derive them on the type
/// (`#[derive(serde::Serialize, serde::Deserialize)]`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's output: it is recorded in the journal and replayed, so it needs `serde::Serialize` and `serde::Deserialize`",
    label = "this output type has no JSON form",
    note = "derive them on your type: `#[derive(serde::Serialize, serde::Deserialize)]`, or return a type that has them (String, u64, Vec<T>, ...); `effect_tool::hooks::ToolOutput` documents this check"
)]
pub trait ToolOutput {}

impl<T> ToolOutput for T where T: ::serde::Serialize + ::serde::de::DeserializeOwned {}

/// Compiles only when `T` is a [`ToolOutput`]. `#[tool]` calls it at the output type, so a
/// missing impl is reported at that type.
pub const fn assert_tool_output<T: ToolOutput + ?Sized>() {}

/// A type whose shape a tool's output can declare: schemars' `JsonSchema`, from which the
/// toolkit exports the tool's output schema (MCP `outputSchema`, checked against every
/// `structuredContent` the server sends), the manifest names the output's type and schema
/// digest, and outputs a person records by hand are checked.
///
/// Implemented for every type that is `JsonSchema`. `#[tool]` does not require it (a tool whose
/// output type has none compiles, as before output schemas, and declares no output shape); call
/// [`assert_tool_output_schema`] in a `const _: () = ...;` to require it of your own tools:
/// a type without it is then a compile error naming this trait.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's output: it has no JSON Schema, so the tool's output shape cannot be declared to MCP clients (`outputSchema`) or to review (the manifest)",
    label = "this output type has no JSON Schema",
    note = "derive it on your type: `#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]`, or return a type that has one (String, u64, Vec<T>, `serde_json::Value` for output of no fixed shape, ...); `effect_tool::hooks::ToolOutputSchema` documents this check"
)]
pub trait ToolOutputSchema {}

impl<T> ToolOutputSchema for T where T: ::schemars::JsonSchema + ?Sized {}

/// Compiles only when `T` is a [`ToolOutputSchema`]: `const _: () =
/// effect_tool::hooks::assert_tool_output_schema::<Receipt>();` makes a tool's output type
/// declare its shape.
pub const fn assert_tool_output_schema<T: ToolOutputSchema + ?Sized>() {}

/// The marker of the hook traits' impl for functions of the expected signature (the last type
/// parameter, `M`, of [`RecoverHook`] and the others). You never name it.
///
/// Each hook trait has a second impl, for [`NoHook`], that no type can use. With two candidate
/// impls the compiler reports a hook of the wrong shape as the hook trait not being implemented,
/// with the trait's message (the signature expected), instead of the raw mismatch of one
/// `FnOnce` bound.
pub struct HookFn;

/// The marker of the hook traits' second impl, which no type can use (see [`HookFn`]). You
/// never name it.
pub struct NoHook;

/// Implemented by no type: the bound of the hook traits' [`NoHook`] impls. You never name it.
pub trait Unconstructible {}

/// A function named by `recover = path`: `async fn(ctx: &EffectCtx, args: &Args) ->
/// Result<Option<Output>, Error>`, with the tool's own `Args` (the generated `<Tool>Args`
/// struct), `Output` and `Error` types.
///
/// After an unknown outcome (a crash or a timeout after sending), the engine calls it to ask the
/// remote system whether the effect already happened: `Ok(Some(output))` says it did (that
/// output is recorded and returned), `Ok(None)` that it did not. Implemented for every function
/// of that shape; a function of another shape is a compile error naming this trait and the
/// signature expected.
#[diagnostic::on_unimplemented(
    message = "`recover = ...` names a function that is not a recover hook of this tool",
    label = "expected `async fn(ctx: &EffectCtx, args: &{A}) -> Result<Option<{O}>, {E}>`",
    note = "a recover hook asks the remote system whether the effect already happened; define it as `async fn check(ctx: &EffectCtx, args: &{A}) -> Result<Option<{O}>, {E}>` (`Some(output)`: it did, and that output is recorded); `effect_tool::hooks::RecoverHook` documents this check"
)]
pub trait RecoverHook<'a, A: 'a, O, E, M = HookFn> {
    /// The future the hook returns.
    type Future: Future<Output = ::core::result::Result<::core::option::Option<O>, E>> + 'a;
    /// Call the hook.
    fn call_hook(self, ctx: &'a EffectCtx, args: &'a A) -> Self::Future;
}

impl<'a, A: 'a, O, E, F, Fut> RecoverHook<'a, A, O, E, HookFn> for F
where
    F: ::core::ops::FnOnce(&'a EffectCtx, &'a A) -> Fut,
    Fut: Future<Output = ::core::result::Result<::core::option::Option<O>, E>> + 'a,
{
    type Future = Fut;
    #[inline]
    fn call_hook(self, ctx: &'a EffectCtx, args: &'a A) -> Fut {
        self(ctx, args)
    }
}

impl<'a, A: 'a, O: 'a, E: 'a, F> RecoverHook<'a, A, O, E, NoHook> for F
where
    F: Unconstructible,
{
    type Future = ::core::future::Pending<::core::result::Result<::core::option::Option<O>, E>>;
    #[inline]
    fn call_hook(self, _ctx: &'a EffectCtx, _args: &'a A) -> Self::Future {
        ::core::future::pending()
    }
}

/// A method of the `#[tools]` block named by `recover = name`: `async fn(&self, ctx:
/// &EffectCtx, args: &Args) -> Result<Option<Output>, Error>`. What [`RecoverHook`] is for a
/// free function; a method of another shape is a compile error naming this trait and the
/// signature expected.
#[diagnostic::on_unimplemented(
    message = "`recover = ...` names a method that is not a recover hook of this tool",
    label = "expected `async fn(&self, ctx: &EffectCtx, args: &{A}) -> Result<Option<{O}>, {E}>`",
    note = "a recover hook asks the remote system whether the effect already happened; define it as `async fn check(&self, ctx: &EffectCtx, args: &{A}) -> Result<Option<{O}>, {E}>` (`Some(output)`: it did); `effect_tool::hooks::RecoverMethod` documents this check"
)]
pub trait RecoverMethod<'a, S: 'a, A: 'a, O, E, M = HookFn> {
    /// The future the hook returns.
    type Future: Future<Output = ::core::result::Result<::core::option::Option<O>, E>> + 'a;
    /// Call the hook.
    fn call_hook(self, this: &'a S, ctx: &'a EffectCtx, args: &'a A) -> Self::Future;
}

impl<'a, S: 'a, A: 'a, O, E, F, Fut> RecoverMethod<'a, S, A, O, E, HookFn> for F
where
    F: ::core::ops::FnOnce(&'a S, &'a EffectCtx, &'a A) -> Fut,
    Fut: Future<Output = ::core::result::Result<::core::option::Option<O>, E>> + 'a,
{
    type Future = Fut;
    #[inline]
    fn call_hook(self, this: &'a S, ctx: &'a EffectCtx, args: &'a A) -> Fut {
        self(this, ctx, args)
    }
}

impl<'a, S: 'a, A: 'a, O: 'a, E: 'a, F> RecoverMethod<'a, S, A, O, E, NoHook> for F
where
    F: Unconstructible,
{
    type Future = ::core::future::Pending<::core::result::Result<::core::option::Option<O>, E>>;
    #[inline]
    fn call_hook(self, _this: &'a S, _ctx: &'a EffectCtx, _args: &'a A) -> Self::Future {
        ::core::future::pending()
    }
}

/// A function named by `compensate = path`: `async fn(ctx: &EffectCtx, args: &Args, output:
/// &Output) -> Result<(), Error>`, with the tool's own `Args`, `Output` and `Error` types.
///
/// It undoes a completed effect of a compensable tool (`Engine::abandon_run`). Implemented for
/// every function of that shape; a function of another shape is a compile error naming this
/// trait and the signature expected.
#[diagnostic::on_unimplemented(
    message = "`compensate = ...` names a function that is not a compensation of this tool",
    label = "expected `async fn(ctx: &EffectCtx, args: &{A}, output: &{O}) -> Result<(), {E}>`",
    note = "a compensation undoes a completed effect; define it as `async fn undo(ctx: &EffectCtx, args: &{A}, output: &{O}) -> Result<(), {E}>`; `effect_tool::hooks::CompensateHook` documents this check"
)]
pub trait CompensateHook<'a, A: 'a, O: 'a, E, M = HookFn> {
    /// The future the hook returns.
    type Future: Future<Output = ::core::result::Result<(), E>> + 'a;
    /// Call the hook.
    fn call_hook(self, ctx: &'a EffectCtx, args: &'a A, output: &'a O) -> Self::Future;
}

impl<'a, A: 'a, O: 'a, E, F, Fut> CompensateHook<'a, A, O, E, HookFn> for F
where
    F: ::core::ops::FnOnce(&'a EffectCtx, &'a A, &'a O) -> Fut,
    Fut: Future<Output = ::core::result::Result<(), E>> + 'a,
{
    type Future = Fut;
    #[inline]
    fn call_hook(self, ctx: &'a EffectCtx, args: &'a A, output: &'a O) -> Fut {
        self(ctx, args, output)
    }
}

impl<'a, A: 'a, O: 'a, E: 'a, F> CompensateHook<'a, A, O, E, NoHook> for F
where
    F: Unconstructible,
{
    type Future = ::core::future::Pending<::core::result::Result<(), E>>;
    #[inline]
    fn call_hook(self, _ctx: &'a EffectCtx, _args: &'a A, _output: &'a O) -> Self::Future {
        ::core::future::pending()
    }
}

/// A method of the `#[tools]` block named by `compensate = name`: `async fn(&self, ctx:
/// &EffectCtx, args: &Args, output: &Output) -> Result<(), Error>`. What [`CompensateHook`] is
/// for a free function; a method of another shape is a compile error naming this trait and the
/// signature expected.
#[diagnostic::on_unimplemented(
    message = "`compensate = ...` names a method that is not a compensation of this tool",
    label = "expected `async fn(&self, ctx: &EffectCtx, args: &{A}, output: &{O}) -> Result<(), {E}>`",
    note = "a compensation undoes a completed effect; define it as `async fn undo(&self, ctx: &EffectCtx, args: &{A}, output: &{O}) -> Result<(), {E}>`; `effect_tool::hooks::CompensateMethod` documents this check"
)]
pub trait CompensateMethod<'a, S: 'a, A: 'a, O: 'a, E, M = HookFn> {
    /// The future the hook returns.
    type Future: Future<Output = ::core::result::Result<(), E>> + 'a;
    /// Call the hook.
    fn call_hook(self, this: &'a S, ctx: &'a EffectCtx, args: &'a A, output: &'a O) -> Self::Future;
}

impl<'a, S: 'a, A: 'a, O: 'a, E, F, Fut> CompensateMethod<'a, S, A, O, E, HookFn> for F
where
    F: ::core::ops::FnOnce(&'a S, &'a EffectCtx, &'a A, &'a O) -> Fut,
    Fut: Future<Output = ::core::result::Result<(), E>> + 'a,
{
    type Future = Fut;
    #[inline]
    fn call_hook(self, this: &'a S, ctx: &'a EffectCtx, args: &'a A, output: &'a O) -> Fut {
        self(this, ctx, args, output)
    }
}

impl<'a, S: 'a, A: 'a, O: 'a, E: 'a, F> CompensateMethod<'a, S, A, O, E, NoHook> for F
where
    F: Unconstructible,
{
    type Future = ::core::future::Pending<::core::result::Result<(), E>>;
    #[inline]
    fn call_hook(self, _this: &'a S, _ctx: &'a EffectCtx, _args: &'a A, _output: &'a O) -> Self::Future {
        ::core::future::pending()
    }
}

/// A function (or closure) named by `to_model = path`: `fn(output: &Output) -> ModelOutput`,
/// with the tool's own `Output` type. It makes what the model reads of an output (a summary, an
/// image, a form with fields left out: [`crate::ModelOutput`]); the journal keeps the whole
/// output. Implemented for every function of that shape; one of another shape is a compile
/// error naming this trait and the signature expected.
#[diagnostic::on_unimplemented(
    message = "`to_model = ...` is not a view of this tool's output",
    label = "expected `fn(output: &{O}) -> ModelOutput`",
    note = "a view makes what the model reads of an output; define it as `fn summary(output: &{O}) -> effect_tool::ModelOutput` (e.g. `ModelOutput::text(...)`, `ModelOutput::image(...)`); `effect_tool::hooks::ToModelHook` documents this check"
)]
pub trait ToModelHook<'a, O: 'a, M = HookFn> {
    /// Make the view.
    fn view(self, output: &'a O) -> effect_tool_core::ModelOutput;
}

impl<'a, O: 'a, F> ToModelHook<'a, O, HookFn> for F
where
    F: ::core::ops::FnOnce(&'a O) -> effect_tool_core::ModelOutput,
{
    #[inline]
    fn view(self, output: &'a O) -> effect_tool_core::ModelOutput {
        self(output)
    }
}

impl<'a, O: 'a, F> ToModelHook<'a, O, NoHook> for F
where
    F: Unconstructible,
{
    #[inline]
    fn view(self, _output: &'a O) -> effect_tool_core::ModelOutput {
        effect_tool_core::ModelOutput::text("")
    }
}

/// The effect key of a `key = |a| ...` closure: the closure's value, formatted with `Display`.
/// A closure whose value is not `Display` is a compile error naming this function: return a
/// `String` (`format!(...)`) or another `Display` value.
#[inline]
pub fn key_of<A, K: ::core::fmt::Display>(args: &A, key: impl FnOnce(&A) -> K) -> ::std::string::String {
    ::std::string::ToString::to_string(&key(args))
}

/// Evaluates a `cost(unit = |a| ...)` closure: what a call costs in `unit`, charged to the run's
/// spend budget of that unit ([`effect_tool_core::call::budget::Budgets::spend`]). A closure
/// whose value does not convert into a `u64` (a signed or floating number, a `String`) is a
/// compile error naming this function: return an unsigned integer (`a.amount_cents`, `1`).
#[inline]
pub fn cost_of<A, C: ::core::convert::Into<u64>>(args: &A, cost: impl FnOnce(&A) -> C) -> u64 {
    cost(args).into()
}

/// Evaluates a `when = |a| ...` approval condition: the call waits for a person's approval when
/// the closure returns `true`. A closure that does not return `bool` is a compile error naming
/// this function.
#[inline]
pub fn approval_when<A>(args: &A, when: impl FnOnce(&A) -> bool) -> bool {
    when(args)
}
