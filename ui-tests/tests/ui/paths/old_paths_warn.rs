// Paths of earlier releases still compile, and warn (here denied, to show each note): the root
// names now only in their layer, the helpers that left the API (only the CLI used them), and
// an old module named as a whole. A path through an old module
// (`effect_tool::record::EffectRecord`) compiles without a warning: rustc checks only a
// path's last item.
#![deny(deprecated)]

use effect_tool::record;
use effect_tool::record::EffectRecord;

fn main() {
    let _: Option<effect_tool::Outcome> = None;
    let _: Option<effect_tool::Decision> = None;
    let _: Option<effect_tool::AbandonReport> = None;
    let _: Option<effect_tool::Injected> = None;
    let _: Option<EffectRecord> = None;
    let _ = record::RECORD_VERSION;
    let _ = effect_tool::key::sha256_hex(b"");
    let _ = effect_tool::key::redact(Default::default(), &[]);
    let _ = effect_tool::compensation::compensation_key("k");
    let _ = effect_tool::shell::quote("it's");
    let _ = effect_tool::shell::is_hidden('\n');
}
