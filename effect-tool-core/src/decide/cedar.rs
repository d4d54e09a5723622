//! Policy as code (feature `policy`): a deployment's [Cedar](https://www.cedarpolicy.com)
//! policies allow a call, deny it with a reason for the model, or require an approval by a
//! role; the engine asks them before the claim (see [`crate::engine`], stage 1b).
//!
//! # The vocabulary
//!
//! Every call is two Cedar requests over the same principal, resource and context:
//!
//! | Cedar | what it is |
//! |---|---|
//! | `principal` | `Principal::"<sub>"` (the run's [principal](crate::RunContext::principal)), with `authenticated: Bool`; a run without one is `Principal::"anonymous"`, `authenticated == false` |
//! | `resource` | the tool: `Tool::<name>::"<name>"`, one entity type per tool, with `class: String` (`pure`, `read-only`, `idempotent`, `compensable`, `irreversible`), `approval?: String` (the role its declaration names) and `args`, a record of its arguments typed from its JSON Schema |
//! | `context.run` | `{ id: String, thread?: String, agent?: String }` |
//! | `Action::"call"` | may the call happen at all? |
//! | `Action::"call_without_approval"` | may it happen without a person's approval? A member of `Action::"call"`: a policy on `action in Action::"call"` covers both |
//!
//! - **Deny with a reason**: a `forbid` of `Action::"call"` annotated `@reason("...")`. The
//!   reason reaches the model as the tool's result ([`EffectError::Denied`](crate::EffectError::Denied)),
//!   so write it for the model: what is not allowed and what it may do instead. A call no
//!   `permit` allows is denied too (Cedar denies by default), with a reason that says so.
//! - **Require approval by a role**: a `forbid` of `Action::"call_without_approval"` annotated
//!   `@approval_role("finance")`. The call parks for that role's approval, exactly as a
//!   `#[tool(approval = "finance")]` declaration parks it.
//! - **Allow**: a `permit` of `action in Action::"call"` (both actions).
//! - `@id("refund-limit")` names a policy in the audit trail and in `policy check`'s messages.
//!
//! ```cedar
//! @id("everyone-calls")
//! permit(principal, action in Action::"call", resource);
//!
//! @id("refund-limit")
//! @reason("refunds above 5000 cents are handled by a person: offer to open a ticket")
//! forbid(principal, action == Action::"call", resource is Tool::issue_refund)
//! when { resource.args.amount_cents > 5000 };
//!
//! @id("irreversible-needs-ops")
//! @approval_role("ops")
//! forbid(principal, action == Action::"call_without_approval", resource)
//! when { resource.class == "irreversible" };
//! ```
//!
//! Why `forbid` for an approval: Cedar's `forbid` overrides every `permit`, so no later
//! `permit` can quietly lift an approval another policy asked for, and an approval is a
//! restriction, which is what `forbid` expresses. Why two actions rather than an effect
//! attribute: the validator checks them like any action, and a policy about calling at all
//! (`action in Action::"call"`) covers calling without approval too.
//!
//! # The floor
//!
//! What a `#[tool]` declares stays: a policy adds denials and approvals, never removes one. A
//! call whose declaration needs approval parks for its declared role whatever the policies say
//! (a policy that asks another role is noted in the audit); only a `Deny` stops it earlier.
//!
//! # Failing closed
//!
//! A `forbid` that cannot be evaluated for a request (an argument missing, an integer Cedar
//! cannot hold) denies the call, naming the policy; a call that is permitted but not without
//! approval, and whose denying policies name no `@approval_role`, parks for the tool's declared
//! role, or is denied if it declares none.
//!
//! # Checking policies
//!
//! [`schema`] makes a Cedar schema from a toolkit's tools ([`PolicyTool`], from their JSON
//! Schemas); [`Policies::check`] validates the policies against it in Cedar's strict mode, so a
//! policy naming an argument a tool does not have fails (`effect-tool policy check`). JSON
//! Schema types map as: `string` (and string enums) → `String`, `integer` → `Long`, `boolean` →
//! `Bool`, `array` → `Set`, `object` with properties → a record; a field not in `required`, or
//! nullable, is optional (`has` it first). Fields of other types (numbers with fractions, unions)
//! and sensitive fields are left out: a policy cannot name them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Effect, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicyId, PolicySet, Request, RestrictedExpression, Schema, SchemaFragment, ValidationMode, Validator,
};
use serde_json::{Map, Value, json};

use crate::value::class::EffectClass;

/// The Cedar namespace of the tools' entity types (`Tool::issue_refund`).
pub const TOOL_NAMESPACE: &str = "Tool";
/// The principal's entity type.
pub const PRINCIPAL_TYPE: &str = "Principal";
/// The principal of a run that has none.
pub const ANONYMOUS: &str = "anonymous";
/// The action asked for every call.
pub const ACTION_CALL: &str = "call";
/// The action asked for a call to run without a person's approval (a member of `call`).
pub const ACTION_CALL_WITHOUT_APPROVAL: &str = "call_without_approval";
/// The annotation of a `forbid` whose text the model reads when it denies a call.
pub const REASON: &str = "reason";
/// The annotation of a `forbid` of `call_without_approval` naming the role that approves.
pub const APPROVAL_ROLE: &str = "approval_role";
/// The annotation that names a policy (its id in the audit and in messages).
pub const ID: &str = "id";

/// Whether the policies' decisions are enforced or only logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyMode {
    /// Denials stop the call, approvals park it.
    #[default]
    Enforce,
    /// Every call runs as its declaration says; what the policies would have decided is
    /// audited (`policy-shadow`), counted and logged. Turn it on before enforcing new policies.
    Shadow,
}

impl PolicyMode {
    /// `enforce` or `shadow`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Enforce => "enforce",
            PolicyMode::Shadow => "shadow",
        }
    }
}

/// What is wrong with a set of policies or a toolkit's schema. Each message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The text is not Cedar.
    #[error("the policies do not parse: {0}")]
    Parse(String),
    /// The policies are Cedar, but cannot be used as they are (a template, two policies with one `@id`).
    #[error("{0}")]
    Unusable(String),
    /// A tool cannot be named in Cedar, or the schema made from the tools is refused.
    #[error("{0}")]
    Schema(String),
    /// The policies do not validate against the toolkit's schema: one message per problem.
    #[error("the policies do not fit the tools' schema:\n{}", .0.iter().map(|m| format!("  - {m}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<String>),
}

/// One tool as the policy schema sees it: what its declaration and JSON Schema say.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PolicyTool {
    /// The tool's name (a Cedar identifier: letters, digits, `_`).
    pub name: String,
    /// Its effect class.
    pub class: EffectClass,
    /// The role its declaration asks to approve, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Its sensitive argument fields (left out of the schema and of every request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<String>,
    /// The JSON Schema of its arguments, as exported to models.
    pub input_schema: Value,
}

/// One call, as the policies are asked about it.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// The run's principal (`None`: [`ANONYMOUS`]).
    pub principal: Option<&'a str>,
    /// The run.
    pub run_id: &'a str,
    /// The run's thread, if any.
    pub thread_id: Option<&'a str>,
    /// The run's agent, if any.
    pub agent: Option<&'a str>,
    /// The tool.
    pub tool: &'a str,
    /// Its class.
    pub class: EffectClass,
    /// The role its declaration names, if any (whether or not this call needs it).
    pub declared_approval: Option<&'a str>,
    /// The arguments (an object), sensitive fields already left out.
    pub args: &'a Value,
}

/// What the policies decided for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// The call may run without a person (its declaration may still ask one).
    Allow,
    /// The call may not run: `reason` is for the model.
    Deny {
        /// Why, for the model (the `@reason` of the denying policies).
        reason: String,
        /// The ids of the policies that decided it.
        policies: Vec<String>,
    },
    /// The call runs once `role` approves it.
    RequireApproval {
        /// The role.
        role: String,
        /// The ids of the policies that decided it.
        policies: Vec<String>,
    },
}

impl PolicyDecision {
    /// `allow`, `deny` or `require-approval` (the metric's `decision` label).
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyDecision::Allow => "allow",
            PolicyDecision::Deny { .. } => "deny",
            PolicyDecision::RequireApproval { .. } => "require-approval",
        }
    }

    /// The ids of the policies that decided it (none for `Allow`).
    pub fn policies(&self) -> &[String] {
        match self {
            PolicyDecision::Allow => &[],
            PolicyDecision::Deny { policies, .. } | PolicyDecision::RequireApproval { policies, .. } => policies,
        }
    }
}

/// A deployment's Cedar policies, parsed, with their [`PolicyMode`].
#[derive(Debug, Clone)]
pub struct Policies {
    set: PolicySet,
    mode: PolicyMode,
    /// The text parsed, for the lines and columns of problems.
    text: std::sync::Arc<str>,
}

impl Policies {
    /// Parse `text` (Cedar policies; `@id("...")` names a policy). Templates are refused.
    pub fn parse(text: &str) -> Result<Policies, PolicyError> {
        let parsed = PolicySet::from_str(text).map_err(|e| PolicyError::Parse(describe_parse(&e, text)))?;
        if parsed.templates().next().is_some() {
            return Err(PolicyError::Unusable(
                "the policies hold a template (a `?principal` or `?resource` slot): effect-tool evaluates static policies only; write the principal or the tool out".to_owned(),
            ));
        }
        let mut set = PolicySet::new();
        for policy in parsed.policies() {
            let renamed = match policy.annotation(ID) {
                Some(id) => policy.new_id(PolicyId::new(id)),
                None => policy.clone(),
            };
            let id = renamed.id().to_string();
            set.add(renamed).map_err(|_| {
                PolicyError::Unusable(format!(
                    "two policies are named `{id}`: give each its own `@id(\"...\")`"
                ))
            })?;
        }
        Ok(Policies {
            set,
            mode: PolicyMode::Enforce,
            text: text.into(),
        })
    }

    /// Read and parse the policies of the file `path`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Policies, PolicyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| PolicyError::Unusable(format!("cannot read the policies `{}`: {e}", path.display())))?;
        Policies::parse(&text)
    }

    /// The same policies in `mode`.
    pub fn with_mode(mut self, mode: PolicyMode) -> Policies {
        self.mode = mode;
        self
    }

    /// The same policies, only logged ([`PolicyMode::Shadow`]).
    pub fn shadow(self) -> Policies {
        self.with_mode(PolicyMode::Shadow)
    }

    /// Whether the decisions are enforced.
    pub fn mode(&self) -> PolicyMode {
        self.mode
    }

    /// How many policies there are.
    pub fn len(&self) -> usize {
        self.set.policies().count()
    }

    /// Whether there are none (every call is then denied: Cedar denies what no policy permits).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Validate the policies against the schema of `tools` ([`schema`]), in Cedar's strict
    /// mode: an argument, a tool or an action the tools do not have is an error. `Ok` holds
    /// advice that is no error (a `forbid` without `@reason` or `@approval_role`).
    pub fn check(&self, tools: &[PolicyTool]) -> Result<Vec<String>, PolicyError> {
        let schema = Schema::from_json_value(schema(tools)?)
            .map_err(|e| PolicyError::Schema(format!("the tools' Cedar schema is refused: {e}")))?;
        let result = Validator::new(schema).validate(&self.set, ValidationMode::Strict);
        if !result.validation_passed() {
            let mut problems: Vec<String> = result
                .validation_errors()
                .map(|e| located(e, e.to_string(), &self.text))
                .collect();
            problems.sort();
            return Err(PolicyError::Invalid(problems));
        }
        let mut advice: Vec<String> = result
            .validation_warnings()
            .map(|w| located(w, w.to_string(), &self.text))
            .collect();
        for policy in self.set.policies() {
            if policy.effect() != Effect::Forbid {
                continue;
            }
            let (reason, role) = (policy.annotation(REASON), policy.annotation(APPROVAL_ROLE));
            if reason.is_none() && role.is_none() {
                advice.push(format!(
                    "policy `{}` forbids without `@reason(\"...\")` or `@approval_role(\"...\")`: a denied call tells the model only that a policy denied it, an approval it asks for goes to the tool's declared role (or is a denial)",
                    policy.id()
                ));
            }
        }
        Ok(advice)
    }

    /// What the policies decide for `request`.
    pub fn evaluate(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        let parts = match Parts::of(request) {
            Ok(parts) => parts,
            Err(why) => {
                return PolicyDecision::Deny {
                    reason: format!(
                        "`{}` cannot be checked against the deployment's policies ({why}); tell the user",
                        request.tool
                    ),
                    policies: Vec::new(),
                };
            }
        };
        let authorizer = Authorizer::new();
        let unchecked = |why: String| PolicyDecision::Deny {
            reason: format!(
                "`{}` cannot be checked against the deployment's policies ({why}); tell the user",
                request.tool
            ),
            policies: Vec::new(),
        };
        let asked = |action: &EntityUid| {
            let request = Request::new(
                parts.principal.clone(),
                action.clone(),
                parts.resource.clone(),
                parts.context.clone(),
                None,
            )
            .map_err(|e| e.to_string())?;
            Ok::<_, String>(authorizer.is_authorized(&request, &self.set, &parts.entities))
        };

        // Deny: may the call happen at all? A forbid that failed to evaluate denies too.
        let call = match asked(&parts.call) {
            Ok(response) => response,
            Err(why) => return unchecked(why),
        };
        let failed_forbids = self.failed_forbids(&call);
        if call.decision() == CedarDecision::Deny || !failed_forbids.is_empty() {
            let mut policies: Vec<String> = call.diagnostics().reason().map(ToString::to_string).collect();
            policies.sort();
            let mut reasons: Vec<String> = call
                .diagnostics()
                .reason()
                .filter_map(|id| self.set.annotation(id, REASON).map(str::to_owned))
                .collect();
            reasons.sort();
            reasons.dedup();
            if !failed_forbids.is_empty() {
                reasons.push(format!(
                    "a policy could not be checked for these arguments ({})",
                    failed_forbids.join(", ")
                ));
                policies.extend(failed_forbids);
            }
            let reason = if !reasons.is_empty() {
                reasons.join("; ")
            } else if policies.is_empty() {
                format!("no policy of this deployment permits calling `{}`", request.tool)
            } else {
                format!("the deployment's policy {} forbids it", quoted(&policies))
            };
            return PolicyDecision::Deny { reason, policies };
        }

        // Approval: may it happen without a person?
        let unattended = match asked(&parts.call_without_approval) {
            Ok(response) => response,
            Err(why) => return unchecked(why),
        };
        let failed_forbids = self.failed_forbids(&unattended);
        if unattended.decision() == CedarDecision::Allow && failed_forbids.is_empty() {
            return PolicyDecision::Allow;
        }
        let mut policies: Vec<String> = unattended
            .diagnostics()
            .reason()
            .map(ToString::to_string)
            .chain(failed_forbids)
            .collect();
        policies.sort();
        let role = policies
            .iter()
            .find_map(|id| self.set.annotation(&PolicyId::new(id), APPROVAL_ROLE))
            .or(request.declared_approval);
        match role {
            Some(role) => PolicyDecision::RequireApproval {
                role: role.to_owned(),
                policies,
            },
            None => PolicyDecision::Deny {
                reason: format!(
                    "the deployment's policies do not let `{}` run without approval, and name no role to approve it; tell the user",
                    request.tool
                ),
                policies,
            },
        }
    }

    /// The ids of the `forbid` policies whose evaluation failed in `response` (fail closed).
    fn failed_forbids(&self, response: &cedar_policy::Response) -> Vec<String> {
        let mut ids: Vec<String> = response
            .diagnostics()
            .errors()
            .map(|e| match e {
                cedar_policy::AuthorizationError::PolicyEvaluationError(e) => e.policy_id(),
            })
            .filter(|id| self.set.policy(id).is_some_and(|p| p.effect() == Effect::Forbid))
            .map(ToString::to_string)
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

/// The audit entry of a decision that was not `Allow` (actor
/// [`ENGINE_ACTOR`](crate::decide::record::ENGINE_ACTOR)): `policy-deny`, `policy-approval`, or
/// `policy-shadow` for what shadow mode would have done. Its detail names the policies, the
/// reason or role, the mode, the run and the principal; `declared` is the role the tool's
/// declaration asks for this call, which stays (the floor).
pub fn audit_entry(
    key: &str,
    decision: &PolicyDecision,
    mode: PolicyMode,
    request: &PolicyRequest<'_>,
    declared: Option<&str>,
    now: crate::decide::record::Millis,
) -> crate::decide::record::AuditEntry {
    let action = match (mode, decision) {
        (PolicyMode::Shadow, _) => "policy-shadow",
        (_, PolicyDecision::Deny { .. }) => "policy-deny",
        (_, PolicyDecision::RequireApproval { .. }) => "policy-approval",
        (_, PolicyDecision::Allow) => "policy-allow",
    };
    let mut detail = json!({
        "decision": decision.as_str(),
        "mode": mode.as_str(),
        "policies": decision.policies(),
        "tool": request.tool,
        "run_id": request.run_id,
        "principal": request.principal,
    });
    match decision {
        PolicyDecision::Deny { reason, .. } => detail["reason"] = json!(reason),
        PolicyDecision::RequireApproval { role, .. } => {
            detail["role"] = json!(role);
            if let Some(declared) = declared {
                // The declaration's role stays: the record waits for one role.
                detail["declared_role"] = json!(declared);
            }
        }
        PolicyDecision::Allow => {}
    }
    crate::decide::record::AuditEntry {
        key: key.to_owned(),
        at: now,
        actor: crate::decide::record::ENGINE_ACTOR.to_owned(),
        action: action.to_owned(),
        detail: Some(detail),
    }
}

/// `` `a`, `b` ``.
fn quoted(ids: &[String]) -> String {
    ids.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
}

/// Every parse error with its place in the text.
fn describe_parse(e: &cedar_policy::ParseErrors, text: &str) -> String {
    e.iter()
        .map(|err| located(err, err.to_string(), text))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `message` prefixed with the line and column of `diagnostic`'s first span in `text`, and
/// followed by its help, if any.
fn located(diagnostic: &dyn miette::Diagnostic, message: String, text: &str) -> String {
    let at = diagnostic
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset())
        .filter(|&offset| offset <= text.len() && text.is_char_boundary(offset))
        .map(|offset| {
            let before = &text[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        })
        .unwrap_or_default();
    match diagnostic.help() {
        Some(help) => format!("{at}{message} (help: {help})"),
        None => format!("{at}{message}"),
    }
}

/// The Cedar request's parts for one call.
struct Parts {
    principal: EntityUid,
    resource: EntityUid,
    call: EntityUid,
    call_without_approval: EntityUid,
    context: Context,
    entities: Entities,
}

impl Parts {
    fn of(request: &PolicyRequest<'_>) -> Result<Parts, String> {
        let tool_type = tool_type(request.tool)?;
        let resource = EntityUid::from_type_name_and_id(tool_type, EntityId::new(request.tool));
        let principal_type = EntityTypeName::from_str(PRINCIPAL_TYPE).map_err(|e| e.to_string())?;
        let principal =
            EntityUid::from_type_name_and_id(principal_type, EntityId::new(request.principal.unwrap_or(ANONYMOUS)));
        let action_type = EntityTypeName::from_str("Action").map_err(|e| e.to_string())?;
        let call = EntityUid::from_type_name_and_id(action_type.clone(), EntityId::new(ACTION_CALL));
        let call_without_approval =
            EntityUid::from_type_name_and_id(action_type, EntityId::new(ACTION_CALL_WITHOUT_APPROVAL));

        let mut tool_attrs = HashMap::from([
            (
                "class".to_owned(),
                RestrictedExpression::new_string(request.class.as_str().to_owned()),
            ),
            ("args".to_owned(), to_cedar(request.args).unwrap_or_else(empty_record)),
        ]);
        if let Some(role) = request.declared_approval {
            tool_attrs.insert("approval".to_owned(), RestrictedExpression::new_string(role.to_owned()));
        }
        let principal_attrs = HashMap::from([(
            "authenticated".to_owned(),
            RestrictedExpression::new_bool(request.principal.is_some()),
        )]);
        let entities = Entities::from_entities(
            [
                Entity::new(resource.clone(), tool_attrs, HashSet::new()).map_err(|e| e.to_string())?,
                Entity::new(principal.clone(), principal_attrs, HashSet::new()).map_err(|e| e.to_string())?,
                Entity::new_no_attrs(call.clone(), HashSet::new()),
                Entity::new_no_attrs(call_without_approval.clone(), HashSet::from([call.clone()])),
            ],
            None,
        )
        .map_err(|e| e.to_string())?;

        let mut run = vec![(
            "id".to_owned(),
            RestrictedExpression::new_string(request.run_id.to_owned()),
        )];
        if let Some(thread) = request.thread_id {
            run.push(("thread".to_owned(), RestrictedExpression::new_string(thread.to_owned())));
        }
        if let Some(agent) = request.agent {
            run.push(("agent".to_owned(), RestrictedExpression::new_string(agent.to_owned())));
        }
        let run = RestrictedExpression::new_record(run).map_err(|e| e.to_string())?;
        let context = Context::from_pairs([("run".to_owned(), run)]).map_err(|e| e.to_string())?;
        Ok(Parts {
            principal,
            resource,
            call,
            call_without_approval,
            context,
            entities,
        })
    }
}

fn empty_record() -> RestrictedExpression {
    RestrictedExpression::new_record(Vec::new()).expect("an empty record has no duplicate key")
}

/// A JSON value as a Cedar value: strings, integers Cedar can hold (64-bit signed), booleans,
/// arrays (as sets), objects (as records). `None` for what Cedar has no value for (`null`, a
/// number with a fraction or beyond `i64`): a record leaves such a field out, so a policy that
/// names it fails to evaluate (and a `forbid` then denies).
fn to_cedar(value: &Value) -> Option<RestrictedExpression> {
    match value {
        Value::Null => None,
        Value::Bool(b) => Some(RestrictedExpression::new_bool(*b)),
        Value::Number(n) => n.as_i64().map(RestrictedExpression::new_long),
        Value::String(s) => Some(RestrictedExpression::new_string(s.clone())),
        Value::Array(items) => Some(RestrictedExpression::new_set(items.iter().filter_map(to_cedar))),
        // Keys are unique in a JSON object as serde_json holds it.
        Value::Object(fields) => {
            RestrictedExpression::new_record(fields.iter().filter_map(|(k, v)| to_cedar(v).map(|v| (k.clone(), v))))
                .ok()
        }
    }
}

/// Cedar's reserved words, which cannot name an entity type.
const RESERVED: &[&str] = &[
    "true", "false", "if", "then", "else", "in", "is", "like", "has", "__cedar",
];

/// The entity type of the tool `name` (`Tool::<name>`).
fn tool_type(name: &str) -> Result<EntityTypeName, String> {
    let ident = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name);
    if !ident {
        return Err(format!(
            "the tool name `{name}` is not a Cedar identifier (letters, digits and `_`, not a reserved word), so no policy can name it; rename the tool"
        ));
    }
    EntityTypeName::from_str(&format!("{TOOL_NAMESPACE}::{name}")).map_err(|e| e.to_string())
}

/// The Cedar schema (its JSON form) of `tools`: the [vocabulary](self#the-vocabulary), one
/// entity type per tool with its arguments as a record.
pub fn schema(tools: &[PolicyTool]) -> Result<Value, PolicyError> {
    let mut tool_types = Map::new();
    let mut resource_types = Vec::new();
    let mut seen = HashSet::new();
    for tool in tools {
        tool_type(&tool.name).map_err(PolicyError::Schema)?;
        if !seen.insert(tool.name.as_str()) {
            return Err(PolicyError::Schema(format!("two tools are named `{}`", tool.name)));
        }
        let defs = Defs::of(&tool.input_schema);
        let mut args = record_type(&tool.input_schema, &defs, 0);
        if let Some(Value::Object(attrs)) = args.get_mut("attributes") {
            for field in &tool.sensitive {
                attrs.remove(field);
            }
        }
        let mut attributes = Map::new();
        attributes.insert("class".to_owned(), json!({ "type": "String" }));
        attributes.insert("approval".to_owned(), json!({ "type": "String", "required": false }));
        attributes.insert("args".to_owned(), args);
        tool_types.insert(
            tool.name.clone(),
            json!({ "shape": { "type": "Record", "attributes": attributes } }),
        );
        resource_types.push(Value::String(format!("{TOOL_NAMESPACE}::{}", tool.name)));
    }
    let applies = json!({
        "principalTypes": [PRINCIPAL_TYPE],
        "resourceTypes": resource_types,
        "context": { "type": "Record", "attributes": {
            "run": { "type": "Record", "attributes": {
                "id": { "type": "String" },
                "thread": { "type": "String", "required": false },
                "agent": { "type": "String", "required": false },
            } },
        } },
    });
    Ok(json!({
        "": {
            "entityTypes": {
                PRINCIPAL_TYPE: { "shape": { "type": "Record", "attributes": {
                    "authenticated": { "type": "Boolean" },
                } } },
            },
            "actions": {
                ACTION_CALL: { "appliesTo": applies.clone() },
                ACTION_CALL_WITHOUT_APPROVAL: { "memberOf": [{ "id": ACTION_CALL }], "appliesTo": applies },
            },
        },
        TOOL_NAMESPACE: { "entityTypes": tool_types, "actions": {} },
    }))
}

/// The Cedar schema of `tools` in Cedar's schema syntax (what `effect-tool policy schema` prints).
pub fn schema_text(tools: &[PolicyTool]) -> Result<String, PolicyError> {
    let fragment = SchemaFragment::from_json_value(schema(tools)?)
        .map_err(|e| PolicyError::Schema(format!("the tools' Cedar schema is refused: {e}")))?;
    fragment
        .to_cedarschema()
        .map_err(|e| PolicyError::Schema(format!("the tools' Cedar schema cannot be printed: {e}")))
}

/// The `$defs` (and `definitions`) of a JSON Schema, for local `$ref`s.
struct Defs<'a>(BTreeMap<String, &'a Value>);

impl<'a> Defs<'a> {
    fn of(root: &'a Value) -> Defs<'a> {
        let mut defs = BTreeMap::new();
        for (prefix, name) in [("#/$defs/", "$defs"), ("#/definitions/", "definitions")] {
            if let Some(Value::Object(map)) = root.get(name) {
                for (k, v) in map {
                    defs.insert(format!("{prefix}{k}"), v);
                }
            }
        }
        Defs(defs)
    }
}

/// How deep nested records and `$ref`s are followed (a recursive type stops here).
const MAX_DEPTH: usize = 8;

/// A JSON Schema object as a Cedar record type (no properties: an empty record).
fn record_type(schema: &Value, defs: &Defs<'_>, depth: usize) -> Value {
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut attributes = Map::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (name, prop) in props {
            if let Some((mut ty, nullable)) = cedar_type(prop, defs, depth + 1) {
                if nullable || !required.contains(name.as_str()) {
                    ty["required"] = Value::Bool(false);
                }
                attributes.insert(name.clone(), ty);
            }
        }
    }
    json!({ "type": "Record", "attributes": attributes })
}

/// The Cedar type of a JSON Schema, and whether it allows `null`. `None`: no Cedar type (the
/// field is left out).
fn cedar_type(schema: &Value, defs: &Defs<'_>, depth: usize) -> Option<(Value, bool)> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        return cedar_type(defs.0.get(target)?, defs, depth + 1);
    }
    // `anyOf`/`oneOf` of one type and `null` (an `Option` of a struct).
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(union) {
            let is_null = |b: &Value| b.get("type").and_then(Value::as_str) == Some("null");
            let others: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
            return match others.as_slice() {
                [one] => {
                    cedar_type(one, defs, depth).map(|(ty, nullable)| (ty, nullable || others.len() < branches.len()))
                }
                // A string enum written as one `const` per branch.
                many if many.iter().all(|b| b.get("const").is_some_and(Value::is_string)) => {
                    Some((json!({ "type": "String" }), others.len() < branches.len()))
                }
                _ => None,
            };
        }
    }
    if schema.get("const").is_some_and(Value::is_string)
        || schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.iter().all(|v| v.is_string() || v.is_null()))
    {
        let nullable = schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.iter().any(Value::is_null));
        return Some((json!({ "type": "String" }), nullable));
    }
    let (ty, nullable) = match schema.get("type") {
        Some(Value::String(t)) => (t.as_str(), false),
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect();
            match named.as_slice() {
                [one] => (*one, named.len() < types.len()),
                _ => return None,
            }
        }
        _ => return None,
    };
    let cedar = match ty {
        "string" => json!({ "type": "String" }),
        "integer" => json!({ "type": "Long" }),
        "boolean" => json!({ "type": "Boolean" }),
        "array" => {
            let (element, _) = cedar_type(schema.get("items")?, defs, depth + 1)?;
            json!({ "type": "Set", "element": element })
        }
        "object" => record_type(schema, defs, depth),
        _ => return None,
    };
    Some((cedar, nullable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund() -> PolicyTool {
        PolicyTool {
            name: "issue_refund".into(),
            class: EffectClass::Idempotent,
            approval: None,
            sensitive: vec!["card".into()],
            input_schema: json!({
                "type": "object",
                "properties": {
                    "order_id": { "type": "string" },
                    "amount_cents": { "type": "integer", "format": "uint64", "minimum": 0 },
                    "note": { "type": ["string", "null"] },
                    "card": { "type": "string" },
                    "ratio": { "type": "number" },
                },
                "required": ["order_id", "amount_cents", "card"],
            }),
        }
    }

    fn request<'a>(args: &'a Value, principal: Option<&'a str>) -> PolicyRequest<'a> {
        PolicyRequest {
            principal,
            run_id: "run-1",
            thread_id: None,
            agent: None,
            tool: "issue_refund",
            class: EffectClass::Idempotent,
            declared_approval: None,
            args,
        }
    }

    const POLICIES: &str = r#"
        @id("all") permit(principal, action in Action::"call", resource);
        @id("limit") @reason("too large: ask a person")
        forbid(principal, action == Action::"call", resource is Tool::issue_refund)
        when { resource.args.amount_cents > 5000 };
        @id("mid") @approval_role("finance")
        forbid(principal, action == Action::"call_without_approval", resource is Tool::issue_refund)
        when { resource.args.amount_cents > 1000 };
    "#;

    #[test]
    fn allow_deny_and_approval() {
        let p = Policies::parse(POLICIES).unwrap();
        let small = json!({ "order_id": "A", "amount_cents": 10 });
        assert_eq!(p.evaluate(&request(&small, Some("ann"))), PolicyDecision::Allow);
        let mid = json!({ "order_id": "A", "amount_cents": 2000 });
        assert_eq!(
            p.evaluate(&request(&mid, None)),
            PolicyDecision::RequireApproval {
                role: "finance".into(),
                policies: vec!["mid".into()]
            }
        );
        let big = json!({ "order_id": "A", "amount_cents": 9000 });
        assert_eq!(
            p.evaluate(&request(&big, None)),
            PolicyDecision::Deny {
                reason: "too large: ask a person".into(),
                policies: vec!["limit".into()]
            }
        );
    }

    #[test]
    fn no_permit_denies_and_a_failing_forbid_denies() {
        let p = Policies::parse(r#"forbid(principal, action, resource) when { principal.authenticated == false };"#)
            .unwrap();
        let args = json!({});
        assert!(
            matches!(p.evaluate(&request(&args, Some("ann"))), PolicyDecision::Deny { reason, .. } if reason.contains("no policy"))
        );
        let p = Policies::parse(POLICIES).unwrap();
        // `amount_cents` missing: `limit` cannot be evaluated, and denies.
        let args = json!({ "order_id": "A" });
        assert!(
            matches!(p.evaluate(&request(&args, None)), PolicyDecision::Deny { policies, .. } if policies.contains(&"limit".to_owned()))
        );
    }

    #[test]
    fn check_rejects_a_field_the_tool_does_not_have() {
        let tools = [refund()];
        let p = Policies::parse(POLICIES).unwrap();
        assert_eq!(p.check(&tools).unwrap(), Vec::<String>::new());
        let wrong = POLICIES.replace("amount_cents > 5000", "amount > 5000");
        let err = Policies::parse(&wrong).unwrap().check(&tools).unwrap_err();
        assert!(err.to_string().contains("amount"), "{err}");
        // A sensitive field and a float are not in the schema.
        for field in ["card", "ratio"] {
            let wrong = POLICIES.replace("amount_cents > 5000", &format!("{field} == \"x\""));
            assert!(Policies::parse(&wrong).unwrap().check(&tools).is_err(), "{field}");
        }
        let text = schema_text(&tools).unwrap();
        assert!(text.contains("amount_cents"), "{text}");
        assert!(!text.contains("card"), "{text}");
    }

    #[test]
    fn names_and_templates() {
        assert!(tool_type("send-mail").is_err());
        assert!(tool_type("in").is_err());
        assert!(tool_type("send_mail").is_ok());
        let dup = r#"@id("a") permit(principal, action, resource); @id("a") permit(principal, action, resource);"#;
        assert!(matches!(Policies::parse(dup), Err(PolicyError::Unusable(_))));
        let template = r#"permit(principal == ?principal, action, resource);"#;
        assert!(matches!(Policies::parse(template), Err(PolicyError::Unusable(_))));
    }
}
