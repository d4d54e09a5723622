//! A toolkit's tools as the deployment's Cedar policies see them (feature `policy`): the Cedar
//! schema made from their JSON Schemas, and the policies checked against it.

use super::registry::Toolkit;
use crate::decide::cedar::{self, Policies, PolicyError, PolicyTool};

impl Toolkit {
    /// Every tool as [`cedar::schema`] takes it: name, class, declared approval, sensitive
    /// fields and argument schema, in the order they were added. Serialized as JSON, it is the
    /// `--tools` file of `effect-tool policy check` and `effect-tool policy schema` (the
    /// command cannot load your tools: print it from your binary, as the manifest).
    pub fn policy_tools(&self) -> Vec<PolicyTool> {
        self.metas()
            .into_iter()
            .map(|meta| PolicyTool {
                name: meta.name.to_owned(),
                class: meta.class,
                approval: meta.approval.map(str::to_owned),
                sensitive: meta.sensitive.iter().map(|s| (*s).to_owned()).collect(),
                input_schema: self.input_schema(meta.name).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// The Cedar schema of the tools, in Cedar's schema syntax: one entity type per tool
    /// (`Tool::<name>`, with `class`, `approval` and its `args` record), the `Principal`, and
    /// the actions `call` and `call_without_approval` (see [`cedar`]).
    pub fn policy_schema(&self) -> Result<String, PolicyError> {
        cedar::schema_text(&self.policy_tools())
    }

    /// Check `policies` against the tools' schema ([`Policies::check`]): `Err` names every
    /// policy that names a tool, an argument or an action these tools do not have; `Ok` holds
    /// advice.
    pub fn check_policies(&self, policies: &Policies) -> Result<Vec<String>, PolicyError> {
        policies.check(&self.policy_tools())
    }
}
