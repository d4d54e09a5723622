//! # effect-tool (the command)
//!
//! Operate the journal of [effect-tool](https://docs.rs/effect-tool): the records that make
//! LLM-agent tool calls safe to run again. When a call stops with `SideEffectRetryBlocked` or
//! parks for approval, a person uses this command to see it and decide.
//!
//! ```text
//! effect-tool --store agent.db list --state in-doubt,awaiting-approval,stale
//! effect-tool --store agent.db show 'run-7:send_email:3f1c…'
//! effect-tool --store agent.db resolve 'run-7:send_email:3f1c…' --applied --output '{"id":"msg-9"}'
//! effect-tool --store agent.db resolve 'run-7:send_email:3f1c…' --not-applied
//! effect-tool --store agent.db resolve 'run-7:send_email:3f1c…' --applied --output '{"id":"msg-9"}' --amend
//! effect-tool --store agent.db approve 'run-7:deploy:…' --as release-manager
//! effect-tool --store agent.db deny 'run-7:deploy:…' --reason 'freeze until Monday'
//! effect-tool --store agent.db abandon run-7
//! effect-tool --store agent.db gc
//! echo '{"to":"a@b.c"}' | effect-tool key --run run-7 --tool send_email
//! echo '{"b":1,"a":2}' | effect-tool canon
//! effect-tool manifest tools.manifest --check committed.manifest
//! ```
//!
//! ## The store
//!
//! `--store` or the `EFFECT_TOOL_STORE` variable: a SQLite file path (optionally `sqlite:PATH`;
//! the file must exist, since a typo must not create an empty journal that shows nothing), or
//! a `postgres://` / `postgresql://` URL (passwords are never printed; add `?schema=NAME` when
//! the application sets `PgOptions::schema` to something other than `effect_tool`; TLS is set
//! as with libpq: `?sslmode=verify-full&sslrootcert=CA.pem`). `key`, `canon` and `manifest` need
//! no store.
//!
//! ## Output
//!
//! Tables and sentences for people; `--json` prints JSON for scripts (`list`: an array of
//! records in the stored schema; `show`: `{"record", "audit"}`; `resolve` / `approve` /
//! `deny`: the updated record; `key`: `{"key", "fingerprint", "canonical"}`; `canon`:
//! `{"canonical", "sha256"}`). Text a tool or model wrote (keys, reasons, inputs) is printed
//! with control characters escaped, so it cannot act on the terminal.
//!
//! `canon` prints exactly the canonical bytes. When stdout is a pipe or a file no newline is
//! added (`effect-tool canon < a.json | sha256sum` hashes the canonical form); on a terminal a
//! newline is added for readability. `canon --hash` prints the SHA-256 hex with a newline.
//!
//! ## Who approves
//!
//! `approve`, `deny`, `resolve` and `abandon --mark-compensated` act as a named person. Give the identities file (`--identities FILE`
//! or `EFFECT_TOOL_IDENTITIES`: who is who across the console, MCP and this command; see
//! `effect_tool::ops::identity`) and your CLI token (`EFFECT_TOOL_TOKEN`, or `--token-file
//! FILE`; the file lists its SHA-256): the token names you and the roles you may approve as,
//! four eyes refuses your own calls under any of your names (an MCP principal's `sub`, say),
//! and the audit trail says `maria (cli token)`. For break-glass work, `--local-admin` acts as
//! the local administrator, audited as `local administrator on host H, OS user U`, with the
//! role of `--as` believed. Without an identities file, `--by NAME` (default `$USER`) with the
//! role of `--as` believed still works, deprecated; with one, it is refused.
//!
//! ## Correcting a resolution
//!
//! A verdict stands once given: `resolve` on a record a person already resolved is refused,
//! and the refusal gives the command that corrects it, `resolve KEY ... --amend`. Amend when
//! the output you recorded has the wrong shape (every call of the key then fails with a codec
//! error, which also names this command) or when you resolved `--applied` and the effect did
//! not happen (`--not-applied --amend`: the next call applies it). It is allowed while the
//! resolution stands, that is until a call runs the key again; an output the tool recorded
//! itself is never overwritten, and a record no person resolved is resolved, not amended.
//! Each amendment is kept in the audit trail (`amend`, with who and the new verdict) beside
//! the resolution it replaced; `show` prints the amend commands under a resolved record.
//!
//! ## Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | not found or refused: no record under the key, no records for the run, the journal refused the operation (resolving a record not in doubt, amending a record no person resolved, approving as the wrong role), `manifest --check` found a difference |
//! | 2 | usage or bad input: unknown option, invalid JSON, missing `--store` or `--by` |
//! | 3 | the store is unreachable or failed (no such file, cannot connect, query failed, unreadable record), or the output could not be written |
//!
//! Errors are one line on stderr starting with `error:`; the command never panics on bad input.
//!
//! ## What `abandon` can and cannot do
//!
//! Abandoning a run undoes each completed compensable effect, newest first. The undoing is the
//! tool's `compensate` hook, code that lives in the application, not here. So
//! `effect-tool abandon RUN` lists what must be undone (and the state of any compensation
//! already attempted), and says how to run them: `Engine::abandon_run` in the application,
//! which journals each compensation under `compensate:<key>` so it runs once. If a person
//! undid the effects by hand, `effect-tool abandon RUN --mark-compensated` journals each
//! compensation as done under that same key (so the application never runs it again) and marks
//! the effects compensated, with `--by` in the audit trail. There is no run-level "abandoned"
//! flag in the journal: a run is abandoned when its compensable effects are compensated.
//!
//! ## What `manifest` can and cannot do
//!
//! The manifest lists every tool's name, class, key rule, window, approval and
//! recover/compensate hooks, as stable text for code review. It is made from the tools'
//! declarations, which live in the application's binary; this command cannot load them. Print
//! it from your binary with `effect_tool::toolkit::manifest::render(&toolkit.metas())` (a test that
//! compares it with a committed file does the same job inside `cargo test`). Then
//! `effect-tool manifest FILE` checks it is a manifest and prints it, and `--check COMMITTED`
//! compares it with the committed one: exit 1 when a tool's contract changed, e.g. in a CI step
//! after the binary printed its manifest. The check lists each changed declaration with what it
//! does at run time, riskiest first (`effect_tool::toolkit::review`), then the differing lines;
//! `--markdown` prints the same for a pull-request comment, `--json` for scripts (`matches`,
//! `diff`, `changes` with `tool`, `field`, `risk`, `before`, `after`, `summary`, `effect`, and
//! `counts`).

#![warn(missing_docs)]

pub mod cli;
pub mod commands;
pub mod emit;
pub mod error;
pub mod gateway;
pub mod grant;
pub mod identity;
pub mod output;
pub mod store;

pub use cli::Cli;
pub use commands::{Io, run, run_on};
pub use error::{CliError, EXIT_OK, EXIT_REFUSED, EXIT_STORE, EXIT_USAGE};
