//! One identity across the console, MCP and the CLI (issue 33, item 5): who is the same person
//! (`decide::identity`), four eyes between the systems, how the audit trail names each actor,
//! and what an identities map refuses.

use effect_tool_core::EffectClass;
use effect_tool_core::decide::identity::{
    Actor, Identities, IdentitySystem, Person, same_person, scope_principal, token_digest,
};
use effect_tool_core::decide::record::{Current, EffectRecord, Intent, Op, transition};
use serde_json::json;

/// A parked call of `run` (and `thread`).
fn parked(run: &str, thread: Option<&str>) -> EffectRecord {
    let intent = Intent {
        tool: "refund".into(),
        class: EffectClass::Irreversible,
        run_id: run.into(),
        thread_id: thread.map(str::to_owned),
        call_id: Some("c1".into()),
        fingerprint: "f".into(),
        input: json!(100),
        ttl_ms: None,
        approval: Some("manager".into()),
        approval_ttl_ms: None,
        holder: None,
    };
    let op = Op::Claim {
        intent,
        lease_ms: 30_000,
        takeover_in_doubt: false,
    };
    let t = transition("k", Current::Absent, op, 1_700_000_000_000).expect("parked");
    EffectRecord::clone(&t.write.expect("a record"))
}

fn maria() -> Person {
    Person {
        id: "maria".into(),
        roles: ["manager".to_owned()].into(),
        console: ["m.rossi".to_owned()].into(),
        mcp: ["00u1abc".to_owned()].into(),
        cli_tokens: [token_digest("tok-maria-cli-000001")].into(),
        os_users: ["mrossi".to_owned()].into(),
    }
}

fn olaf() -> Person {
    Person {
        id: "olaf".into(),
        console: ["olaf".to_owned()].into(),
        mcp: ["00u2def".to_owned()].into(),
        ..Person::default()
    }
}

fn team() -> Identities {
    let ids = Identities::new([maria(), olaf()]).unwrap();
    assert!(!ids.is_empty());
    ids
}

#[test]
fn names_the_map_gives_one_person_are_one_person_in_every_system() {
    let ids = team();
    let console = Actor::console("m.rossi");
    for other in [
        Actor::mcp("00u1abc"),
        Actor::new(IdentitySystem::Cli, "maria"),
        Actor::local_admin("ops-1", "mrossi"),
        Actor::console("m.rossi"),
    ] {
        assert!(ids.same_person(&console, &other), "{other:?}");
        assert!(same_person(&ids, &other, &console), "symmetric: {other:?}");
    }
    assert!(!ids.same_person(&console, &Actor::mcp("00u2def")), "olaf's sub");
    assert!(!ids.same_person(&console, &Actor::console("olaf")));
    assert!(!ids.same_person(&Actor::mcp("00u2def"), &Actor::mcp("00u1abc")));
    // A name is looked up in its own system only: maria's OS user is no console name.
    assert_eq!(ids.person(&Actor::console("mrossi")), None);
    assert_eq!(ids.person(&Actor::mcp("m.rossi")), None);
    assert_eq!(ids.person(&Actor::new(IdentitySystem::Cli, "m.rossi")), None);
    assert_eq!(
        ids.person(&Actor::new(IdentitySystem::Cli, "maria")).map(|p| &*p.id),
        Some("maria")
    );
}

#[test]
fn unmapped_names_are_people_of_their_own_and_equal_strings_stay_one_person() {
    let none = Identities::default();
    assert!(none.is_empty());
    assert!(
        none.same_person(&Actor::console("ivy"), &Actor::mcp("ivy")),
        "as before: fails closed"
    );
    assert!(!none.same_person(&Actor::console("ivy"), &Actor::mcp("ivy2")));
    let ids = team();
    assert!(!ids.same_person(&Actor::console("ivy"), &Actor::console("maria2")));
    // The map only joins names: an unmapped console name equal to a mapped person's id, or to
    // one of their names in another system, is that person.
    assert!(ids.same_person(&Actor::console("maria"), &Actor::mcp("00u1abc")));
    assert!(ids.same_person(&Actor::console("00u1abc"), &Actor::console("m.rossi")));
    assert_eq!(
        ids.names(&Actor::console("ivy")).into_iter().collect::<Vec<_>>(),
        ["ivy"]
    );
    assert_eq!(
        ids.names(&Actor::mcp("00u2def")).into_iter().collect::<Vec<_>>(),
        ["00u2def", "olaf"]
    );
}

#[test]
fn four_eyes_refuses_the_person_who_requested_under_another_name() {
    let ids = team();
    // maria called the tool over MCP as `00u1abc`: the MCP server scoped the run.
    let own = parked("00u1abc/checkout", None);
    for me in [
        Actor::console("m.rossi"),
        Actor::new(IdentitySystem::Cli, "maria"),
        Actor::local_admin("ops-1", "mrossi"),
    ] {
        assert_eq!(ids.four_eyes(&own, &me, []), Err("00u1abc".to_owned()), "{me:?}");
    }
    assert_eq!(ids.four_eyes(&own, &Actor::console("olaf"), []), Ok(()));
    // Without the map, the names are strangers (as before).
    assert_eq!(
        Identities::default().four_eyes(&own, &Actor::console("m.rossi"), []),
        Ok(())
    );
    // Names the caller knows the actor by too (the console tokens file's `as=`).
    let also = ["00u1abc".to_owned()];
    assert!(
        Identities::default()
            .four_eyes(&own, &Actor::console("x"), &also)
            .is_err()
    );
    // The thread counts as the run does.
    let threaded = parked("app-run-7", Some("00u1abc/t1"));
    assert!(ids.four_eyes(&threaded, &Actor::console("m.rossi"), []).is_err());
    // A run the server did not scope has no requester.
    assert_eq!(
        ids.four_eyes(&parked("checkout", None), &Actor::console("m.rossi"), []),
        Ok(())
    );
    // A mapped requester, an unmapped approver who is named as the person: refused.
    assert!(ids.four_eyes(&own, &Actor::console("maria"), []).is_err());
}

#[test]
fn the_requester_is_read_from_the_scope_the_mcp_server_writes() {
    assert_eq!(scope_principal("maria/r1").as_deref(), Some("maria"));
    assert_eq!(scope_principal("a%2Fb%25c/r1/x").as_deref(), Some("a/b%c"));
    assert_eq!(scope_principal("maria"), None, "no scope");
    assert_eq!(scope_principal("/r1"), None, "an empty principal");
    assert_eq!(scope_principal("a%41/r1"), None, "an escape the server never writes");
    assert_eq!(scope_principal("a%2f/r1"), None, "the server writes upper case");
    assert_eq!(scope_principal("a%/r1"), None);
    // It agrees with `EffectRecord::requested_by`, which compares the escaped name.
    for (run, name) in [("a%2Fb/r", "a/b"), ("x%25/r", "x%"), ("plain/r/s", "plain")] {
        let rec = parked(run, None);
        assert!(rec.requested_by(name), "{run}");
        assert_eq!(scope_principal(run).as_deref(), Some(name));
    }
}

#[test]
fn the_audit_trail_names_the_person_and_the_system_they_came_through() {
    let ids = team();
    assert_eq!(ids.audit_name(&Actor::console("m.rossi")), "maria (console m.rossi)");
    assert_eq!(ids.audit_name(&Actor::console("olaf")), "olaf (console)");
    assert_eq!(ids.audit_name(&Actor::mcp("00u1abc")), "maria (mcp 00u1abc)");
    assert_eq!(
        ids.audit_name(&Actor::new(IdentitySystem::Cli, "maria")),
        "maria (cli token)"
    );
    assert_eq!(
        ids.audit_name(&Actor::local_admin("ops-1", "mrossi")),
        "maria (local administrator on host ops-1, OS user mrossi)"
    );
    assert_eq!(
        ids.audit_name(&Actor::local_admin("ops-1", "root")),
        "local administrator on host ops-1, OS user root"
    );
    // Unknown to the map: the name alone, as before.
    assert_eq!(ids.audit_name(&Actor::console("ivy")), "ivy");
    assert_eq!(
        [
            IdentitySystem::Console,
            IdentitySystem::Mcp,
            IdentitySystem::Cli,
            IdentitySystem::LocalAdmin
        ]
        .map(|s| s.to_string()),
        ["console", "mcp", "cli", "local-admin"]
    );
}

#[test]
fn a_cli_token_names_its_person_by_digest() {
    let ids = team();
    assert_eq!(
        ids.person_of_token("tok-maria-cli-000001").map(|p| &*p.id),
        Some("maria")
    );
    assert_eq!(ids.person_of_token("tok-maria-cli-000002"), None);
    assert_eq!(ids.person_of_token(""), None);
    assert_eq!(
        token_digest("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Digests are compared whatever the case of their hex.
    let upper = Person {
        id: "u".into(),
        cli_tokens: [token_digest("tok-upper-00000001").to_ascii_uppercase()].into(),
        ..Person::default()
    };
    let ids = Identities::new([upper]).unwrap();
    assert_eq!(ids.person_of_token("tok-upper-00000001").map(|p| &*p.id), Some("u"));
}

#[test]
fn a_map_that_would_make_a_name_two_people_is_refused() {
    let err = |persons: Vec<Person>| Identities::new(persons).unwrap_err().to_string();
    assert!(err(vec![maria(), maria()]).contains("given twice"));
    assert!(err(vec![Person::default()]).contains("empty `id`"));
    let twin = |f: fn(&mut Person)| {
        let mut p = Person {
            id: "twin".into(),
            ..Person::default()
        };
        f(&mut p);
        err(vec![maria(), p])
    };
    assert!(twin(|p| p.console = ["m.rossi".to_owned()].into()).contains("console name `m.rossi`"));
    assert!(twin(|p| p.mcp = ["00u1abc".to_owned()].into()).contains("mcp name `00u1abc`"));
    assert!(twin(|p| p.os_users = ["mrossi".to_owned()].into()).contains("local-admin name `mrossi`"));
    assert!(twin(|p| p.cli_tokens = [token_digest("tok-maria-cli-000001")].into()).contains("listed twice"));
    assert!(
        twin(|p| p.cli_tokens = [token_digest("tok-maria-cli-000001").to_ascii_uppercase()].into())
            .contains("listed twice"),
        "whatever the case of the hex"
    );
    assert!(twin(|p| p.cli_tokens = ["tok-maria-cli-000001".to_owned()].into()).contains("not a SHA-256"));
    let g = "g".repeat(64);
    assert!(twin(move |p| p.cli_tokens = ["g".repeat(64)].into()).contains(&format!("`{g}`")));
    // The same name in two systems is fine: one person's console name and another's sub.
    let other = Person {
        id: "other".into(),
        mcp: ["m.rossi".to_owned()].into(),
        ..Person::default()
    };
    assert_eq!(Identities::new([maria(), other]).unwrap().persons().len(), 2);
}

#[test]
fn an_identities_file_deserializes_and_is_checked() {
    let ids: Identities = serde_json::from_value(json!({
        "person": [{"id": "maria", "roles": ["manager"], "console": ["m.rossi"], "mcp": ["00u1abc"]}]
    }))
    .unwrap();
    assert!(ids.same_person(&Actor::console("m.rossi"), &Actor::mcp("00u1abc")));
    let twice = serde_json::from_value::<Identities>(json!({"person": [{"id": "a"}, {"id": "a"}]}));
    assert!(twice.unwrap_err().to_string().contains("given twice"));
    let unknown = serde_json::from_value::<Identities>(json!({"person": [{"id": "a", "github": ["a"]}]}));
    assert!(unknown.unwrap_err().to_string().contains("github"));
    let empty: Identities = serde_json::from_value(json!({})).unwrap();
    assert!(empty.is_empty());
}
