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
//! A claim whose lease has expired is *stale*: the next claim takes it over with a higher
//! attempt number (fencing the old holder out) and is told what it took over, so the engine can
//! reconcile. Records are plain data with an explicit [`RECORD_VERSION`]; stored data never
//! depends on Rust type layout.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::class::EffectClass;

/// The version of the record schema this crate reads and writes.
pub const RECORD_VERSION: u32 = 1;

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
}

impl RecordState {
    /// Every state.
    pub const ALL: [RecordState; 8] = [
        RecordState::Claimed,
        RecordState::Completed,
        RecordState::InDoubt,
        RecordState::AwaitingApproval,
        RecordState::Approved,
        RecordState::Denied,
        RecordState::Released,
        RecordState::Compensated,
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
        }
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
    /// The record schema version ([`RECORD_VERSION`]).
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
}

impl EffectRecord {
    /// Whether the record is claimed and its lease has expired at `now`.
    pub fn is_stale(&self, now: Millis) -> bool {
        self.state == RecordState::Claimed && self.lease_until.is_none_or(|l| l <= now)
    }

    /// Whether the record's ttl has passed at `now`.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }

    /// Check the record's schema version.
    pub fn check_version(&self) -> Result<(), crate::StoreError> {
        if self.version == RECORD_VERSION {
            Ok(())
        } else {
            Err(crate::StoreError::UnsupportedVersion {
                key: self.key.clone(),
                found: self.version,
                supported: RECORD_VERSION,
            })
        }
    }
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
}

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
    /// A person approves a call awaiting approval.
    Approve {
        /// Who.
        by: String,
        /// The role they approve as; must match the record's role.
        role: String,
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
}

impl Op {
    /// The operation's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Claim { .. } => "claim",
            Op::Renew { .. } => "renew",
            Op::Complete { .. } => "complete",
            Op::Release { .. } => "release",
            Op::MarkInDoubt { .. } => "mark-in-doubt",
            Op::Resolve { .. } => "resolve",
            Op::Approve { .. } => "approve",
            Op::Deny { .. } => "deny",
            Op::MarkCompensated { .. } => "mark-compensated",
        }
    }

    /// The audit entry this operation leaves when it succeeds, for the operations a person
    /// performs (resolve, approve, deny, compensation).
    pub fn audit(&self, key: &str, now: Millis) -> Option<AuditEntry> {
        let (actor, action, detail) = match self {
            Op::Resolve { by, verdict } => (by, "resolve", serde_json::to_value(verdict).ok()),
            Op::Approve { by, role } => (by, "approve", Some(serde_json::json!({ "role": role }))),
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
    /// What (`resolve`, `approve`, `deny`, `compensate`).
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
}

/// The result of [`transition`]: the record to write (if it changed) and the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The record to write, or `None` when nothing changes.
    pub write: Option<std::sync::Arc<EffectRecord>>,
    /// What the caller learns.
    pub outcome: OpOutcome,
}

/// The state machine: apply `op` to the `current` record of `key` at time `now`.
///
/// Every backend calls this inside its atomic section (a transaction or a lock) and writes
/// `write` back if it is `Some`.
pub fn transition(key: &str, current: Option<&EffectRecord>, op: &Op, now: Millis) -> Result<Transition, Rejected> {
    use RecordState as S;

    let unchanged = |outcome| Ok(Transition { write: None, outcome });
    let invalid = |rec: &EffectRecord, hint: &str| {
        Err(Rejected::InvalidState {
            key: key.to_owned(),
            op: op.name(),
            state: rec.state,
            hint: hint.to_owned(),
        })
    };
    let fenced = |rec: &EffectRecord, attempt: u32| {
        Err(Rejected::Fenced {
            key: key.to_owned(),
            attempt,
            current: rec.attempt,
            state: rec.state,
        })
    };
    // The fencing token never goes back, even when an expired record counts as absent: a
    // stalled writer of an old attempt must not find its number reused by a new claim.
    let floor = current.map_or(0, |r| r.attempt);
    // An expired record (ttl passed) counts as absent for new claims.
    let current = current.filter(|r| !(r.is_expired(now) && !r.state.needs_person() && r.state != S::Claimed));

    match op {
        Op::Claim {
            intent,
            lease_ms,
            takeover_in_doubt,
        } => {
            let claim = |prev: Option<&EffectRecord>, previous: Option<RecordState>| {
                let attempt = prev.map_or(floor, |p| p.attempt) + 1;
                let mut rec = fresh(key, intent, now, prev, floor);
                rec.state = S::Claimed;
                rec.attempt = attempt;
                rec.lease_until = Some(now + *lease_ms as i64);
                if prev.is_some_and(|p| p.state == S::Approved) {
                    rec.approval_role = prev.and_then(|p| p.approval_role.clone());
                    rec.decided_by = prev.and_then(|p| p.decided_by.clone());
                }
                Ok(Transition {
                    write: Some(std::sync::Arc::new(rec)),
                    outcome: OpOutcome::Claimed {
                        attempt,
                        previous,
                        before: prev.map(|p| Box::new(p.clone())),
                    },
                })
            };
            match current {
                None => match &intent.approval {
                    Some(role) => park(key, intent, now, None, floor, role),
                    None => claim(None, None),
                },
                Some(rec) => match rec.state {
                    S::Released => match &intent.approval {
                        Some(role) => park(key, intent, now, Some(rec), floor, role),
                        None => claim(Some(rec), None),
                    },
                    S::Approved => claim(Some(rec), None),
                    S::Completed => unchanged(OpOutcome::Recorded(rec.clone())),
                    S::Claimed if !rec.is_stale(now) => unchanged(OpOutcome::InFlight(rec.clone())),
                    S::Claimed => claim(Some(rec), Some(S::Claimed)),
                    S::InDoubt if *takeover_in_doubt => claim(Some(rec), Some(S::InDoubt)),
                    S::InDoubt => unchanged(OpOutcome::InDoubt(rec.clone())),
                    S::AwaitingApproval => unchanged(OpOutcome::AwaitingApproval(rec.clone())),
                    S::Denied => unchanged(OpOutcome::Denied(rec.clone())),
                    S::Compensated => unchanged(OpOutcome::Compensated(rec.clone())),
                },
            }
        }
        Op::Renew { attempt, lease_ms } => {
            let rec = existing(key, current)?;
            if rec.state != S::Claimed || rec.attempt != *attempt {
                return fenced(rec, *attempt);
            }
            let mut next = rec.clone();
            next.lease_until = Some(now + *lease_ms as i64);
            next.updated_at = now;
            done(next)
        }
        Op::Complete { attempt, output } => {
            let rec = existing(key, current)?;
            if rec.state != S::Claimed || rec.attempt != *attempt {
                return fenced(rec, *attempt);
            }
            let mut next = rec.clone();
            next.state = S::Completed;
            next.output = Some(output.clone());
            next.lease_until = None;
            next.reason = None;
            next.updated_at = now;
            done(next)
        }
        Op::Release { attempt, reason } => {
            let rec = existing(key, current)?;
            if rec.state != S::Claimed || rec.attempt != *attempt {
                return fenced(rec, *attempt);
            }
            let mut next = rec.clone();
            next.state = S::Released;
            next.lease_until = None;
            next.reason = reason.clone();
            next.updated_at = now;
            done(next)
        }
        Op::MarkInDoubt { attempt, reason } => {
            let rec = existing(key, current)?;
            if rec.state != S::Claimed || rec.attempt != *attempt {
                return fenced(rec, *attempt);
            }
            let mut next = rec.clone();
            next.state = S::InDoubt;
            next.lease_until = None;
            next.reason = Some(reason.clone());
            next.updated_at = now;
            done(next)
        }
        Op::Resolve { by, verdict } => {
            let rec = existing(key, current)?;
            let resolvable = rec.state == S::InDoubt || rec.is_stale(now);
            if !resolvable {
                return invalid(
                    rec,
                    match rec.state {
                        S::Claimed => {
                            ": an attempt holds a live claim; wait for it to finish or for its lease to expire"
                        }
                        _ => ": only records in doubt (or stale claims) can be resolved",
                    },
                );
            }
            let mut next = rec.clone();
            next.lease_until = None;
            next.decided_by = Some(by.clone());
            next.updated_at = now;
            match verdict {
                Verdict::Applied { output } => {
                    next.state = S::Completed;
                    next.output = Some(output.clone());
                    next.reason = Some(format!("resolved as applied by {by}"));
                }
                Verdict::NotApplied => {
                    next.state = S::Released;
                    next.output = None;
                    next.reason = Some(format!("resolved as not applied by {by}"));
                }
            }
            done(next)
        }
        Op::Approve { by, role } => {
            let rec = existing(key, current)?;
            if rec.state != S::AwaitingApproval {
                return invalid(rec, ": only calls awaiting approval can be approved");
            }
            let needed = rec.approval_role.clone().unwrap_or_default();
            if !needed.is_empty() && &needed != role {
                return Err(Rejected::WrongRole {
                    key: key.to_owned(),
                    given: role.clone(),
                    needed,
                });
            }
            let mut next = rec.clone();
            next.state = S::Approved;
            next.decided_by = Some(by.clone());
            next.updated_at = now;
            done(next)
        }
        Op::Deny { by, reason } => {
            let rec = existing(key, current)?;
            if rec.state != S::AwaitingApproval {
                return invalid(rec, ": only calls awaiting approval can be denied");
            }
            let mut next = rec.clone();
            next.state = S::Denied;
            next.decided_by = Some(by.clone());
            next.reason = reason.clone();
            next.updated_at = now;
            done(next)
        }
        Op::MarkCompensated { by } => {
            let rec = existing(key, current)?;
            if rec.state != S::Completed {
                return invalid(rec, ": only completed effects can be compensated");
            }
            let mut next = rec.clone();
            next.state = S::Compensated;
            next.decided_by = Some(by.clone());
            next.updated_at = now;
            done(next)
        }
    }
}

fn existing<'a>(key: &str, current: Option<&'a EffectRecord>) -> Result<&'a EffectRecord, Rejected> {
    current.ok_or_else(|| Rejected::NotFound { key: key.to_owned() })
}

fn done(rec: EffectRecord) -> Result<Transition, Rejected> {
    let rec = std::sync::Arc::new(rec);
    Ok(Transition {
        outcome: OpOutcome::Done(rec.clone()),
        write: Some(rec),
    })
}

fn fresh(key: &str, intent: &Intent, now: Millis, prev: Option<&EffectRecord>, floor: u32) -> EffectRecord {
    EffectRecord {
        version: RECORD_VERSION,
        key: key.to_owned(),
        tool: intent.tool.clone(),
        class: intent.class,
        run_id: intent.run_id.clone(),
        thread_id: intent.thread_id.clone(),
        call_id: intent.call_id.clone(),
        fingerprint: intent.fingerprint.clone(),
        input: intent.input.clone(),
        state: RecordState::Claimed,
        attempt: prev.map_or(floor, |p| p.attempt),
        lease_until: None,
        output: None,
        reason: None,
        approval_role: intent.approval.clone(),
        decided_by: None,
        created_at: prev.map_or(now, |p| p.created_at),
        updated_at: now,
        expires_at: intent.ttl_ms.map(|t| now + t as i64),
    }
}

fn park(
    key: &str,
    intent: &Intent,
    now: Millis,
    prev: Option<&EffectRecord>,
    floor: u32,
    role: &str,
) -> Result<Transition, Rejected> {
    let mut rec = fresh(key, intent, now, prev, floor);
    rec.state = RecordState::AwaitingApproval;
    rec.approval_role = Some(role.to_owned());
    Ok(Transition {
        outcome: OpOutcome::AwaitingApproval(rec.clone()),
        write: Some(std::sync::Arc::new(rec)),
    })
}

/// The current time in milliseconds since the Unix epoch.
pub fn now_millis() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}
