//! The command acts as a named identity (issue 33, item 5): a CLI token the identities file
//! lists by its SHA-256 names the person and their roles; four eyes knows that person under
//! their MCP principal's id; `--local-admin` is audited as the local administrator. The real
//! binary on SQLite and on PostgreSQL.

use crate::common;

use common::{Journal, Output, TempDir, run};
use effect_tool_core::RecordState;
use effect_tool_core::decide::identity::token_digest;

common::on_every_backend!(
    a_token_names_the_person_who_decides,
    local_admin_is_audited_as_such,
    a_resolution_names_its_person_too,
    a_grant_keeps_every_name_of_its_granter
);

const MARIA: &str = "tok-maria-cli-0000000001";
const OLAF: &str = "tok-olaf-cli-00000000002";
const IVY: &str = "tok-ivy-cli-000000000003";

/// Maria calls tools over MCP as `00u1abc` and signs in to the console as `m.rossi`; Olaf is
/// the other release manager; Ivy holds no role.
fn identities_file(dir: &TempDir) -> String {
    let text = format!(
        r#"
[[person]]
id = "maria"
roles = ["release-manager"]
console = ["m.rossi"]
mcp = ["00u1abc"]
cli_tokens = ["{}"]

[[person]]
id = "olaf"
roles = ["release-manager"]
cli_tokens = ["{}"]

[[person]]
id = "ivy"
cli_tokens = ["{}"]
"#,
        token_digest(MARIA),
        token_digest(OLAF),
        token_digest(IVY)
    );
    let path = dir.path.join("identities.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `effect-tool --store J --identities FILE ARGS` with `EFFECT_TOOL_TOKEN=token` (none: unset).
fn as_holder(j: &Journal, file: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut full = vec!["--store", j.spec.as_str(), "--identities", file];
    full.extend_from_slice(args);
    run(&full, None, token.map(|t| ("EFFECT_TOOL_TOKEN", t)).as_slice())
}

async fn a_token_names_the_person_who_decides(j: &Journal) {
    let dir = TempDir::new("identities");
    let file = identities_file(&dir);
    // Maria's own call, made over MCP as 00u1abc (the MCP server scopes the run).
    let own = j.key("deploy:own");
    let parked = j.awaiting(&own, "00u1abc/r1", "deploy", "release-manager").await;
    let approve = [
        "approve",
        own.as_str(),
        "--as",
        "release-manager",
        "--fingerprint",
        &parked.fingerprint,
    ];

    let refused = as_holder(j, &file, Some(MARIA), &approve);
    let msg = refused.fails(1);
    assert!(
        msg.contains("four eyes") && msg.contains("person `maria`") && msg.contains("00u1abc"),
        "{msg}"
    );
    let refused = as_holder(j, &file, Some(MARIA), &["deny", &own, "--reason", "mine"]);
    assert!(refused.fails(1).contains("four eyes"), "{refused:?}");
    // `--by` names nobody when a token does.
    let refused = as_holder(j, &file, Some(MARIA), &[&approve[..], &["--by", "olaf"]].concat());
    assert!(refused.fails(1).contains("four eyes"), "{refused:?}");

    // A person without the role, an unknown token, no token at all: refused, nothing changes.
    let msg = as_holder(j, &file, Some(IVY), &approve).fails(1).to_owned();
    assert!(msg.contains("`ivy` does not hold the role `release-manager`"), "{msg}");
    let msg = as_holder(j, &file, Some("tok-unknown-000000000000"), &approve)
        .fails(1)
        .to_owned();
    assert!(msg.contains("not one of the identities file's"), "{msg}");
    let msg = as_holder(j, &file, None, &approve).fails(2).to_owned();
    assert!(
        msg.contains("EFFECT_TOOL_TOKEN") && msg.contains("--local-admin"),
        "{msg}"
    );
    assert_eq!(j.get(&own).await.unwrap().state, RecordState::AwaitingApproval);
    assert!(j.store.audit(Some(&own)).await.unwrap().is_empty());

    // A token needs the file that names its person.
    let mut bare = vec!["--store", j.spec.as_str()];
    bare.extend_from_slice(&approve);
    let msg = run(&bare, None, &[("EFFECT_TOOL_TOKEN", OLAF)]).fails(2).to_owned();
    assert!(msg.contains("--identities"), "{msg}");

    // Olaf, another person, approves: the audit trail names him and his token.
    let text = as_holder(j, &file, Some(OLAF), &approve).ok().to_owned();
    assert!(text.contains("(by olaf (cli token))"), "{text}");
    let rec = j.get(&own).await.unwrap();
    assert_eq!(rec.state, RecordState::Approved);
    assert_eq!(rec.decided_by.as_deref(), Some("olaf (cli token)"));
    let audit = j.store.audit(Some(&own)).await.unwrap();
    assert_eq!((audit.len(), audit[0].actor.as_str()), (1, "olaf (cli token)"));

    // The token from a file; a denial by the same route.
    let other = j.key("deploy:other");
    j.awaiting(&other, "00u1abc/r2", "deploy", "release-manager").await;
    let token_file = dir.path.join("olaf.token");
    std::fs::write(&token_file, format!("{OLAF}\n")).unwrap();
    let denied = as_holder(
        j,
        &file,
        None,
        &[
            "deny",
            &other,
            "--reason",
            "freeze",
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    assert!(denied.ok().contains("(by olaf (cli token))"), "{denied:?}");
    assert_eq!(j.get(&other).await.unwrap().state, RecordState::Denied);

    // An identities file others may change is refused: it decides who is who.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let third = j.key("deploy:third");
        j.awaiting(&third, "r3", "deploy", "release-manager").await;
        let msg = as_holder(j, &file, Some(OLAF), &["deny", &third]).fails(2).to_owned();
        assert!(msg.contains("chmod go-w"), "{msg}");
        assert_eq!(j.get(&third).await.unwrap().state, RecordState::AwaitingApproval);
    }
}

async fn local_admin_is_audited_as_such(j: &Journal) {
    let dir = TempDir::new("local-admin");
    let file = identities_file(&dir);
    let key = j.key("deploy:admin");
    let parked = j.awaiting(&key, "00u1abc/r1", "deploy", "release-manager").await;
    let approve = [
        "approve",
        key.as_str(),
        "--as",
        "release-manager",
        "--fingerprint",
        &parked.fingerprint,
        "--local-admin",
    ];
    // Not both: a token and the local administrator.
    assert!(as_holder(j, &file, Some(OLAF), &approve).fails(2).contains("not both"));
    let text = as_holder(j, &file, None, &approve).ok().to_owned();
    let rec = j.get(&key).await.unwrap();
    assert_eq!(rec.state, RecordState::Approved);
    let by = rec.decided_by.unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(
        by.starts_with(&format!("local administrator on host {}, OS user ", host.trim())),
        "{by}"
    );
    assert!(text.contains(&by), "{text}");
    let audit = j.store.audit(Some(&key)).await.unwrap();
    assert_eq!(audit[0].actor, by);
}

#[tokio::test]
async fn without_an_identities_file_by_still_decides_as_before() {
    // The deprecated mode: `--by` (or $USER) with the role believed; audited under the name.
    let j = Journal::sqlite("identities-deprecated");
    let key = j.key("deploy:legacy");
    let parked = j.awaiting(&key, "r1", "deploy", "release-manager").await;
    let out = j.cli(&[
        "approve",
        &key,
        "--as",
        "release-manager",
        "--by",
        "carol",
        "--fingerprint",
        &parked.fingerprint,
    ]);
    assert!(out.ok().contains("(by carol)"));
    assert_eq!(j.get(&key).await.unwrap().decided_by.as_deref(), Some("carol"));
}

/// `POST path` to `addr` with a bearer token and a JSON body: the status and the body.
fn post(addr: &str, token: &str, path: &str, body: &str) -> (u16, String) {
    crate::serve::http(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_the_identities_file_knows_a_console_operator_by_their_mcp_principal() {
    let j = Journal::sqlite("identities-serve");
    let dir = TempDir::new("identities-serve");
    let file = identities_file(&dir);
    let tokens = dir.path.join("operators.tokens");
    std::fs::write(
        &tokens,
        "tok-m-rossi-console-001 m.rossi release-manager\ntok-olaf-console-00002 olaf release-manager\n",
    )
    .unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key = j.key("deploy:own");
    let parked = j.awaiting(&key, "00u1abc/r1", "deploy", "release-manager").await;
    let body = serde_json::json!({ "key": key, "fingerprint": parked.fingerprint }).to_string();

    let server = common::serve_with(&j, &["--tokens", tokens.to_str().unwrap(), "--identities", &file]);
    let (status, answer) = post(&server.addr, "tok-m-rossi-console-001", "/api/approve", &body);
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer.contains("four eyes") && answer.contains("person `maria`"),
        "{answer}"
    );
    let (status, answer) = post(&server.addr, "tok-olaf-console-00002", "/api/approve", &body);
    assert_eq!(status, 200, "{answer}");
    let rec = j.get(&key).await.unwrap();
    // olaf's console name is not in the file: he is named as before.
    assert_eq!(rec.decided_by.as_deref(), Some("olaf"));
}

async fn a_resolution_names_its_person_too(j: &Journal) {
    let dir = TempDir::new("identities-resolve");
    let file = identities_file(&dir);
    let key = j.key("email:doubt");
    j.in_doubt(&key, &j.run_id("r"), "send_email", serde_json::json!({"to": "a@b.c"}))
        .await;
    let resolve = ["resolve", key.as_str(), "--not-applied"];
    // With the file, a resolution needs a token (or --local-admin) too.
    assert!(
        as_holder(j, &file, None, &resolve)
            .fails(2)
            .contains("EFFECT_TOOL_TOKEN")
    );
    assert_eq!(j.get(&key).await.unwrap().state, RecordState::InDoubt);
    let text = as_holder(j, &file, Some(OLAF), &resolve).ok().to_owned();
    assert!(text.contains("(by olaf (cli token))"), "{text}");
    let rec = j.get(&key).await.unwrap();
    assert_eq!(rec.decided_by.as_deref(), Some("olaf (cli token)"));
    assert_eq!(rec.resolved_by(), Some("olaf (cli token)"), "a resolution, amendable");
    let audit = j.store.audit(Some(&key)).await.unwrap();
    let resolution = audit
        .iter()
        .find(|e| e.action == "resolve")
        .expect("the resolution's entry");
    assert_eq!(resolution.actor, "olaf (cli token)");
}

/// `grant add` by token: only a person holding the role may grant in it, and the grant keeps
/// every name the identities file gives its granter, so it never covers their own calls made
/// over MCP under another name (four eyes across systems).
async fn a_grant_keeps_every_name_of_its_granter(j: &Journal) {
    use effect_tool_core::decide::grant::{GrantCall, NotCovered, covers};

    let dir = TempDir::new("identities");
    let file = identities_file(&dir);
    let tool = format!("deploy_{}", j.ns.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    let schema = serde_json::json!({"type": "object", "properties": {"env": {"type": "string"}}});
    j.store.put_input_schema(&tool, &schema).await.unwrap();
    let add = [
        "grant",
        "add",
        tool.as_str(),
        "--as",
        "release-manager",
        "--for",
        "1h",
        "--json",
    ];

    let msg = as_holder(j, &file, Some(IVY), &add).fails(1).to_owned();
    assert!(msg.contains("`ivy` does not hold the role `release-manager`"), "{msg}");
    assert!(
        j.store.grants(Some(&tool)).await.unwrap().is_empty(),
        "a refused grant was kept"
    );

    let made = as_holder(j, &file, Some(MARIA), &add).json();
    assert_eq!(made["granted_by"], serde_json::json!("maria (cli token)"));
    let id = made["id"].as_str().unwrap();
    let kept = j.store.grant(id).await.unwrap().expect("the grant is in the journal");
    for name in ["maria", "m.rossi", "00u1abc"] {
        assert!(kept.granter_names.iter().any(|n| n == name), "{name}: {kept:?}");
    }
    let input = serde_json::json!({"env": "prod"});
    let call = |run_id| GrantCall {
        tool: &tool,
        role: "release-manager",
        input: &input,
        run_id,
        thread_id: None,
    };
    // Maria's own call over MCP (the server scopes her runs to `00u1abc`) still waits.
    assert_eq!(
        covers(&kept, &call("00u1abc/r1"), j.store.now()),
        Err(NotCovered::OwnRequest("maria (cli token)".into()))
    );
    // Another person's call is covered.
    assert_eq!(covers(&kept, &call("0olaf99/r1"), j.store.now()), Ok(()));
}
