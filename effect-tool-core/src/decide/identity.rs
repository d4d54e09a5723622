//! Who a person is across the identity systems that reach the journal, and four eyes between
//! them: a pure function of an identities map, the record, and who asks.
//!
//! A person acts through one of several systems, each naming them its own way
//! ([`IdentitySystem`]): the console (a name from its tokens file or its authenticating proxy),
//! MCP (a principal id: a JWT's `sub`, or the name of a static bearer token; the MCP server
//! scopes the principal's runs as `<id>/...`), the CLI (a token whose SHA-256 the identities
//! file lists), and the CLI's explicit local-administrator mode (an OS user on a host).
//!
//! [`Identities`] maps a person id to their names in each system. Two names are the same
//! person ([`Identities::same_person`]) when they are equal as strings (whatever system they
//! come from: as before the map existed, so it fails closed), or when the map gives them one
//! person. The map only ever joins names, never splits them. A name the map does not know is a
//! person of its own, known by that name alone.
//!
//! Four eyes ([`Identities::four_eyes`]): nobody approves or denies a call they requested. The
//! journal knows who requested a call by its run (or thread): the MCP server scopes principal
//! `id`'s runs as `<id>/...` (`/` and `%` escaped), and an application may scope its users'
//! runs the same way; that id is taken as an MCP principal's.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::record::EffectRecord;

/// The system a name comes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum IdentitySystem {
    /// The operator console: a name from its tokens file or its authenticating proxy.
    Console,
    /// An MCP principal: a JWT's `sub`, or the name of a static bearer token.
    Mcp,
    /// The `effect-tool` command, with a token the identities file lists (by its SHA-256).
    Cli,
    /// The `effect-tool` command in its explicit local-administrator mode (`--local-admin`):
    /// an OS user on a host, believed because they can run the command with the journal's
    /// credentials.
    LocalAdmin,
}

impl IdentitySystem {
    /// The system's name, as the audit trail writes it: `console`, `mcp`, `cli`, `local-admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentitySystem::Console => "console",
            IdentitySystem::Mcp => "mcp",
            IdentitySystem::Cli => "cli",
            IdentitySystem::LocalAdmin => "local-admin",
        }
    }
}

impl std::fmt::Display for IdentitySystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Someone as one identity system names them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor {
    /// Through which system.
    pub system: IdentitySystem,
    /// Their name there (for [`IdentitySystem::Cli`], the person id their token resolved to;
    /// for [`IdentitySystem::LocalAdmin`], the OS user).
    pub name: String,
    /// The host, for [`IdentitySystem::LocalAdmin`].
    pub host: Option<String>,
}

impl Actor {
    /// `name` of `system`.
    pub fn new(system: IdentitySystem, name: impl Into<String>) -> Self {
        Actor {
            system,
            name: name.into(),
            host: None,
        }
    }

    /// A console operator.
    pub fn console(name: impl Into<String>) -> Self {
        Actor::new(IdentitySystem::Console, name)
    }

    /// An MCP principal (its id).
    pub fn mcp(id: impl Into<String>) -> Self {
        Actor::new(IdentitySystem::Mcp, id)
    }

    /// The local administrator: OS user `user` on `host`.
    pub fn local_admin(host: impl Into<String>, user: impl Into<String>) -> Self {
        Actor {
            system: IdentitySystem::LocalAdmin,
            name: user.into(),
            host: Some(host.into()),
        }
    }
}

/// One person of an identities file: their id, their roles (the CLI's: the console's come from
/// its tokens file or its proxy's groups), and their names in each system.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Person {
    /// The person's id (what the audit trail names first).
    pub id: String,
    /// The roles they may approve as through the CLI.
    #[serde(default)]
    pub roles: BTreeSet<String>,
    /// Their console names (tokens file names, or the proxy's user header).
    #[serde(default)]
    pub console: BTreeSet<String>,
    /// Their MCP principal ids (JWT `sub`s, static token names).
    #[serde(default)]
    pub mcp: BTreeSet<String>,
    /// The SHA-256 (hex) of their CLI tokens (`printf %s "$TOKEN" | sha256sum`).
    #[serde(default)]
    pub cli_tokens: BTreeSet<String>,
    /// The OS users they are in the CLI's local-administrator mode.
    #[serde(default)]
    pub os_users: BTreeSet<String>,
}

impl Person {
    /// Their names in `system`; `None` for [`IdentitySystem::Cli`], whose actor is named by
    /// the person id its token resolved to.
    fn names_in(&self, system: IdentitySystem) -> Option<&BTreeSet<String>> {
        match system {
            IdentitySystem::Console => Some(&self.console),
            IdentitySystem::Mcp => Some(&self.mcp),
            IdentitySystem::LocalAdmin => Some(&self.os_users),
            IdentitySystem::Cli => None,
        }
    }

    /// Every name of theirs, in any system, and their id.
    fn all_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.id.as_str())
            .chain(self.console.iter().map(String::as_str))
            .chain(self.mcp.iter().map(String::as_str))
            .chain(self.os_users.iter().map(String::as_str))
    }
}

impl TryFrom<File> for Identities {
    type Error = IdentitiesError;

    fn try_from(file: File) -> Result<Self, IdentitiesError> {
        Identities::new(file.person)
    }
}

/// Why an identities map cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdentitiesError(pub String);

/// The identities file's shape: `[[person]]` tables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    person: Vec<Person>,
}

/// Who is who across the identity systems (see the module docs). Empty: every name is a person
/// of its own, as when no identities file is given.
///
/// Deserializes from the identities file's shape, `[[person]]` tables with `id`, `roles`,
/// `console`, `mcp`, `cli_tokens`, `os_users` (unknown fields refused), checked as
/// [`Identities::new`] checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "File")]
pub struct Identities {
    persons: Vec<Person>,
}

impl Identities {
    /// The map of `persons`.
    ///
    /// # Errors
    ///
    /// When a person id is empty or given twice, a name of one system belongs to two people, or
    /// a CLI token digest is not 64 hex digits.
    pub fn new(persons: impl IntoIterator<Item = Person>) -> Result<Self, IdentitiesError> {
        let persons: Vec<Person> = persons.into_iter().collect();
        let mut ids = BTreeSet::new();
        for p in &persons {
            if p.id.trim().is_empty() {
                return Err(IdentitiesError(
                    "a person has an empty `id`: give each person an id".into(),
                ));
            }
            if !ids.insert(p.id.as_str()) {
                return Err(IdentitiesError(format!(
                    "person `{}` is given twice: give each person one `[[person]]` table",
                    p.id
                )));
            }
            if let Some(bad) = p
                .cli_tokens
                .iter()
                .find(|t| t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(IdentitiesError(format!(
                    "person `{}`: `{bad}` in `cli_tokens` is not a SHA-256 in hex (64 digits): give `printf %s \"$TOKEN\" | sha256sum`, never the token itself",
                    p.id
                )));
            }
        }
        for system in [IdentitySystem::Console, IdentitySystem::Mcp, IdentitySystem::LocalAdmin] {
            for (i, a) in persons.iter().enumerate() {
                for b in &persons[i + 1..] {
                    let (Some(mine), Some(theirs)) = (a.names_in(system), b.names_in(system)) else {
                        continue;
                    };
                    if let Some(name) = mine.intersection(theirs).next() {
                        return Err(IdentitiesError(format!(
                            "the {system} name `{name}` belongs to both `{}` and `{}`: a name is one person's",
                            a.id, b.id
                        )));
                    }
                }
            }
        }
        let digests = persons
            .iter()
            .flat_map(|p| p.cli_tokens.iter().map(|t| t.to_ascii_lowercase()));
        let mut seen = BTreeSet::new();
        for d in digests {
            if !seen.insert(d) {
                return Err(IdentitiesError(
                    "one CLI token digest is listed twice: give each person tokens of their own".into(),
                ));
            }
        }
        Ok(Identities { persons })
    }

    /// The people.
    pub fn persons(&self) -> &[Person] {
        &self.persons
    }

    /// Whether the map names nobody (every name is a person of its own).
    pub fn is_empty(&self) -> bool {
        self.persons.is_empty()
    }

    /// The person `actor` is, if the map knows them.
    pub fn person(&self, actor: &Actor) -> Option<&Person> {
        self.persons.iter().find(|p| match p.names_in(actor.system) {
            Some(names) => names.contains(&actor.name),
            None => p.id == actor.name,
        })
    }

    /// The person whose CLI token is `token` (by its SHA-256), if any.
    pub fn person_of_token(&self, token: &str) -> Option<&Person> {
        let digest = token_digest(token);
        self.persons
            .iter()
            .find(|p| p.cli_tokens.iter().any(|t| t.eq_ignore_ascii_case(&digest)))
    }

    /// The names under which `actor` is known: their own, and, when the map knows them, their
    /// person's id and every name of that person in any system.
    pub fn names(&self, actor: &Actor) -> BTreeSet<String> {
        let mut names = BTreeSet::from([actor.name.clone()]);
        if let Some(p) = self.person(actor) {
            names.extend(p.all_names().map(str::to_owned));
        }
        names
    }

    /// Whether `a` and `b` are one person: a name in common (see the module docs).
    pub fn same_person(&self, a: &Actor, b: &Actor) -> bool {
        let theirs = self.names(b);
        self.names(a).iter().any(|n| theirs.contains(n))
    }

    /// Four eyes: `Err` with the requester's name when `actor` requested `rec` (its run or
    /// thread is scoped to an MCP principal who is the same person as `actor`, or to a name of
    /// `also`, further names the caller knows `actor` by).
    pub fn four_eyes<'a>(
        &self,
        rec: &EffectRecord,
        actor: &Actor,
        also: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), String> {
        let also: Vec<&String> = also.into_iter().collect();
        let scopes = std::iter::once(rec.run_id.as_str()).chain(rec.thread_id.as_deref());
        for requester in scopes.filter_map(scope_principal) {
            let by = Actor::mcp(requester.clone());
            if self.same_person(&by, actor) || also.iter().any(|a| self.same_person(&by, &Actor::mcp(*a))) {
                return Err(requester);
            }
        }
        Ok(())
    }

    /// How the audit trail names `actor`: their name alone when the map does not know them
    /// (as before identities existed), else their person id and the system and name they came
    /// through; the local administrator always as such, with host and OS user.
    pub fn audit_name(&self, actor: &Actor) -> String {
        let person = self.person(actor).map(|p| p.id.as_str());
        let how = match actor.system {
            IdentitySystem::LocalAdmin => format!(
                "local administrator on host {}, OS user {}",
                actor.host.as_deref().unwrap_or("(unknown)"),
                actor.name
            ),
            IdentitySystem::Cli => "cli token".to_owned(),
            system if Some(actor.name.as_str()) == person => system.to_string(),
            system => format!("{system} {}", actor.name),
        };
        match (person, actor.system) {
            (Some(p), _) => format!("{p} ({how})"),
            (None, IdentitySystem::LocalAdmin) => how,
            (None, _) => actor.name.clone(),
        }
    }
}

/// Whether `a` and `b` are one person under `identities` ([`Identities::same_person`]): the
/// one comparison every four-eyes check makes.
pub fn same_person(identities: &Identities, a: &Actor, b: &Actor) -> bool {
    identities.same_person(a, b)
}

/// The principal id a run (or thread) is scoped to: the part before its first `/`, with the
/// MCP server's escapes (`%25`, `%2F`) undone; `None` when the id has no `/`, the part is
/// empty, or it holds a `%` the server would not have written.
pub fn scope_principal(id: &str) -> Option<String> {
    let (scope, _) = id.split_once('/')?;
    let mut out = String::with_capacity(scope.len());
    let mut rest = scope;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("%25") {
            out.push('%');
        } else if tail.starts_with("%2F") {
            out.push('/');
        } else {
            return None;
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    (!out.is_empty()).then_some(out)
}

/// The SHA-256 (hex) of a CLI token, as the identities file lists it.
pub fn token_digest(token: &str) -> String {
    crate::value::digest::sha256_hex(token.as_bytes())
}
