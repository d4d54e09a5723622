//! `effect-tool grant add|list|revoke`, run as the real binary against a journal this test
//! process reads through the core store API: a grant is refused for an argument the tool does
//! not have, kept, listed, revoked once; each on SQLite and on PostgreSQL.

use crate::common;

use common::Journal;
use effect_tool_core::store::GrantsExt;
use serde_json::json;

common::on_every_backend!(grant_add_list_revoke);

async fn grant_add_list_revoke(j: &Journal) {
    let tool = format!("refund_{}", j.ns.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    let schema = json!({
        "type": "object",
        "properties": {"order": {"type": "string"}, "cents": {"type": "integer"}},
        "required": ["order", "cents"]
    });
    let when = r#"{"arg": "cents", "at_most": 5000}"#;
    let add = |extra: &[&str]| {
        let mut args = vec![
            "grant",
            "add",
            tool.as_str(),
            "--as",
            "finance",
            "--by",
            "alice",
            "--for",
            "1h",
        ];
        args.extend_from_slice(extra);
        j.cli(&args)
    };
    // The journal has no argument schema of the tool yet: refused, nothing kept.
    let refused = add(&["--when", when]);
    assert!(refused.fails(1).contains("no argument schema"), "{refused:?}");
    j.store.put_input_schema(&tool, &schema).await.unwrap();
    let refused = add(&["--when", r#"{"arg": "amount", "at_most": 5000}"#]);
    let msg = refused.fails(1);
    assert!(msg.contains("no argument `amount`") && msg.contains("cents"), "{msg}");
    let refused = add(&["--when", r#"{"arg": "order", "at_most": 5}"#]);
    assert!(refused.fails(1).contains("cannot test"), "{refused:?}");
    let usage = add(&["--when", "cents <= 5000"]);
    assert!(usage.fails(2).contains("write one test as JSON"), "{usage:?}");
    assert!(
        j.store.grants(Some(&tool)).await.unwrap().is_empty(),
        "a refused grant was kept"
    );

    let made = add(&["--when", when, "--json"]).json();
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["state"], json!("live"));
    assert_eq!(made["granted_by"], json!("alice"));
    assert_eq!(made["when"], json!([{"arg": "cents", "at_most": 5000.0}]));
    let kept = j.store.grant(&id).await.unwrap().expect("the grant is in the journal");
    assert_eq!(kept.valid_until - kept.valid_from, 3_600_000);
    assert_eq!(j.store.live_grants(Some(&tool)).await.unwrap(), vec![kept.clone()]);

    let text = add(&["--when", r#"{"arg": "order", "prefix": "EU-"}"#, "--principal", "maria"]);
    let text = text.ok();
    assert!(
        text.starts_with("granted g-") && text.contains("where order starts with \"EU-\", principal maria"),
        "{text}"
    );

    let listed = j.cli(&["grant", "list", "--tool", &tool]);
    let listed = listed.ok();
    assert!(listed.starts_with("STATE") && listed.contains(&id), "{listed}");
    assert!(
        listed.contains("live") && listed.contains("where cents <= 5000"),
        "{listed}"
    );

    let revoked = j.cli(&["grant", "revoke", &id, "--by", "bob"]);
    let revoked = revoked.ok();
    assert!(revoked.starts_with(&format!("revoked {id} (by bob")), "{revoked}");
    let again = j.cli(&["grant", "revoke", &id, "--by", "carol", "--json"]).json();
    assert_eq!(again["revoked"]["by"], json!("bob"), "the first revocation stands");
    assert_eq!(again["state"], json!("revoked"));
    assert!(j.store.grant(&id).await.unwrap().unwrap().revoked.is_some());
    assert_eq!(
        j.store.live_grants(Some(&tool)).await.unwrap().len(),
        1,
        "the other grant"
    );
    let listed = j.cli(&["--json", "grant", "list", "--tool", &tool]).json();
    let states: Vec<_> = listed.as_array().unwrap().iter().map(|g| g["state"].clone()).collect();
    assert_eq!(states, [json!("revoked"), json!("live")]);
    let missing = j.cli(&["grant", "revoke", "g-0000000000000000", "--by", "bob"]);
    assert!(missing.fails(1).contains("grant list"), "{missing:?}");
    let trail = j.store.audit(Some(&format!("grant:{id}"))).await.unwrap();
    let actions: Vec<_> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
    assert_eq!(actions, [("alice", "grant"), ("bob", "grant-revoked")]);
}
