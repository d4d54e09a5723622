//! `effect-tool show --marker`: an operator who finds a marker in content a tool created (an
//! email a customer forwarded) finds the record, though the marker shows nothing of the key.
//! The real binary against a SQLite journal this process fills.

use crate::common;

use common::Journal;
use effect_tool_core::value::marker;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_finds_the_record_of_a_marker() {
    let j = Journal::sqlite("show_marker");
    let run = j.run_id("conv");
    let key = j.key("email:T-77:ann@example.com:Your refund");
    j.in_doubt(&key, &run, "send_email", json!({"to": "ann@example.com"}))
        .await;
    // Other records, so that the scan has something to pass over.
    for i in 0..5 {
        j.in_doubt(&j.key(&format!("email:other-{i}")), &run, "send_email", json!({"i": i}))
            .await;
    }
    let secret = j.store.marker_secret().await.unwrap().expect("SQLite keeps a secret");
    let m = marker::signed_marker(&key, &secret);
    for part in ["ann", "refund", "conv", "T%2D77", "T-77"] {
        assert!(!m.contains(part), "the marker shows {part}: {m}");
    }
    let email = format!("Hello Ann,\n\nyour refund is on its way.\n\n{m}\n");
    let id = marker::parse_marker(&email).unwrap();

    // The whole marker, the email around it, or the id alone.
    for given in [m.as_str(), email.as_str(), id.as_str()] {
        let out = j.cli(&["show", "--marker", given]);
        let text = out.ok();
        assert!(text.contains(&key), "{given:?}: {text}");
        assert!(text.contains("send_email"), "{text}");
    }
    let shown = j.cli(&["--json", "show", "--marker", &id]).json();
    assert_eq!(shown["record"]["key"], json!(key));

    // A marker written before the identifier carries the key: still found.
    let legacy = marker::legacy_marker(&key, Some(&secret));
    assert!(j.cli(&["show", "--marker", &legacy]).ok().contains(&key));

    // A marker of no record here (another journal's secret): a clear refusal, exit 1.
    let elsewhere = marker::signed_marker(&key, &marker::MarkerSecret::from_bytes([3; 32]));
    let err = j.cli(&["show", "--marker", &elsewhere]).fails(1).to_owned();
    assert!(err.contains("no record of this journal carries the marker"), "{err}");
    // Neither a key nor a marker: a usage error.
    let out = j.cli(&["show"]);
    assert_eq!(out.code, 2, "{out:#?}");
    let out = j.cli(&["show", &key, "--marker", &id]);
    assert_eq!(out.code, 2, "{out:#?}");
}
