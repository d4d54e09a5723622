//! Journal records and their state machine, written once: one enum of states, one enum of
//! operations, one [`transition`] function that every store backend runs inside its atomic
//! section.
//!
//! ```text
//!            claim                 complete(attempt)
//!  (none) ─────────► Claimed ─────────────────────► Completed ──► Compensated
//!    │  ▲              │ │ release(attempt)            ▲
//!    │  └──────────────┘ └─► Released ─claim─► Claimed   │ resolve(applied)
//!    │ claim(approval)   mark-in-doubt ─► InDoubt ────────┘
//!    ▼                                     │ resolve(not applied) ─► Released
//!  AwaitingApproval ─approve─► Approved ─claim─► Claimed
//!           └──────deny─────► Denied
//! ```
//!
//! A person's resolution can be corrected (`amend`) while it stands: a record completed or
//! released by `resolve` (see [`EffectRecord::resolved_by`]) may be resolved again with
//! [`Op::Amend`] until the engine claims it. A record the tool completed itself is never
//! overwritten by a person.
//!
//! A claim whose lease has expired is *stale*: the next claim takes it over with a higher
//! attempt number (fencing the old holder out) and is told what it took over, so the engine can
//! reconcile. Records are plain data with an explicit [`RECORD_VERSION`]; stored data never
//! depends on Rust type layout.
//!
//! An approval (or a denial) is for the exact input fingerprint it was shown: a claim of
//! another input under an approved key parks again for its own approval (the approval voided),
//! and so does a claim after the approval's ttl ([`Intent::approval_ttl_ms`]). The approval is
//! used by the one execution it allowed.
//!
//! Besides a person's operations, the transition audits the engine's decisions with their
//! attempts (a takeover, a record going in doubt, a reconciled result, a voided approval):
//! [`Transition::audit`], appended by every backend in the same atomic section as the write.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::value::class::EffectClass;
/// The CLI's commands, written in `value::commands` (the engine's messages quote them too).
use crate::value::commands::resolve_commands;

/// The decisions of a provider's callback: [`Op::Pend`] and [`Op::Settle`].
mod callback;

/// The newest record version this crate reads and writes: 2, the version of a pending record
/// ([`RecordState::Pending`]); every other record is written at 1 ([`record_version_of`]).
///
/// A row of a newer version is refused on its own ([`crate::call::error::StoreError::UnsupportedVersion`]).
pub const RECORD_VERSION: u32 = 2;

/// The record version a record in `state` is written at: the lowest that describes it, so a
/// build from before a version reads every row it understands and refuses only those it would
/// misread. 2 for a pending record (builds before callbacks do not know the state: they would
/// report the row as corrupt and collect it past its ttl; version 2 makes them refuse it and
/// leave it alone), 1 for every other.
pub const fn record_version_of(state: RecordState) -> u32 {
    match state {
        RecordState::Pending => 2,
        _ => 1,
    }
}

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The state of a journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordState {
    /// An attempt holds the claim and is executing (or crashed: see the lease).
    Claimed,
    /// The effect happened; the output is recorded and replayed.
    Completed,
    /// The effect may or may not have happened; a person (or `recover`) must decide.
    InDoubt,
    /// The call waits for a person's approval.
    AwaitingApproval,
    /// Approved; the next call runs it.
    Approved,
    /// Approval was denied; calls fail definitively.
    Denied,
    /// Nothing happened (a definitive failure, or resolved as not applied); the next call may
    /// apply the effect.
    Released,
    /// A completed compensable effect that was undone when its run was abandoned.
    Compensated,
    /// The tool started an effect that a provider finishes later (a payout, a long job): the
    /// record waits for the provider's callback ([`Op::Settle`]) until its deadline
    /// ([`EffectRecord::lease_until`]). Nothing is wrong yet; past the deadline it counts as in
    /// doubt ([`EffectRecord::is_overdue`]).
    Pending,
}

impl RecordState {
    /// Every state.
    pub const ALL: [RecordState; 9] = [
        RecordState::Claimed,
        RecordState::Completed,
        RecordState::InDoubt,
        RecordState::AwaitingApproval,
        RecordState::Approved,
        RecordState::Denied,
        RecordState::Released,
        RecordState::Compensated,
        RecordState::Pending,
    ];

    /// The stored name (`claimed`, `completed`, `in-doubt`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordState::Claimed => "claimed",
            RecordState::Completed => "completed",
            RecordState::InDoubt => "in-doubt",
            RecordState::AwaitingApproval => "awaiting-approval",
            RecordState::Approved => "approved",
            RecordState::Denied => "denied",
            RecordState::Released => "released",
            RecordState::Compensated => "compensated",
            RecordState::Pending => "pending",
        }
    }

    /// Whether an attempt or a provider still holds the record (claimed, or pending its
    /// callback): garbage collection keeps it, and an expired ttl does not make it absent.
    pub const fn is_held(self) -> bool {
        matches!(self, RecordState::Claimed | RecordState::Pending)
    }

    /// Whether garbage collection must keep the record whatever its ttl (a person needs it).
    pub const fn needs_person(self) -> bool {
        matches!(self, RecordState::InDoubt | RecordState::AwaitingApproval)
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RecordState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RecordState::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = RecordState::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown record state `{s}`: expected one of {}", names.join(", "))
        })
    }
}

/// One journaled effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectRecord {
    /// The record version: of the row it was read from, or for a record a transition writes,
    /// the one it is written at ([`record_version_of`] its state; at most [`RECORD_VERSION`]).
    pub version: u32,
    /// The effect key.
    pub key: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's class.
    pub class: EffectClass,
    /// The run that made the record (the latest claim's run).
    pub run_id: String,
    /// The thread, if any.
    pub thread_id: Option<String>,
    /// The model's tool-call id of the latest claim, if any.
    pub call_id: Option<String>,
    /// The other tool-call ids that received this record's result, besides
    /// [`EffectRecord::call_id`]: identical calls of one model turn that shared it
    /// ([`Op::Share`]), and the calls of earlier attempts a claim took over. Each replays it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_ids: Vec<String>,
    /// SHA-256 hex of the canonical redacted input.
    pub fingerprint: String,
    /// The input with secret fields removed.
    pub input: Value,
    /// The state.
    pub state: RecordState,
    /// The fencing token: incremented by every claim; only the holder of this attempt may
    /// complete, release or mark the record in doubt.
    pub attempt: u32,
    /// When the current claim's lease ends (only meaningful when `Claimed`).
    pub lease_until: Option<Millis>,
    /// The recorded output (`Completed`), as JSON.
    pub output: Option<Value>,
    /// Why the record is in doubt, denied or released, in words.
    pub reason: Option<String>,
    /// The role whose approval the call needs, if any.
    pub approval_role: Option<String>,
    /// Who approved, denied or resolved it last.
    pub decided_by: Option<String>,
    /// When the record was created.
    pub created_at: Millis,
    /// When the record last changed.
    pub updated_at: Millis,
    /// When garbage collection may drop it (ttl), unless a person still needs it.
    pub expires_at: Option<Millis>,
    /// Who made the latest claim (`None`: a claim made before holders were recorded, or by a
    /// caller that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Box<Holder>>,
}

/// Where an approved record keeps the edit a person approved
/// ([`Op::ApproveEdited`]): the one field of its `output` object.
pub const EDIT_FIELD: &str = "$edited";

/// The edited arguments a person approved a call with ([`Op::ApproveEdited`],
/// [`EffectRecord::approved_edit`]).
///
/// How the key follows the edit: the approval is bound to the key and the fingerprint of the
/// input the person was shown (the parked record's). When that call comes again (the model's
/// retry, or [`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval) and a call),
/// the engine claims the original key, builds the edited arguments (the edit's fields over the
/// call's own, sensitive values kept from the call), and computes their key. When it is the
/// original key (the key rule does not read the changed fields), the edited arguments run under
/// it; otherwise they run once under their own key, a journaled call of its own that needs no
/// second approval, and the original key records that call's result, so that the original call
/// replays it and a call with the edited arguments replays it too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovedEdit {
    /// The edited input, as the journal keeps inputs (sensitive fields as digests).
    pub input: Value,
    /// The top-level fields whose values the edit changed.
    pub changed: Vec<String>,
    /// Who edited and approved it.
    pub by: String,
}

impl ApprovedEdit {
    /// The record's reason while the edit waits to run: who edited, which fields.
    pub fn summary(&self) -> String {
        format!(
            "approved with edited arguments by {} (changed: {})",
            self.by,
            if self.changed.is_empty() {
                "nothing".to_owned()
            } else {
                self.changed.join(", ")
            }
        )
    }
}

/// The top-level fields whose values differ between two inputs (objects), sorted; a field
/// missing from one counts as changed.
pub fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let mut names: Vec<String> = b
        .keys()
        .chain(a.keys())
        .filter(|k| b.get(*k) != a.get(*k))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Who holds a claim: the engine instance that made it, where it runs, and the stable worker
/// identity it was given, if any ([`Intent::holder`], [`EffectRecord::holder`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The stable worker identity the engine was started with (e.g. a pod or host name that a
    /// restart keeps), if any. A claim of the same worker by another instance is the worker's
    /// previous incarnation's, and is taken over at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The engine instance (random per engine, 128 bits in hex).
    pub instance: String,
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
}

impl Holder {
    /// Whether `self` is a later incarnation of the worker that made the claim `held`: both
    /// have the same worker identity and different instances. Such a claim's holder is gone
    /// (one worker identity runs one engine at a time), so its lease need not be waited out.
    pub fn succeeds(&self, held: &Holder) -> bool {
        self.worker.is_some() && self.worker == held.worker && self.instance != held.instance
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(w) = &self.worker {
            write!(f, "worker {w}, ")?;
        }
        write!(f, "instance {} on {} (pid {})", self.instance, self.host, self.pid)
    }
}

impl EffectRecord {
    /// Whether the record is a claim that took over an unknown outcome (a stale claim, a record
    /// in doubt) and has not ended yet: releasing it would say that nothing happened, which
    /// nobody knows of the attempt it took over.
    pub(crate) fn took_over(&self) -> bool {
        self.state == RecordState::Claimed && self.reason.as_deref().is_some_and(|r| r.starts_with(TAKEOVER_PREFIX))
    }

    /// Whether the record waits for a provider's callback ([`RecordState::Pending`]) and its
    /// deadline has passed at `now`: it counts as in doubt (a claim, a person's resolution and
    /// the reconciler treat it so), and a callback that comes now is refused as late.
    pub fn is_overdue(&self, now: Millis) -> bool {
        self.state == RecordState::Pending && self.lease_until.is_none_or(|d| d <= now)
    }

    /// Whether the record is claimed and its lease has expired at `now`.
    pub fn is_stale(&self, now: Millis) -> bool {
        self.state == RecordState::Claimed && self.lease_until.is_none_or(|l| l <= now)
    }

    /// The edited arguments a person approved this call with, while they wait to run: on an
    /// approved record, and on the claim (or takeover) that runs them ([`Op::ApproveEdited`]).
    pub fn approved_edit(&self) -> Option<ApprovedEdit> {
        if !matches!(
            self.state,
            RecordState::Approved | RecordState::Claimed | RecordState::InDoubt
        ) {
            return None;
        }
        let edit = self.output.as_ref()?.as_object()?.get(EDIT_FIELD)?;
        serde_json::from_value(edit.clone()).ok()
    }

    /// Whether the record's ttl has passed at `now`.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }

    /// Whether the tool call `call_id` received this record's result (it is the record's
    /// [`EffectRecord::call_id`] or one of its [`EffectRecord::call_ids`]).
    pub fn received_by(&self, call_id: &str) -> bool {
        self.call_id.as_deref() == Some(call_id) || self.call_ids.iter().any(|c| c == call_id)
    }

    /// The person whose resolution set the record's current state, if one did: the record is
    /// completed as applied or released as not applied by [`Op::Resolve`] (or [`Op::Amend`]),
    /// and the engine has not claimed or recorded it since. Only such a record can be amended.
    ///
    /// Derived from the stored columns, so journals written before amendments existed answer
    /// too: a resolution writes `decided_by` and the reason `resolved as applied by <who>` (or
    /// `resolved as not applied by <who>`). The engine's own completion clears the reason, and
    /// a claim starts a new record with neither, so neither can pass for a person's verdict.
    pub fn resolved_by(&self) -> Option<&str> {
        let by = self.decided_by.as_deref()?;
        let applied = match self.state {
            RecordState::Completed => true,
            RecordState::Released => false,
            _ => return None,
        };
        let reason = self.reason.as_deref()?;
        let who = reason.strip_prefix(resolution_prefix(applied))?;
        (who == by).then_some(by)
    }

    /// Whether the person or principal named `name` requested this call, as far as the journal
    /// can tell: its run (or thread) is one the MCP server scopes to principal `name`
    /// (`<name>/...`, with `%` and `/` in the name escaped). Four eyes: such a person does not
    /// approve or deny it (the console and the CLI refuse).
    ///
    /// Names are compared as strings: an operator's name (from the console's tokens, its
    /// proxy, or the CLI's `--by`) is taken to be the same person as the MCP principal with
    /// that id. A deployment whose operators and principals come from different identity
    /// systems names them the same way (e.g. both by e-mail address) for this to hold.
    pub fn requested_by(&self, name: &str) -> bool {
        requested_by(&self.run_id, self.thread_id.as_deref(), name)
    }
}

/// Whether the call of `run_id` (and `thread_id`) is requested by the person or principal
/// `name`, as [`EffectRecord::requested_by`] says of a record: its run or thread is scoped to
/// `name` (`<name>/...`, escaped).
pub fn requested_by(run_id: &str, thread_id: Option<&str>, name: &str) -> bool {
    let mut scope = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        match c {
            '%' => scope.push_str("%25"),
            '/' => scope.push_str("%2F"),
            c => scope.push(c),
        }
    }
    scope.push('/');
    run_id.starts_with(&scope) || thread_id.is_some_and(|t| t.starts_with(&scope))
}

/// What a claim says about the call that wants to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// The tool's name.
    pub tool: String,
    /// The tool's class.
    pub class: EffectClass,
    /// The run.
    pub run_id: String,
    /// The thread, if any.
    pub thread_id: Option<String>,
    /// The model's tool-call id, if any.
    pub call_id: Option<String>,
    /// SHA-256 hex of the canonical redacted input.
    pub fingerprint: String,
    /// The redacted input.
    pub input: Value,
    /// The record's time to live, in milliseconds.
    pub ttl_ms: Option<u64>,
    /// The role whose approval is needed before running, if any.
    pub approval: Option<String>,
    /// How long a person's approval stays valid, in milliseconds (`None`:
    /// [`DEFAULT_APPROVAL_TTL_MS`]). A claim that finds an older approval parks again for a
    /// new one.
    #[serde(default)]
    pub approval_ttl_ms: Option<u64>,
    /// Who makes the claim (recorded on the record as [`EffectRecord::holder`]). A live claim
    /// of the same worker by another instance counts as stale ([`Holder::succeeds`]). Boxed:
    /// it keeps [`Op`] small.
    #[serde(default)]
    pub holder: Option<Box<Holder>>,
}

/// How long an approval stays valid when the intent does not say: 24 hours.
pub const DEFAULT_APPROVAL_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The actor of the audit entries the engine's own decisions leave (a voided approval, a
/// takeover, a record going in doubt), as opposed to a person's.
pub const ENGINE_ACTOR: &str = "effect-tool";

/// A person's verdict on a record in doubt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Verdict {
    /// The effect happened; this is its output (what the next call returns).
    Applied {
        /// The output to record.
        output: Value,
    },
    /// The effect did not happen; the next call may apply it.
    NotApplied,
}

/// An operation on one record. Backends apply it with [`transition`] inside one atomic section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op")]
pub enum Op {
    /// Claim the key to execute (write-ahead intent with a lease).
    Claim {
        /// The call.
        intent: Intent,
        /// How long the claim is held before others may take it over.
        lease_ms: u64,
        /// Whether a record in doubt may be taken over (the tool can reconcile or re-run).
        takeover_in_doubt: bool,
    },
    /// Extend the lease of the claim held by `attempt`.
    Renew {
        /// The holder.
        attempt: u32,
        /// The new lease, from now.
        lease_ms: u64,
    },
    /// Record the output of the claim held by `attempt`.
    Complete {
        /// The holder.
        attempt: u32,
        /// The output.
        output: Value,
    },
    /// Give the claim back: nothing happened.
    Release {
        /// The holder.
        attempt: u32,
        /// Why, in words.
        reason: Option<String>,
    },
    /// The outcome of the claim held by `attempt` is unknown.
    MarkInDoubt {
        /// The holder.
        attempt: u32,
        /// Why, in words.
        reason: String,
    },
    /// A person's verdict on a record in doubt (or a stale claim).
    Resolve {
        /// Who.
        by: String,
        /// What.
        verdict: Verdict,
    },
    /// A person corrects their resolution: the same verdicts as [`Op::Resolve`], on a record
    /// whose current state a person's resolution set ([`EffectRecord::resolved_by`]), e.g. an
    /// output of the wrong shape, or `applied` when the effect did not happen. Refused on any
    /// other record: a record the tool completed itself is never overwritten by a person.
    Amend {
        /// Who.
        by: String,
        /// The corrected verdict.
        verdict: Verdict,
    },
    /// A person approves a call awaiting approval: the input they were shown, named by its
    /// fingerprint. Refused ([`Rejected::InputChanged`]) when the parked input is another one
    /// (the model called the key again with other arguments after the person looked).
    Approve {
        /// Who.
        by: String,
        /// The role they approve as; must match the record's role.
        role: String,
        /// The fingerprint ([`EffectRecord::fingerprint`]) of the input the person was shown
        /// and approves: the whole 64 hex digits, compared exactly.
        fingerprint: String,
    },
    /// A person approves a call awaiting approval with edited arguments: the input they were
    /// shown (by its fingerprint, as [`Op::Approve`]), in the role it needs, and the input to
    /// run instead. The record keeps its input and fingerprint (the approval is bound to what
    /// the person was shown); the edit is kept with it ([`EffectRecord::approved_edit`]) until
    /// the call runs, and in the audit entry for good. The engine runs the edited input under
    /// the key that input has (see [`ApprovedEdit`]).
    ApproveEdited {
        /// Who.
        by: String,
        /// The role they approve as; must match the record's role.
        role: String,
        /// The fingerprint of the input the person was shown.
        fingerprint: String,
        /// The edited input, as the journal keeps inputs (sensitive fields keep the digests the
        /// parked input has: they cannot be edited).
        input: Value,
        /// The top-level fields whose values the edit changed.
        changed: Vec<String>,
    },
    /// A person denies a call awaiting approval.
    Deny {
        /// Who.
        by: String,
        /// Why, for the model.
        reason: Option<String>,
    },
    /// A completed compensable effect was undone.
    MarkCompensated {
        /// Who or what ran the compensation.
        by: String,
    },
    /// More tool calls received the completed record's result (identical calls of one model
    /// turn that shared one application): their ids are kept, so that each replays it.
    Share {
        /// The tool-call ids.
        call_ids: Vec<String>,
    },
    /// [`Op::Claim`] of a call covered by a standing approval ([`crate::decide::grant`]): where
    /// the claim would park the call for a person's approval, it claims instead, the record
    /// naming the granter as its approver and the audit entry (`grant-used`) naming the grant.
    /// Anywhere else it is the plain claim (a grant never overrides a denial, a record in doubt
    /// or a parked call). The caller checked the grant covers the call, and checks again after
    /// the claim committed, before the tool runs ([`crate::decide::grant::covers`]).
    ClaimGranted {
        /// The call.
        intent: Intent,
        /// How long the claim is held before others may take it over.
        lease_ms: u64,
        /// Whether a record in doubt may be taken over.
        takeover_in_doubt: bool,
        /// The grant that stands in for a person's approval.
        grant: GrantUse,
    },
    /// The holder's tool started an effect that a provider finishes later: the claim held by
    /// `attempt` becomes [`RecordState::Pending`] until `deadline`, waiting for the callback
    /// whose token has the digest `token_digest` ([`crate::value::callback`]).
    Pend {
        /// The holder.
        attempt: u32,
        /// SHA-256 hex of the callback token the tool handed to the provider.
        token_digest: String,
        /// When the callback is due (milliseconds since the Unix epoch); after it, the record
        /// counts as in doubt.
        deadline: Millis,
    },
    /// The provider's callback settles a pending record with its answer: applied (its output
    /// is recorded and replayed) or not applied (the record is released). Refused when the
    /// record is not pending (a replayed callback), when the token is not the one the record
    /// waits for (a forged one), or after the deadline (a late one).
    Settle {
        /// The attempt the token was issued to.
        attempt: u32,
        /// SHA-256 hex of the callback's token.
        token_digest: String,
        /// Who settles it, for the audit trail (e.g. `callback`).
        by: String,
        /// The provider's answer.
        verdict: Verdict,
    },
    /// Record the output of a call that ran without a claim: an idempotent tool declared
    /// `one_write` ([`crate::Tool::ONE_WRITE`]), whose one journal write is this one. The
    /// record is written completed (its attempt one above whatever the key held) only where
    /// the key has no live record, or a released one. Anywhere else nothing is written and
    /// the outcome says what the key holds: [`OpOutcome::Recorded`] when another call's result
    /// was recorded meanwhile (another process ran the same call: its result is the one the
    /// journal keeps and replays), [`OpOutcome::InFlight`] for a claim or a pending record,
    /// and so on. The caller's own output then answers its call only.
    Record {
        /// The call, as a claim would carry it.
        intent: Intent,
        /// The output.
        output: Value,
    },
}

/// The grant an [`Op::ClaimGranted`] uses: what the record and its audit entry name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantUse {
    /// The grant's id.
    pub id: String,
    /// Who granted it (the record's approver).
    pub by: String,
    /// The role it was granted in (the role the call needs).
    pub role: String,
}

impl Op {
    /// Whether the commit that applies this operation must be flushed to disk before its caller
    /// is answered. Every operation but a claim whose class lets it be lost
    /// ([`EffectClass::claim_needs_flush`]): a store may commit such a claim without a flush of
    /// its own (SQLite `synchronous = NORMAL` for that transaction, PostgreSQL
    /// `synchronous_commit = off`), since the holder's next write (its record) is flushed and
    /// covers it. Flushing more is always allowed.
    pub fn needs_flush(&self) -> bool {
        match self {
            Op::Claim { intent, .. } | Op::ClaimGranted { intent, .. } => intent.class.claim_needs_flush(),
            _ => true,
        }
    }

    /// Whether it is a person's decision (approve, deny, resolve, amend): what
    /// [`Store::changed`](crate::Store::changed) wakes waiters for.
    pub fn is_decision(&self) -> bool {
        matches!(
            self,
            Op::Approve { .. }
                | Op::ApproveEdited { .. }
                | Op::Deny { .. }
                | Op::Resolve { .. }
                | Op::Amend { .. }
                | Op::Settle { .. }
        )
    }

    /// The operation's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Claim { .. } => "claim",
            Op::Renew { .. } => "renew",
            Op::Complete { .. } => "complete",
            Op::Release { .. } => "release",
            Op::MarkInDoubt { .. } => "mark-in-doubt",
            Op::Resolve { .. } => "resolve",
            Op::Amend { .. } => "amend",
            Op::Approve { .. } => "approve",
            Op::ApproveEdited { .. } => "approve-edited",
            Op::Deny { .. } => "deny",
            Op::MarkCompensated { .. } => "mark-compensated",
            Op::Share { .. } => "share",
            Op::ClaimGranted { .. } => "claim-granted",
            Op::Pend { .. } => "pend",
            Op::Record { .. } => "record",
            Op::Settle { .. } => "settle",
        }
    }

    /// The audit entry this operation leaves when it succeeds, for the operations a person
    /// performs (resolve, amend, approve, deny, compensation).
    pub fn audit(&self, key: &str, now: Millis) -> Option<AuditEntry> {
        let (actor, action, detail) = match self {
            Op::Resolve { by, verdict } => (by, "resolve", serde_json::to_value(verdict).ok()),
            Op::Amend { by, verdict } => (by, "amend", serde_json::to_value(verdict).ok()),
            Op::Approve { by, role, fingerprint } => (
                by,
                "approve",
                Some(serde_json::json!({ "role": role, "fingerprint": fingerprint })),
            ),
            Op::ApproveEdited {
                by,
                role,
                fingerprint,
                input,
                changed,
            } => (
                by,
                "approve-edited",
                Some(serde_json::json!({
                    "role": role,
                    "fingerprint": fingerprint,
                    "edited_input": input,
                    "changed": changed,
                })),
            ),
            Op::Deny { by, reason } => (by, "deny", Some(serde_json::json!({ "reason": reason }))),
            Op::MarkCompensated { by } => (by, "compensate", None),
            _ => return None,
        };
        Some(AuditEntry {
            key: key.to_owned(),
            at: now,
            actor: actor.clone(),
            action: action.to_owned(),
            detail,
        })
    }
}

/// One line of the audit trail: who did what to which record, when. Never overwritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The record's key.
    pub key: String,
    /// When.
    pub at: Millis,
    /// Who.
    pub actor: String,
    /// What (`resolve`, `amend`, `approve`, `deny`, `compensate`).
    pub action: String,
    /// Details (the verdict, the role, the reason).
    pub detail: Option<Value>,
}

/// What an operation found and did.
#[derive(Debug, Clone, PartialEq)]
pub enum OpOutcome {
    /// The claim was taken: execute with this attempt number. `previous` is what it took
    /// over (a stale claim or a record in doubt), whose outcome is unknown.
    Claimed {
        /// The new fencing token.
        attempt: u32,
        /// The state taken over, if the claim replaced a stale claim or a record in doubt.
        previous: Option<RecordState>,
        /// The record as it was before (for its fingerprint and call id).
        before: Option<Box<EffectRecord>>,
    },
    /// The effect is recorded: return its output.
    Recorded(EffectRecord),
    /// Another attempt holds a live claim: wait for it.
    InFlight(EffectRecord),
    /// The record is in doubt and this caller may not take it over.
    InDoubt(EffectRecord),
    /// The call waits for approval (the record is parked, or already was).
    AwaitingApproval(EffectRecord),
    /// Approval was denied.
    Denied(EffectRecord),
    /// The effect was undone by compensation.
    Compensated(EffectRecord),
    /// A non-claim operation succeeded; this is the record now (shared with what was written).
    Done(std::sync::Arc<EffectRecord>),
}

impl OpOutcome {
    /// The state of the record it answers with, as the journal names states (`completed`,
    /// `in-doubt`, ...): `claimed` for a claim, `done` for another operation's success.
    pub(crate) fn state_name(&self) -> &'static str {
        match self {
            OpOutcome::Claimed { .. } | OpOutcome::InFlight(_) => "claimed",
            OpOutcome::Recorded(_) => "completed",
            OpOutcome::InDoubt(_) => "in-doubt",
            OpOutcome::AwaitingApproval(_) => "awaiting-approval",
            OpOutcome::Denied(_) => "denied",
            OpOutcome::Compensated(_) => "compensated",
            OpOutcome::Done(_) => "done",
        }
    }
}

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    /// There is no record under the key.
    #[error("no record under key `{key}`")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The writer does not hold the claim (its lease expired and a newer attempt took over,
    /// or a person resolved the record).
    #[error(
        "attempt {attempt} no longer holds `{key}` (it is {state} at attempt {current}): a newer attempt or a person took it over, so this write was refused"
    )]
    Fenced {
        /// The key.
        key: String,
        /// The writer's attempt.
        attempt: u32,
        /// The record's attempt.
        current: u32,
        /// The record's state.
        state: RecordState,
    },
    /// The operation does not apply to the record's state.
    #[error("cannot {op} `{key}`: it is {state}{hint}")]
    InvalidState {
        /// The key.
        key: String,
        /// The operation.
        op: &'static str,
        /// The record's state.
        state: RecordState,
        /// What the person can do instead.
        hint: String,
    },
    /// A claim of one tool found a record of another tool under its key: the key rules of two
    /// tools map calls to one key. Nothing is written; the record is not replayed, taken over
    /// or joined.
    #[error(
        "cannot claim `{key}` for tool `{tool}`: it holds a record of tool `{recorded_tool}` (the key rules of two tools map calls to one key; give each tool keys of its own)"
    )]
    KeyOfAnotherTool {
        /// The key.
        key: String,
        /// The tool of the claim.
        tool: String,
        /// The tool of the record under the key.
        recorded_tool: String,
    },
    /// The approving role is not the one the record needs.
    #[error("cannot approve `{key}` as `{given}`: it needs approval by `{needed}`")]
    WrongRole {
        /// The key.
        key: String,
        /// The role given.
        given: String,
        /// The role needed.
        needed: String,
    },
    /// A provider's callback was refused: its token is not the one the record waits for, or
    /// its deadline has passed (the record is in doubt). Nothing was written; the refusal is
    /// audited by whoever received the callback.
    #[error("callback for `{key}` refused: {why}")]
    CallbackRefused {
        /// The key.
        key: String,
        /// Why, in words, with what the reader can do.
        why: String,
    },
    /// An approval named another input than the one parked under the key: the model called
    /// the key again with other arguments after the person was shown the call. Nothing was
    /// approved; the person looks at the new input and approves it by its own fingerprint,
    /// or denies it.
    #[error(
        "cannot approve `{key}`: its input changed after you were shown it, so nothing was approved (you approved the input with fingerprint {shown}; the input waiting now has fingerprint {fingerprint}: {input}); look at the new input, then approve it by its fingerprint or deny it"
    )]
    InputChanged {
        /// The key.
        key: String,
        /// The fingerprint the approval named (of the input the person was shown).
        shown: String,
        /// The fingerprint of the input parked now.
        fingerprint: String,
        /// The input parked now (as journaled: sensitive values bound by their digests).
        input: Box<Value>,
    },
    /// A person's output ([`Verdict::Applied`]) does not have the shape of the tool's output
    /// type, as its JSON Schema in the journal says ([`crate::Store::output_schema`]): recorded,
    /// it would be replayed to calls that cannot decode it. Boxed: it keeps `Rejected` small.
    #[error(transparent)]
    OutputMismatch(Box<OutputMismatch>),
}

/// What [`Rejected::OutputMismatch`] says: the output a person gave for `key` does not match
/// `schema`, the output schema of `tool`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "cannot record this output for `{key}`: it does not have the shape tool `{tool}` returns ({}). Nothing was recorded. Give an output that matches the tool's output schema: {}",
    problems.join("; "),
    serde_json::to_string(schema).unwrap_or_default()
)]
pub struct OutputMismatch {
    /// The key.
    pub key: String,
    /// The record's tool.
    pub tool: String,
    /// What does not match, each as `` `path`: what is wrong ``.
    pub problems: Vec<String>,
    /// The tool's output schema (JSON Schema), as the journal keeps it.
    pub schema: Value,
}

impl Rejected {
    /// The key of the refused operation.
    pub fn key(&self) -> &str {
        match self {
            Rejected::NotFound { key }
            | Rejected::Fenced { key, .. }
            | Rejected::InvalidState { key, .. }
            | Rejected::WrongRole { key, .. }
            | Rejected::InputChanged { key, .. }
            | Rejected::KeyOfAnotherTool { key, .. }
            | Rejected::CallbackRefused { key, .. } => key,
            Rejected::OutputMismatch(m) => &m.key,
        }
    }
}

/// The result of [`transition`]: the record to write (if it changed) and the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The record to write, or `None` when nothing changes.
    pub write: Option<std::sync::Arc<EffectRecord>>,
    /// What the caller learns.
    pub outcome: OpOutcome,
    /// The audit entry to append with the write, in the same atomic section (only with a
    /// write): a person's operation, or a decision the state machine made for the engine (a
    /// voided approval).
    pub audit: Option<AuditEntry>,
}

/// The record a backend holds under a key, as it hands it to [`transition`].
///
/// A backend that only reads its record passes `Option<&EffectRecord>`, which converts to
/// [`Current::Absent`] or [`Current::Borrowed`].
#[derive(Debug)]
pub enum Current<'a> {
    /// There is no record under the key.
    Absent,
    /// The backend keeps the record as it is (it may read it after the transition): a record
    /// the transition writes is built from a copy of it.
    Borrowed(&'a EffectRecord),
    /// The backend replaces the record with [`Transition::write`] whenever there is one: the
    /// transition then builds the record it writes from this one's fields (moved, not copied),
    /// and may leave it empty. When the transition writes nothing, or refuses, the record is
    /// left as it was.
    Replaced(&'a mut EffectRecord),
}

impl<'a> From<Option<&'a EffectRecord>> for Current<'a> {
    fn from(rec: Option<&'a EffectRecord>) -> Self {
        rec.map_or(Current::Absent, Current::Borrowed)
    }
}

impl Current<'_> {
    /// The record, if there is one.
    pub fn get(&self) -> Option<&EffectRecord> {
        match self {
            Current::Absent => None,
            Current::Borrowed(rec) => Some(rec),
            Current::Replaced(rec) => Some(rec),
        }
    }

    /// The record to build a write from: moved out of a replaced record, copied from a
    /// borrowed one.
    fn take(self, key: &str) -> Result<EffectRecord, Rejected> {
        match self {
            Current::Absent => Err(Rejected::NotFound { key: key.to_owned() }),
            Current::Borrowed(rec) => Ok(rec.clone()),
            Current::Replaced(rec) => Ok(std::mem::replace(rec, EffectRecord::vacant())),
        }
    }
}

impl EffectRecord {
    /// What a [`Current::Replaced`] record is left as once its fields are taken (allocates
    /// nothing; the backend replaces it).
    fn vacant() -> EffectRecord {
        EffectRecord {
            version: RECORD_VERSION,
            key: String::new(),
            tool: String::new(),
            class: EffectClass::Pure,
            run_id: String::new(),
            thread_id: None,
            call_id: None,
            call_ids: Vec::new(),
            fingerprint: String::new(),
            input: Value::Null,
            state: RecordState::Released,
            attempt: 0,
            lease_until: None,
            output: None,
            reason: None,
            approval_role: None,
            decided_by: None,
            created_at: 0,
            updated_at: 0,
            expires_at: None,
            holder: None,
        }
    }
}

impl<'a> From<&'a Op> for std::borrow::Cow<'a, Op> {
    fn from(op: &'a Op) -> Self {
        std::borrow::Cow::Borrowed(op)
    }
}

impl From<Op> for std::borrow::Cow<'_, Op> {
    fn from(op: Op) -> Self {
        std::borrow::Cow::Owned(op)
    }
}

/// The state machine: apply `op` to the `current` record of `key` at time `now`.
///
/// Every backend calls this inside its atomic section (a transaction or a lock) and writes
/// `write` back if it is `Some`. `current` is an `Option<&EffectRecord>` or a [`Current`];
/// `op` is an [`Op`] or an `&Op`. What the record keeps of an owned operation (the intent's
/// strings and input, an output) is moved into it; a borrowed operation is copied.
pub fn transition<'a, 'o>(
    key: &str,
    current: impl Into<Current<'a>>,
    op: impl Into<std::borrow::Cow<'o, Op>>,
    now: Millis,
) -> Result<Transition, Rejected> {
    let op: std::borrow::Cow<'o, Op> = op.into();
    // A person's operation is audited with what it wrote (only those allocate an entry).
    // An approval's entry names the fingerprint of the input it was for (checked equal to the
    // record's by `approve`).
    let person = op.audit(key, now);
    let mut t = transition_unaudited(key, current.into(), op, now)?;
    if let (Some(_), None, Some(entry)) = (&t.write, &t.audit, person) {
        t.audit = Some(entry);
    }
    Ok(t)
}

/// [`transition`] without the audit of a person's operation: one decision per operation.
///
/// Each decision reads the record by reference; what a write keeps of the operation is taken
/// only then (`into_owned`: moved out of an owned operation, copied from a borrowed one), so
/// refusals and outcomes that write nothing copy nothing. Each checks the record first and
/// takes it ([`Current::take`]) only to write, once nothing is left that can fail or panic: a
/// replaced record is never left half taken.
fn transition_unaudited<'o>(
    key: &str,
    current: Current<'_>,
    op: std::borrow::Cow<'o, Op>,
    now: Millis,
) -> Result<Transition, Rejected> {
    let at = OpAt {
        key,
        op: op.name(),
        now,
    };
    match &*op {
        Op::Claim { .. } => claim(at, current, op, None),
        Op::ClaimGranted { .. } => {
            let Op::ClaimGranted {
                intent,
                lease_ms,
                takeover_in_doubt,
                grant,
            } = op.into_owned()
            else {
                unreachable!("matched as a granted claim")
            };
            let claim_op = Op::Claim {
                intent,
                lease_ms,
                takeover_in_doubt,
            };
            claim(at, current, std::borrow::Cow::Owned(claim_op), Some(&grant))
        }
        &Op::Renew { attempt, lease_ms } => renew(at, current, attempt, lease_ms),
        Op::Complete { .. } => complete(at, current, op),
        &Op::Release { attempt, ref reason } => release(at, current, attempt, reason),
        &Op::MarkInDoubt { attempt, ref reason } => mark_in_doubt(at, current, attempt, reason),
        Op::Resolve { .. } | Op::Amend { .. } => resolve(at, current, op),
        Op::Approve { by, role, fingerprint } => approve(at, current, by, role, fingerprint),
        Op::ApproveEdited {
            by,
            role,
            fingerprint,
            input,
            changed,
        } => approve_edited(at, current, by, role, fingerprint, input, changed),
        Op::Deny { by, reason } => deny(at, current, by, reason),
        Op::Share { call_ids } => share(at, current, call_ids),
        Op::MarkCompensated { by } => mark_compensated(at, current, by),
        &Op::Pend {
            attempt,
            ref token_digest,
            deadline,
        } => callback::pend(at, current, attempt, token_digest, deadline),
        Op::Settle { .. } => callback::settle(at, current, op),
        Op::Record { .. } => record_unclaimed(at, current, op),
    }
}

/// One operation on one key at one time: what every decision reads besides the record.
#[derive(Clone, Copy)]
struct OpAt<'k> {
    key: &'k str,
    /// The operation's name ([`Op::name`]), for refusals.
    op: &'static str,
    now: Millis,
}

impl OpAt<'_> {
    /// Nothing is written; the caller learns `outcome`.
    fn unchanged(self, outcome: OpOutcome) -> Result<Transition, Rejected> {
        Ok(Transition {
            write: None,
            outcome,
            audit: None,
        })
    }

    /// The operation does not apply to `rec`'s state; `hint` says what the person can do.
    fn invalid(self, rec: &EffectRecord, hint: &str) -> Result<Transition, Rejected> {
        Err(Rejected::InvalidState {
            key: self.key.to_owned(),
            op: self.op,
            state: rec.state,
            hint: hint.to_owned(),
        })
    }

    /// The record as decisions see it: an expired record (ttl passed) counts as absent, unless
    /// a person must look at it or an attempt holds it.
    fn live<'r>(self, current: &'r Current<'_>) -> Option<&'r EffectRecord> {
        current
            .get()
            .filter(|r| !(r.is_expired(self.now) && !r.state.needs_person() && !r.state.is_held()))
    }

    /// The live record, which must exist.
    fn existing<'r>(self, current: &'r Current<'_>) -> Result<&'r EffectRecord, Rejected> {
        self.live(current).ok_or_else(|| Rejected::NotFound {
            key: self.key.to_owned(),
        })
    }

    /// The live record, which `attempt` must hold (claimed at that attempt): fenced otherwise.
    fn held_by<'r>(self, current: &'r Current<'_>, attempt: u32) -> Result<&'r EffectRecord, Rejected> {
        let rec = self.existing(current)?;
        if rec.state != RecordState::Claimed || rec.attempt != attempt {
            return Err(Rejected::Fenced {
                key: self.key.to_owned(),
                attempt,
                current: rec.attempt,
                state: rec.state,
            });
        }
        Ok(rec)
    }
}

/// [`Op::Claim`]: claim the key to execute, park the call for approval, or tell the caller
/// what the key holds (a result to replay, a claim to wait for, a record in doubt, ...).
/// `grant`: a standing approval that stands in for a person's where the call would park.
fn claim<'o>(
    at: OpAt<'_>,
    current: Current<'_>,
    op: std::borrow::Cow<'o, Op>,
    grant: Option<&GrantUse>,
) -> Result<Transition, Rejected> {
    use RecordState as S;
    let &Op::Claim {
        ref intent,
        lease_ms,
        takeover_in_doubt,
    } = &*op
    else {
        unreachable!("called for a claim")
    };
    let key = at.key;
    // The fencing token never goes back, even when an expired record counts as absent: a
    // stalled writer of an old attempt must not find its number reused by a new claim.
    let floor = current.get().map_or(0, |r| r.attempt);
    let live = at.live(&current);
    same_tool(key, live, intent)?;
    let (follows, previous) = match live {
        None => (false, None),
        Some(rec) => match follows(rec, intent, takeover_in_doubt, at.now) {
            Ok(found) => found,
            Err(answer) => return at.unchanged(answer(rec.clone())),
        },
    };
    // An approval is for the exact input it was shown, for a limited time: a call with
    // another input, or after the approval lapsed, never runs on it (it is voided, and
    // the call parks for its own approval).
    let voided = live
        .filter(|r| r.state == S::Approved)
        .and_then(|r| approval_voided(r, intent, at.now));
    // An unknown outcome taken over by a call that needs approval for another input:
    // its approval (if any) was not for this input, and parking would hide the unknown
    // outcome, so a person resolves the record first.
    if let Some(rec) = live
        && previous.is_some()
        && intent.approval.is_some()
        && rec.fingerprint != intent.fingerprint
    {
        return at.unchanged(OpOutcome::InDoubt(rec.clone()));
    }
    // A call that needs approval is parked, unless a person approved it already (or it
    // takes over a claim).
    let park = intent.approval.is_some()
        && (voided.is_some() || live.is_none_or(|r| matches!(r.state, S::Released | S::Denied)));
    let prev = live.filter(|_| follows);
    let audit = match (&voided, prev) {
        (Some(why), Some(p)) => Some(voided_entry(key, p, &intent.fingerprint, why, at.now)),
        _ => None,
    };
    let Op::Claim { intent, .. } = op.into_owned() else {
        unreachable!("matched as a claim")
    };
    let mut rec = fresh(key, intent, at.now, prev, floor);
    let granted = grant.filter(|_| park);
    if park && granted.is_none() {
        return Ok(park_for_approval(rec, voided.as_deref().zip(prev), audit));
    }
    let attempt = prev.map_or(floor, |p| p.attempt) + 1;
    rec.state = S::Claimed;
    rec.attempt = attempt;
    rec.lease_until = Some(at.now + lease_ms as i64);
    keep_approver(&mut rec, prev, voided.is_some());
    let audit = match (prev, previous, granted) {
        (Some(p), Some(state), _) => Some(take_over(at, &mut rec, p, state)),
        (_, _, Some(g)) => Some(grant_used(&mut rec, g, audit, at.now)),
        _ => audit,
    };
    let before = if follows {
        Some(Box::new(current.take(key)?))
    } else {
        None
    };
    rec.version = record_version_of(rec.state);
    Ok(Transition {
        write: Some(std::sync::Arc::new(rec)),
        outcome: OpOutcome::Claimed {
            attempt,
            previous,
            before,
        },
        audit,
    })
}

/// [`Op::Record`]: the output of a call that ran without a claim, written as a completed
/// record where the key has no live record (or a released one); else nothing is written and
/// the caller learns what the key holds.
fn record_unclaimed<'o>(
    at: OpAt<'_>,
    current: Current<'_>,
    op: std::borrow::Cow<'o, Op>,
) -> Result<Transition, Rejected> {
    use RecordState as S;
    let Op::Record { intent, .. } = &*op else {
        unreachable!("called for a record")
    };
    // As for a claim: the attempt never goes back, even over an expired record.
    let floor = current.get().map_or(0, |r| r.attempt);
    let live = at.live(&current);
    same_tool(at.key, live, intent)?;
    let prev = match live {
        None => None,
        Some(rec) if rec.state == S::Released => Some(rec),
        Some(rec) => {
            let answer: Answer = match rec.state {
                S::Completed => OpOutcome::Recorded,
                S::InDoubt => OpOutcome::InDoubt,
                S::AwaitingApproval => OpOutcome::AwaitingApproval,
                S::Denied => OpOutcome::Denied,
                S::Compensated => OpOutcome::Compensated,
                S::Claimed | S::Approved | S::Pending | S::Released => OpOutcome::InFlight,
            };
            return at.unchanged(answer(rec.clone()));
        }
    };
    let Op::Record { intent, output } = op.into_owned() else {
        unreachable!("matched as a record")
    };
    let mut rec = fresh(at.key, intent, at.now, prev, floor);
    rec.state = S::Completed;
    rec.attempt += 1;
    rec.output = Some(output);
    done(rec)
}

/// A key names one effect of one tool: a record of another tool under it means two tools' key
/// rules collide, never a result to replay, a claim to join or take over.
fn same_tool(key: &str, live: Option<&EffectRecord>, intent: &Intent) -> Result<(), Rejected> {
    match live {
        Some(rec) if rec.tool != intent.tool => Err(Rejected::KeyOfAnotherTool {
            key: key.to_owned(),
            tool: intent.tool.clone(),
            recorded_tool: rec.tool.clone(),
        }),
        _ => Ok(()),
    }
}

/// What a claim that cannot be taken answers, built from the record as it is
/// ([`OpOutcome::Recorded`], [`OpOutcome::InFlight`], ...).
type Answer = fn(EffectRecord) -> OpOutcome;

/// Whether a claim of `intent` follows the live record `rec` (else it makes a new record),
/// and the unknown outcome it takes over, if any; or, when it cannot claim, the answer the
/// caller gets (built from the record as it is).
fn follows(
    rec: &EffectRecord,
    intent: &Intent,
    takeover_in_doubt: bool,
    now: Millis,
) -> Result<(bool, Option<RecordState>), Answer> {
    use RecordState as S;
    match rec.state {
        S::Released | S::Approved => Ok((true, None)),
        // A denial, like an approval, is for the input it was shown: another input under the
        // same key asks anew.
        S::Denied if rec.fingerprint != intent.fingerprint => Ok((true, None)),
        // A stale claim, or one of this worker's previous incarnation (its holder is gone: no
        // need to wait out its lease).
        S::Claimed if rec.is_stale(now) || succeeds(intent, rec) => Ok((true, Some(S::Claimed))),
        S::InDoubt if takeover_in_doubt => Ok((true, Some(S::InDoubt))),
        S::Completed => Err(OpOutcome::Recorded),
        S::Claimed => Err(OpOutcome::InFlight),
        S::InDoubt => Err(OpOutcome::InDoubt),
        S::AwaitingApproval => Err(OpOutcome::AwaitingApproval),
        S::Denied => Err(OpOutcome::Denied),
        S::Compensated => Err(OpOutcome::Compensated),
        // Past its deadline a pending record is in doubt: taken over as one, or answered so.
        S::Pending if rec.is_overdue(now) && takeover_in_doubt => Ok((true, Some(S::InDoubt))),
        S::Pending if rec.is_overdue(now) => Err(OpOutcome::InDoubt),
        // Waiting for its callback: the caller waits (or says "still pending"), like a live claim.
        S::Pending => Err(OpOutcome::InFlight),
    }
}

/// The new record `rec` parked for a person's approval; `voided`: why an earlier approval (on
/// the record it follows) no longer holds.
fn park_for_approval(
    mut rec: EffectRecord,
    voided: Option<(&str, &EffectRecord)>,
    audit: Option<AuditEntry>,
) -> Transition {
    rec.state = RecordState::AwaitingApproval;
    if let Some((why, p)) = voided {
        let by = p.decided_by.as_deref().unwrap_or("a person");
        rec.reason = Some(format!(
            "the approval by {by} was voided: {why}; this call needs its own approval"
        ));
    }
    rec.version = record_version_of(rec.state);
    Transition {
        outcome: OpOutcome::AwaitingApproval(rec.clone()),
        write: Some(std::sync::Arc::new(rec)),
        audit,
    }
}

/// The claim `rec` approved by the standing approval `g` instead of parking: the granter is its
/// approver, and the audit entry names the grant (and the approval it replaced as voided, if
/// any: `voided`).
fn grant_used(rec: &mut EffectRecord, g: &GrantUse, voided: Option<AuditEntry>, now: Millis) -> AuditEntry {
    rec.decided_by = Some(g.by.clone());
    AuditEntry {
        key: rec.key.clone(),
        at: now,
        actor: g.by.clone(),
        action: "grant-used".to_owned(),
        detail: Some(serde_json::json!({
            "grant": g.id,
            "role": g.role,
            "fingerprint": rec.fingerprint,
            "attempt": rec.attempt,
            "voided": voided.and_then(|v| v.detail),
        })),
    }
}

/// The approver stays on the record of the execution they approved (and of its takeover, the
/// same input): never on another input's, nor after their approval was `voided`.
fn keep_approver(rec: &mut EffectRecord, prev: Option<&EffectRecord>, voided: bool) {
    use RecordState as S;
    if let Some(p) = prev.filter(|p| {
        p.fingerprint == rec.fingerprint
            && p.decided_by.is_some()
            && match p.state {
                S::Approved => !voided,
                S::Claimed | S::InDoubt => true,
                _ => false,
            }
    }) {
        rec.approval_role = p.approval_role.clone();
        rec.decided_by = p.decided_by.clone();
        // The edit a person approved goes with the claim that runs it (and its takeovers).
        if p.approved_edit().is_some() {
            rec.output = p.output.clone();
            rec.reason = p.reason.clone();
        }
    }
}

/// A takeover of `p`'s unknown outcome (`state`) by the claim `rec`: it keeps the tool calls of
/// the attempts it took over (one of them may have applied the effect this claim reconciles,
/// and replays it afterwards), says what it took over until it ends, and is audited with both
/// attempts (the entry returned).
fn take_over(at: OpAt<'_>, rec: &mut EffectRecord, p: &EffectRecord, state: RecordState) -> AuditEntry {
    rec.call_ids = kept_call_ids(p, rec.call_id.as_deref());
    rec.reason = Some(format!("{TAKEOVER_PREFIX}{} ({state})", p.attempt));
    engine_entry(
        at.key,
        "takeover",
        at.now,
        serde_json::json!({
            "attempt": rec.attempt,
            "took_over_attempt": p.attempt,
            "took_over_state": state,
            "took_over_run_id": p.run_id,
            "took_over_call_id": p.call_id,
            "took_over_since": p.updated_at,
            "took_over_lease_until": p.lease_until,
            "took_over_reason": p.reason,
            "took_over_holder": p.holder,
            "run_id": rec.run_id,
            "call_id": rec.call_id,
        }),
    )
}

/// [`Op::Renew`]: the holder extends its lease.
fn renew(at: OpAt<'_>, current: Current<'_>, attempt: u32, lease_ms: u64) -> Result<Transition, Rejected> {
    at.held_by(&current, attempt)?;
    let lease_until = Some(at.now + lease_ms as i64);
    let mut next = current.take(at.key)?;
    next.lease_until = lease_until;
    next.updated_at = at.now;
    done(next)
}

/// [`Op::Complete`]: the holder records its output; a takeover's result reconciles the unknown
/// outcome it took over (audited).
fn complete<'o>(at: OpAt<'_>, current: Current<'_>, op: std::borrow::Cow<'o, Op>) -> Result<Transition, Rejected> {
    let &Op::Complete { attempt, .. } = &*op else {
        unreachable!("called for a completion")
    };
    let rec = at.held_by(&current, attempt)?;
    // An attempt that took over an unknown outcome recorded a result: the outcome is
    // reconciled (by `recover`, or by running again as the class allows).
    let reconciled = rec.reason.as_deref().is_some_and(|r| r.starts_with(TAKEOVER_PREFIX));
    let audit = reconciled.then(|| {
        engine_entry(
            at.key,
            "reconciled",
            at.now,
            serde_json::json!({ "attempt": attempt, "took_over": rec.reason }),
        )
    });
    let Op::Complete { output, .. } = op.into_owned() else {
        unreachable!("matched as a completion")
    };
    let mut next = current.take(at.key)?;
    next.state = RecordState::Completed;
    next.output = Some(output);
    next.lease_until = None;
    next.reason = None;
    next.updated_at = at.now;
    with_audit(done(next), audit)
}

/// [`Op::Release`]: the holder gives the claim back; nothing happened.
fn release(at: OpAt<'_>, current: Current<'_>, attempt: u32, reason: &Option<String>) -> Result<Transition, Rejected> {
    at.held_by(&current, attempt)?;
    let mut next = current.take(at.key)?;
    next.state = RecordState::Released;
    next.lease_until = None;
    next.reason = reason.clone();
    next.updated_at = at.now;
    done(next)
}

/// [`Op::MarkInDoubt`]: the holder's outcome is unknown; audited with its cause and attempt.
fn mark_in_doubt(at: OpAt<'_>, current: Current<'_>, attempt: u32, reason: &str) -> Result<Transition, Rejected> {
    let rec = at.held_by(&current, attempt)?;
    let audit = engine_entry(
        at.key,
        "in-doubt",
        at.now,
        serde_json::json!({
            "attempt": attempt,
            "reason": reason,
            "run_id": rec.run_id,
            "call_id": rec.call_id,
            "took_over": rec.reason,
        }),
    );
    let mut next = current.take(at.key)?;
    next.state = RecordState::InDoubt;
    next.lease_until = None;
    next.reason = Some(reason.to_owned());
    next.updated_at = at.now;
    with_audit(done(next), Some(audit))
}

/// [`Op::Resolve`] and [`Op::Amend`]: a person's verdict on a record in doubt or a stale claim,
/// or their correction of a resolution that still stands.
fn resolve<'o>(at: OpAt<'_>, current: Current<'_>, op: std::borrow::Cow<'o, Op>) -> Result<Transition, Rejected> {
    use RecordState as S;
    let rec = at.existing(&current)?;
    let amend = matches!(*op, Op::Amend { .. });
    let resolvable = if amend {
        rec.resolved_by().is_some()
    } else {
        rec.state == S::InDoubt || rec.is_stale(at.now) || rec.is_overdue(at.now)
    };
    if !resolvable {
        return at.invalid(rec, &resolve_refused(rec, amend, at.now));
    }
    let (Op::Resolve { by, verdict } | Op::Amend { by, verdict }) = op.into_owned() else {
        unreachable!("matched as a resolution")
    };
    let applied = matches!(verdict, Verdict::Applied { .. });
    let (state, output) = match verdict {
        Verdict::Applied { output } => (S::Completed, Some(output)),
        Verdict::NotApplied => (S::Released, None),
    };
    let reason = format!("{}{by}", resolution_prefix(applied));
    let mut next = current.take(at.key)?;
    next.state = state;
    next.output = output;
    next.reason = Some(reason);
    next.lease_until = None;
    next.updated_at = at.now;
    next.decided_by = Some(by);
    done(next)
}

/// [`Op::Approve`]: a person approves the parked input they were shown, in the role it needs.
fn approve(
    at: OpAt<'_>,
    current: Current<'_>,
    by: &str,
    role: &str,
    fingerprint: &str,
) -> Result<Transition, Rejected> {
    let rec = at.existing(&current)?;
    if rec.state != RecordState::AwaitingApproval {
        return at.invalid(rec, ": only calls awaiting approval can be approved");
    }
    // An approval is for the input the person was shown: another input parked under the key
    // since (the model called again with other arguments) is not approved by it.
    if fingerprint != rec.fingerprint {
        return Err(Rejected::InputChanged {
            key: at.key.to_owned(),
            shown: fingerprint.to_owned(),
            fingerprint: rec.fingerprint.clone(),
            input: Box::new(rec.input.clone()),
        });
    }
    let needed = rec.approval_role.as_deref().unwrap_or_default();
    if !needed.is_empty() && needed != role {
        return Err(Rejected::WrongRole {
            key: at.key.to_owned(),
            given: role.to_owned(),
            needed: needed.to_owned(),
        });
    }
    let mut next = current.take(at.key)?;
    next.state = RecordState::Approved;
    next.decided_by = Some(by.to_owned());
    // A voided earlier approval's reason no longer applies.
    next.reason = None;
    next.updated_at = at.now;
    done(next)
}

/// [`Op::ApproveEdited`]: [`Op::Approve`]'s checks, then the edit kept on the approved record
/// (in its `output`, which an approved record has no other use for, under [`EDIT_FIELD`]).
fn approve_edited(
    at: OpAt<'_>,
    current: Current<'_>,
    by: &str,
    role: &str,
    fingerprint: &str,
    input: &Value,
    changed: &[String],
) -> Result<Transition, Rejected> {
    let mut t = approve(at, current, by, role, fingerprint)?;
    let Some(rec) = t.write.as_mut() else {
        unreachable!("an approval writes the record")
    };
    let rec = std::sync::Arc::make_mut(rec);
    let edit = ApprovedEdit {
        input: input.clone(),
        changed: changed.to_vec(),
        by: by.to_owned(),
    };
    rec.output = Some(serde_json::json!({ EDIT_FIELD: edit }));
    rec.reason = Some(edit.summary());
    t.outcome = OpOutcome::Done(std::sync::Arc::new(rec.clone()));
    Ok(t)
}

/// [`Op::Deny`]: a person denies a parked call.
fn deny(at: OpAt<'_>, current: Current<'_>, by: &str, reason: &Option<String>) -> Result<Transition, Rejected> {
    let rec = at.existing(&current)?;
    if rec.state != RecordState::AwaitingApproval {
        return at.invalid(rec, ": only calls awaiting approval can be denied");
    }
    let mut next = current.take(at.key)?;
    next.state = RecordState::Denied;
    next.decided_by = Some(by.to_owned());
    next.reason = reason.clone();
    next.updated_at = at.now;
    done(next)
}

/// [`Op::Share`]: more tool calls received a recorded result (each id kept once).
fn share(at: OpAt<'_>, current: Current<'_>, call_ids: &[String]) -> Result<Transition, Rejected> {
    let rec = at.existing(&current)?;
    if rec.state != RecordState::Completed {
        return at.invalid(rec, ": only a recorded result can be shared with more tool calls");
    }
    let new: Vec<&String> = call_ids.iter().filter(|c| !rec.received_by(c)).collect();
    if new.is_empty() {
        return at.unchanged(OpOutcome::Done(std::sync::Arc::new(rec.clone())));
    }
    let mut added: Vec<String> = Vec::with_capacity(new.len());
    for c in new {
        if !added.contains(c) {
            added.push(c.clone());
        }
    }
    let mut next = current.take(at.key)?;
    next.call_ids.extend(added);
    next.updated_at = at.now;
    done(next)
}

/// [`Op::MarkCompensated`]: a completed effect was undone.
fn mark_compensated(at: OpAt<'_>, current: Current<'_>, by: &str) -> Result<Transition, Rejected> {
    let rec = at.existing(&current)?;
    if rec.state != RecordState::Completed {
        return at.invalid(rec, ": only completed effects can be compensated");
    }
    let mut next = current.take(at.key)?;
    next.state = RecordState::Compensated;
    next.decided_by = Some(by.to_owned());
    next.updated_at = at.now;
    done(next)
}

/// The start of the reason a person's resolution writes; the resolver's name follows.
fn resolution_prefix(applied: bool) -> &'static str {
    if applied {
        "resolved as applied by "
    } else {
        "resolved as not applied by "
    }
}

/// Why `rec` cannot be resolved (or, with `amend`, amended), and what the person can do.
fn resolve_refused(rec: &EffectRecord, amend: bool, now: Millis) -> String {
    use RecordState as S;
    if rec.state == S::Claimed && !rec.is_stale(now) {
        return ": an attempt holds a live claim; wait for it to finish or for its lease to expire".to_owned();
    }
    if amend {
        return match rec.state {
            S::InDoubt | S::Claimed => format!(
                ": nothing to amend, no person has resolved it yet; resolve it without amending: {}",
                resolve_commands(&rec.key, false)
            ),
            S::Completed => ": the tool recorded its output itself, and a person cannot overwrite it; only a person's resolution can be amended".to_owned(),
            _ => ": only a person's resolution (completed as applied or released as not applied, and not claimed by a call since) can be amended".to_owned(),
        };
    }
    match rec.resolved_by() {
        Some(by) => {
            let verdict = if rec.state == S::Completed { "applied" } else { "not applied" };
            format!(
                ": {by} resolved it as {verdict}; to correct that resolution, amend it: {}",
                resolve_commands(&rec.key, true)
            )
        }
        None if rec.state == S::Completed => ": the tool recorded its output itself, and a person cannot overwrite it; only records in doubt (or stale claims) can be resolved".to_owned(),
        None => ": only records in doubt (or stale claims) can be resolved".to_owned(),
    }
}

/// `rec` written; the caller learns it ([`OpOutcome::Done`]).
fn done(mut rec: EffectRecord) -> Result<Transition, Rejected> {
    rec.version = record_version_of(rec.state);
    let rec = std::sync::Arc::new(rec);
    Ok(Transition {
        outcome: OpOutcome::Done(rec.clone()),
        write: Some(rec),
        audit: None,
    })
}

/// `t` with `audit` as its audit entry.
fn with_audit(t: Result<Transition, Rejected>, audit: Option<AuditEntry>) -> Result<Transition, Rejected> {
    t.map(|mut t| {
        t.audit = audit;
        t
    })
}

/// How a claim that took over an unknown outcome starts its reason (the attempt follows).
const TAKEOVER_PREFIX: &str = "took over attempt ";

/// The audit entry of an attempt that lost its claim on `key` (action `claim-lost`): its lease
/// lapsed by the engine's clock, or the journal fenced out its completion, because attempt
/// `current` (when known) owns the key now. `finished`: the tool had returned (its effect
/// happened but its result is not recorded); else it was stopped before it finished. Appended
/// with [`crate::Store::append_audit`], as it changes no record.
pub fn claim_lost_entry(key: &str, attempt: u32, current: Option<u32>, finished: bool, now: Millis) -> AuditEntry {
    engine_entry(
        key,
        "claim-lost",
        now,
        serde_json::json!({ "attempt": attempt, "current": current, "finished": finished }),
    )
}

/// An audit entry of a decision the engine made (actor [`ENGINE_ACTOR`]).
fn engine_entry(key: &str, action: &str, now: Millis, detail: Value) -> AuditEntry {
    AuditEntry {
        key: key.to_owned(),
        at: now,
        actor: ENGINE_ACTOR.to_owned(),
        action: action.to_owned(),
        detail: Some(detail),
    }
}

/// Why the approval on `approved` (an approved record) does not allow `intent` to run, if it
/// does not: it was given for another input, or it is older than its ttl.
fn approval_voided(approved: &EffectRecord, intent: &Intent, now: Millis) -> Option<String> {
    if approved.fingerprint != intent.fingerprint {
        return Some(format!(
            "it was given for another input (fingerprint {}) than this call's ({}) under the same key",
            approved.fingerprint, intent.fingerprint
        ));
    }
    let ttl = intent.approval_ttl_ms.unwrap_or(DEFAULT_APPROVAL_TTL_MS);
    let age = now.saturating_sub(approved.updated_at);
    (age >= i64::try_from(ttl).unwrap_or(i64::MAX))
        .then(|| format!("it is {age} ms old, and an approval is valid for {ttl} ms"))
}

/// The tool calls that received (or may have received) `prev`'s result, except `call_id`.
fn kept_call_ids(prev: &EffectRecord, call_id: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in prev.call_id.iter().chain(prev.call_ids.iter()) {
        if Some(c.as_str()) != call_id && !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// The audit entry of an approval voided by the claim of `fingerprint`.
fn voided_entry(key: &str, approved: &EffectRecord, fingerprint: &str, why: &str, now: Millis) -> AuditEntry {
    AuditEntry {
        key: key.to_owned(),
        at: now,
        actor: ENGINE_ACTOR.to_owned(),
        action: "approval-voided".to_owned(),
        detail: Some(serde_json::json!({
            "approved_by": approved.decided_by,
            "approved_fingerprint": approved.fingerprint,
            "fingerprint": fingerprint,
            "attempt": approved.attempt,
            "reason": why,
        })),
    }
}

/// A new record for `intent` (its parts moved in), following `prev` if there is one.
fn fresh(key: &str, intent: Intent, now: Millis, prev: Option<&EffectRecord>, floor: u32) -> EffectRecord {
    EffectRecord {
        version: RECORD_VERSION,
        key: key.to_owned(),
        tool: intent.tool,
        class: intent.class,
        run_id: intent.run_id,
        thread_id: intent.thread_id,
        call_id: intent.call_id,
        call_ids: Vec::new(),
        fingerprint: intent.fingerprint,
        input: intent.input,
        state: RecordState::Claimed,
        attempt: prev.map_or(floor, |p| p.attempt),
        lease_until: None,
        output: None,
        reason: None,
        approval_role: intent.approval,
        decided_by: None,
        created_at: prev.map_or(now, |p| p.created_at),
        updated_at: now,
        expires_at: intent.ttl_ms.map(|t| now + t as i64),
        holder: intent.holder,
    }
}

/// Whether the claim `intent` is made by a later incarnation of the worker holding `rec`.
fn succeeds(intent: &Intent, rec: &EffectRecord) -> bool {
    matches!((&intent.holder, &rec.holder), (Some(new), Some(held)) if new.succeeds(held))
}

/// The current time in milliseconds since the Unix epoch.
pub fn now_millis() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_000_000;

    fn intent(approval: Option<&str>) -> Intent {
        Intent {
            tool: "refund".into(),
            class: EffectClass::Idempotent,
            run_id: "run-2".into(),
            thread_id: Some("thread".into()),
            call_id: Some("call-2".into()),
            fingerprint: "f2".into(),
            input: serde_json::json!({ "order": "o-2", "amount": 5 }),
            ttl_ms: Some(60_000),
            approval: approval.map(str::to_owned),
            approval_ttl_ms: None,
            holder: None,
        }
    }

    /// A record in every state, live and stale, expired or not, approved with a role or not.
    fn records() -> Vec<EffectRecord> {
        let base = EffectRecord {
            version: RECORD_VERSION,
            key: "k".into(),
            tool: "refund".into(),
            class: EffectClass::Idempotent,
            run_id: "run-1".into(),
            thread_id: None,
            call_id: Some("call-1".into()),
            call_ids: Vec::new(),
            fingerprint: "f1".into(),
            input: serde_json::json!({ "order": "o-1" }),
            state: RecordState::Claimed,
            attempt: 3,
            lease_until: Some(NOW + 10),
            output: Some(serde_json::json!(7)),
            reason: Some("because".into()),
            approval_role: Some("finance".into()),
            decided_by: Some("ana".into()),
            created_at: NOW - 100,
            updated_at: NOW - 50,
            expires_at: None,
            holder: None,
        };
        let mut out = Vec::new();
        for state in RecordState::ALL {
            for (lease_until, expires_at) in [(Some(NOW + 10), None), (Some(NOW - 1), Some(NOW - 1)), (None, None)] {
                for approval_role in [Some("finance".to_owned()), None] {
                    out.push(EffectRecord {
                        state,
                        lease_until,
                        expires_at,
                        approval_role,
                        ..base.clone()
                    });
                }
                // As a person's resolution leaves it (amendable when completed or released).
                for reason in ["resolved as applied by ana", "resolved as not applied by ana"] {
                    out.push(EffectRecord {
                        state,
                        lease_until,
                        expires_at,
                        reason: Some(reason.into()),
                        ..base.clone()
                    });
                }
            }
        }
        out
    }

    fn ops() -> Vec<Op> {
        let mut out = Vec::new();
        for approval in [None, Some("finance")] {
            for takeover_in_doubt in [false, true] {
                out.push(Op::Claim {
                    intent: intent(approval),
                    lease_ms: 500,
                    takeover_in_doubt,
                });
            }
        }
        for attempt in [3, 2] {
            out.push(Op::Renew { attempt, lease_ms: 500 });
            out.push(Op::Complete {
                attempt,
                output: serde_json::json!({ "refund": "r-1" }),
            });
            out.push(Op::Release {
                attempt,
                reason: Some("failed".into()),
            });
            out.push(Op::MarkInDoubt {
                attempt,
                reason: "timed out".into(),
            });
        }
        for verdict in [
            Verdict::Applied {
                output: serde_json::json!("done"),
            },
            Verdict::NotApplied,
        ] {
            out.push(Op::Resolve {
                by: "bob".into(),
                verdict: verdict.clone(),
            });
            out.push(Op::Amend {
                by: "bob".into(),
                verdict,
            });
        }
        for role in ["finance", "ops"] {
            for fingerprint in ["f1", "f2"] {
                out.push(Op::Approve {
                    by: "bob".into(),
                    role: role.into(),
                    fingerprint: fingerprint.into(),
                });
            }
        }
        out.push(Op::Deny {
            by: "bob".into(),
            reason: Some("no".into()),
        });
        out.push(Op::MarkCompensated { by: "saga".into() });
        out.push(Op::Record {
            intent: intent(None),
            output: serde_json::json!({ "refund": "r-9" }),
        });
        out
    }

    /// Moving the parts of an owned record and operation changes nothing the caller sees, and
    /// a replaced record is left as it was whenever nothing is written.
    #[test]
    fn owned_and_borrowed_transitions_agree() {
        for op in ops() {
            let borrowed = transition("k", None, &op, NOW);
            let owned = transition("k", Current::Absent, op.clone(), NOW);
            assert_eq!(borrowed, owned, "{} on no record", op.name());
            for rec in records() {
                let borrowed = transition("k", Some(&rec), &op, NOW);
                let mut held = rec.clone();
                let owned = transition("k", Current::Replaced(&mut held), op.clone(), NOW);
                assert_eq!(
                    borrowed,
                    owned,
                    "{} on {} (lease {:?})",
                    op.name(),
                    rec.state,
                    rec.lease_until
                );
                if !matches!(&owned, Ok(Transition { write: Some(_), .. })) {
                    assert_eq!(held, rec, "{} on {} must leave the record", op.name(), rec.state);
                }
            }
        }
    }

    /// A claim that follows a record reports that record as it was, and the fencing token
    /// grows from it.
    #[test]
    fn claim_over_a_released_record_reports_it() {
        let mut rec = records().remove(0);
        rec.state = RecordState::Released;
        let before = rec.clone();
        let op = Op::Claim {
            intent: intent(None),
            lease_ms: 500,
            takeover_in_doubt: false,
        };
        let t = transition("k", Current::Replaced(&mut rec), op, NOW).unwrap();
        let written = t.write.expect("a claim writes");
        assert_eq!((written.attempt, written.created_at), (4, before.created_at));
        assert_eq!(written.input, intent(None).input);
        assert_eq!(
            t.outcome,
            OpOutcome::Claimed {
                attempt: 4,
                previous: None,
                before: Some(Box::new(before)),
            }
        );
    }

    fn record_op() -> Op {
        Op::Record {
            intent: intent(None),
            output: serde_json::json!({ "refund": "r-9" }),
        }
    }

    /// The record of a call that ran without a claim is written completed where the key has
    /// no record: attempt 1, the output, the intent's input and call, nothing held.
    #[test]
    fn an_unclaimed_call_is_recorded_on_a_key_without_a_record() {
        let t = transition("k", None, record_op(), NOW).unwrap();
        let written = t.write.expect("a record where none was");
        assert_eq!(written.state, RecordState::Completed);
        assert_eq!(written.attempt, 1);
        assert_eq!(written.output, Some(serde_json::json!({ "refund": "r-9" })));
        assert_eq!(
            (written.input.clone(), written.fingerprint.as_str()),
            (intent(None).input, "f2")
        );
        assert_eq!((written.created_at, written.updated_at), (NOW, NOW));
        assert_eq!(written.expires_at, Some(NOW + 60_000));
        assert_eq!((written.lease_until, written.reason.as_deref()), (None, None));
        assert_eq!(t.outcome, OpOutcome::Done(written.clone()));
        assert!(t.audit.is_none());
        assert!(record_op().needs_flush(), "the call's only write is flushed");
        assert_eq!(record_op().name(), "record");
    }

    /// Over a released record (nothing happened) it follows it: the attempt one above, its
    /// creation kept. Over an expired record it is new, the attempt still above the old one.
    #[test]
    fn an_unclaimed_call_follows_a_released_or_expired_record() {
        for (state, expires_at, created_at) in [
            (RecordState::Released, None, NOW - 100),
            (RecordState::Completed, Some(NOW - 1), NOW),
        ] {
            let mut rec = records().remove(0);
            (rec.state, rec.expires_at, rec.lease_until) = (state, expires_at, None);
            let t = transition("k", Some(&rec), record_op(), NOW).unwrap();
            let written = t.write.expect("written");
            assert_eq!(
                (written.state, written.attempt, written.created_at),
                (RecordState::Completed, 4, created_at),
                "over {state}"
            );
        }
    }

    /// Over any other live record nothing is written, and the caller learns what the key holds:
    /// a result recorded meanwhile is the one to replay.
    #[test]
    fn an_unclaimed_call_leaves_any_other_record_and_says_what_it_is() {
        use RecordState as S;
        for (state, expected) in [
            (S::Completed, OpOutcome::Recorded as Answer),
            (S::Claimed, OpOutcome::InFlight),
            (S::Pending, OpOutcome::InFlight),
            (S::Approved, OpOutcome::InFlight),
            (S::InDoubt, OpOutcome::InDoubt),
            (S::AwaitingApproval, OpOutcome::AwaitingApproval),
            (S::Denied, OpOutcome::Denied),
            (S::Compensated, OpOutcome::Compensated),
        ] {
            let mut rec = records().remove(0);
            rec.state = state;
            let t = transition("k", Some(&rec), record_op(), NOW).unwrap();
            assert_eq!(t.write, None, "nothing written over {state}");
            assert_eq!(t.outcome, expected(rec.clone()), "over {state}");
        }
        let mut other = records().remove(0);
        (other.state, other.tool) = (S::Completed, "payout".into());
        assert!(matches!(
            transition("k", Some(&other), record_op(), NOW),
            Err(Rejected::KeyOfAnotherTool { recorded_tool, .. }) if recorded_tool == "payout"
        ));
    }

    fn in_doubt() -> EffectRecord {
        EffectRecord {
            state: RecordState::InDoubt,
            lease_until: None,
            output: None,
            reason: Some("timed out".into()),
            approval_role: None,
            decided_by: None,
            ..records().remove(0)
        }
    }

    fn resolve(by: &str, verdict: Verdict) -> Op {
        Op::Resolve { by: by.into(), verdict }
    }

    fn amend(by: &str, verdict: Verdict) -> Op {
        Op::Amend { by: by.into(), verdict }
    }

    fn applied(output: Value) -> Verdict {
        Verdict::Applied { output }
    }

    /// Apply `op` and return the record written (panics if refused or nothing is written).
    fn step(rec: &EffectRecord, op: Op) -> EffectRecord {
        let name = op.name();
        let t = transition("k", Some(rec), op, NOW).unwrap_or_else(|e| panic!("{name} refused: {e}"));
        EffectRecord::clone(&t.write.unwrap_or_else(|| panic!("{name} writes")))
    }

    fn refused(rec: &EffectRecord, op: Op) -> String {
        match transition("k", Some(rec), op, NOW) {
            Err(e @ Rejected::InvalidState { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// A person corrects their resolution, as often as needed: a wrong-shaped output, then
    /// `applied` when the effect did not happen, then back; each amendment is audited.
    /// Four eyes: a call is requested by the principal its run (or thread) is scoped to, as
    /// the MCP server scopes them (`%` and `/` in the name escaped), and by nobody else.
    #[test]
    fn a_call_is_requested_by_the_principal_of_its_run() {
        let mut rec = records().remove(0);
        rec.run_id = "maria/r1".into();
        assert!(rec.requested_by("maria"));
        assert!(!rec.requested_by("mari") && !rec.requested_by("maria/r1") && !rec.requested_by("olaf"));
        rec.run_id = "a%2Fb%25c/r1".into();
        assert!(rec.requested_by("a/b%c"));
        assert!(!rec.requested_by("a"));
        rec.run_id = "desk".into();
        rec.thread_id = Some("maria/t1".into());
        assert!(rec.requested_by("maria"));
    }

    /// An approval names the input the person was shown: a stale one (the model re-parked
    /// another input under the key) is refused, writes nothing, and shows the new input.
    #[test]
    fn an_approval_is_for_the_input_it_names() {
        let mut parked = records()
            .into_iter()
            .find(|r| r.state == RecordState::AwaitingApproval && r.approval_role.is_some() && !r.is_stale(NOW))
            .unwrap();
        parked.input = serde_json::json!({ "amount": 9_999_999 });
        let approve = |fingerprint: &str| Op::Approve {
            by: "ana".into(),
            role: "finance".into(),
            fingerprint: fingerprint.into(),
        };
        match transition("k", Some(&parked), approve("f0"), NOW) {
            Err(e @ Rejected::InputChanged { .. }) => {
                let text = e.to_string();
                assert!(text.contains("input changed") && text.contains("9999999"), "{text}");
                assert!(text.contains("f0") && text.contains("f1"), "{text}");
            }
            other => panic!("a stale approval was not refused: {other:?}"),
        }
        let t = transition("k", Some(&parked), approve("f1"), NOW).unwrap();
        assert_eq!(t.write.unwrap().state, RecordState::Approved);
        assert_eq!(t.audit.unwrap().detail.unwrap()["fingerprint"], "f1");
    }

    #[test]
    fn a_resolution_can_be_amended() {
        let typo = step(&in_doubt(), resolve("ana", applied(serde_json::json!("msg-1"))));
        assert_eq!(typo.resolved_by(), Some("ana"));

        let fixed = step(&typo, amend("bob", applied(serde_json::json!({ "id": "msg-1" }))));
        assert_eq!(fixed.state, RecordState::Completed);
        assert_eq!(fixed.output, Some(serde_json::json!({ "id": "msg-1" })));
        assert_eq!(fixed.decided_by.as_deref(), Some("bob"));
        assert_eq!(fixed.reason.as_deref(), Some("resolved as applied by bob"));
        assert_eq!(fixed.attempt, typo.attempt, "an amendment fences no one");
        assert_eq!(fixed.resolved_by(), Some("bob"));

        let undone = step(&fixed, amend("bob", Verdict::NotApplied));
        assert_eq!(undone.state, RecordState::Released);
        assert_eq!(undone.output, None);
        assert_eq!(undone.resolved_by(), Some("bob"));

        let again = step(&undone, amend("ana", applied(serde_json::json!({ "id": "msg-2" }))));
        assert_eq!(
            (again.state, again.output.clone(), again.resolved_by()),
            (
                RecordState::Completed,
                Some(serde_json::json!({ "id": "msg-2" })),
                Some("ana")
            )
        );

        let entry = amend("bob", Verdict::NotApplied)
            .audit("k", NOW)
            .expect("an amendment is audited");
        assert_eq!((entry.actor.as_str(), entry.action.as_str()), ("bob", "amend"));
        assert_eq!(entry.detail, Some(serde_json::json!({ "verdict": "not-applied" })));
    }

    /// A record a journal wrote before amendments existed (same columns) can be amended.
    #[test]
    fn an_old_resolution_can_be_amended() {
        let old = EffectRecord {
            state: RecordState::Completed,
            output: Some(serde_json::json!("wrong shape")),
            reason: Some("resolved as applied by ana".into()),
            decided_by: Some("ana".into()),
            ..in_doubt()
        };
        let fixed = step(&old, amend("ana", applied(serde_json::json!({ "id": 1 }))));
        assert_eq!(fixed.output, Some(serde_json::json!({ "id": 1 })));
    }

    /// A plain resolve of a person's resolution is refused with the command that amends it.
    #[test]
    fn resolving_a_resolution_again_says_how_to_amend() {
        let done = step(&in_doubt(), resolve("ana", applied(serde_json::json!(1))));
        let msg = refused(&done, resolve("ana", Verdict::NotApplied));
        assert!(
            msg.starts_with("cannot resolve `k`: it is completed: ana resolved it as applied"),
            "{msg}"
        );
        assert!(msg.contains("`effect-tool resolve k --not-applied --amend`"), "{msg}");
        assert!(msg.contains("--applied --output '<json>' --amend"), "{msg}");

        let released = step(&in_doubt(), resolve("ana", Verdict::NotApplied));
        let msg = refused(&released, resolve("ana", applied(serde_json::json!(1))));
        assert!(msg.contains("ana resolved it as not applied"), "{msg}");
        assert!(msg.contains("--amend"), "{msg}");
    }

    /// What the tool recorded, or the engine did since a resolution, is never amended.
    #[test]
    fn only_a_standing_resolution_can_be_amended() {
        let fix = || amend("ana", applied(serde_json::json!(2)));
        // Completed by the tool, also after a person approved the call.
        let mut approved = in_doubt();
        approved.state = RecordState::Approved;
        approved.decided_by = Some("carol".into());
        // Approved for the input the claim carries.
        approved.fingerprint = intent(None).fingerprint;
        let claim = Op::Claim {
            intent: intent(None),
            lease_ms: 500,
            takeover_in_doubt: false,
        };
        let running = step(&approved, claim.clone());
        assert_eq!(running.decided_by.as_deref(), Some("carol"));
        let attempt = running.attempt;
        let by_tool = step(
            &running,
            Op::Complete {
                attempt,
                output: serde_json::json!(1),
            },
        );
        assert_eq!(by_tool.resolved_by(), None);
        let msg = refused(&by_tool, fix());
        assert!(msg.contains("the tool recorded its output itself"), "{msg}");
        let msg = refused(&by_tool, resolve("ana", Verdict::NotApplied));
        assert!(msg.contains("the tool recorded its output itself"), "{msg}");
        assert!(!msg.contains("--amend"), "{msg}");
        // Released by the engine (a definitive failure), even with an approver on the record.
        let failed = step(
            &running,
            Op::Release {
                attempt,
                reason: Some("card declined".into()),
            },
        );
        assert_eq!(failed.resolved_by(), None);
        refused(&failed, fix());

        // Resolved as not applied, then claimed by a call: the resolution is gone.
        let released = step(&in_doubt(), resolve("ana", Verdict::NotApplied));
        let claimed = step(&released, claim);
        assert_eq!((claimed.decided_by.as_deref(), claimed.reason.as_deref()), (None, None));
        let msg = refused(&claimed, fix());
        assert!(msg.contains("live claim"), "{msg}");
        let attempt = claimed.attempt;
        for (op, state) in [
            (
                Op::Complete {
                    attempt,
                    output: serde_json::json!(3),
                },
                RecordState::Completed,
            ),
            (Op::Release { attempt, reason: None }, RecordState::Released),
        ] {
            let after = step(&claimed, op);
            assert_eq!(after.state, state);
            assert_eq!(after.resolved_by(), None);
            refused(&after, fix());
        }

        // Nothing resolved yet: resolve, not amend.
        let msg = refused(&in_doubt(), fix());
        assert!(msg.contains("nothing to amend"), "{msg}");
        assert!(msg.contains("`effect-tool resolve k --not-applied`"), "{msg}");
        // A compensated resolution, a denial, and a reason that names someone else.
        let done = step(&in_doubt(), resolve("ana", applied(serde_json::json!(1))));
        refused(&step(&done, Op::MarkCompensated { by: "saga".into() }), fix());
        let mut other = done.clone();
        other.decided_by = Some("mallory".into());
        assert_eq!(other.resolved_by(), None);
        refused(&other, fix());
        assert!(matches!(
            transition("k", None, fix(), NOW),
            Err(Rejected::NotFound { .. })
        ));
    }
}
