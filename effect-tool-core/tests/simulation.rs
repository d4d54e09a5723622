//! The deterministic simulation's seeds (`effect_tool_core::testing::sim`). Its own `main`
//! (`harness = false`), so that it always prints what it ran.
//!
//! - `cargo test -p effect-tool-core --features testing,sqlite --test simulation`: the CI run
//!   (1,000 memory seeds and 100 SQLite seeds, each SQLite history the same as the memory
//!   journal's; the regression seeds; determinism; the broken variants caught).
//! - `EFFECT_TOOL_SIM_SEED=123`: replay one seed, its history printed.
//! - `EFFECT_TOOL_SIM_SEEDS=1000000`: that many memory seeds (`scripts/simulate.sh`).
//! - `EFFECT_TOOL_SIM_FIRST` (the first seed, default 0), `EFFECT_TOOL_SIM_BACKEND`
//!   (`memory`, `sqlite`), `EFFECT_TOOL_SIM_CALLS`, `EFFECT_TOOL_SIM_FAULTS`: what a replay
//!   command names.

use std::process::ExitCode;

use effect_tool_core::testing::sim::{Broken, Invariant, SimBackend, SimConfig, SimReport, replay_command, run_seed};

/// Seeds that failed before a fix, as `(seed, calls, faults)` on the memory journal (the
/// shrunk configuration each failed in), with the bug each found (see TESTING.md,
/// "Simulation"). Each fails again with its fix reverted.
const REGRESSIONS: &[(u64, usize, usize, &str)] = &[
    // A claim whose answer was lost released the live claim of the same call in another
    // process (a client's duplicate) while that process's tool ran: applied twice.
    (41, 4, 1, "a lost claim answer released another process's live claim"),
    (281, 6, 1, "a lost claim answer released another process's live claim"),
    // A claim that took over a stale claim, its answer lost, was released as "nothing
    // happened": the next claim ran the effect again.
    (
        26,
        6,
        1,
        "a lost takeover answer released the takeover, erasing the unknown outcome",
    ),
    (
        272,
        4,
        4,
        "a lost takeover answer released the takeover, erasing the unknown outcome",
    ),
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok())
}

fn config_from_env() -> SimConfig {
    let mut config = SimConfig::default();
    if let Some(calls) = env_u64("EFFECT_TOOL_SIM_CALLS") {
        config.calls = calls as usize;
    }
    if let Some(faults) = env_u64("EFFECT_TOOL_SIM_FAULTS") {
        config.faults = faults as usize;
    }
    if std::env::var("EFFECT_TOOL_SIM_BACKEND").as_deref() == Ok("sqlite") {
        config.backend = SimBackend::Sqlite;
    }
    config
}

fn print_failure(report: &SimReport, config: &SimConfig) {
    eprintln!("seed {} failed:", report.seed);
    for v in &report.violations {
        eprintln!("  {:?} after step {}: {}", v.invariant, v.step, v.detail);
    }
    eprintln!("history:");
    for line in &report.history {
        eprintln!("  {line}");
    }
    eprintln!("replay: {}", replay_command(report.seed, config));
}

/// Run `count` seeds from `first`; the first failure, shrunk to the fewest calls and faults that
/// still fail for its seed.
fn run_many(first: u64, count: u64, config: &SimConfig, progress: bool) -> Result<u64, (SimReport, SimConfig)> {
    let started = std::time::Instant::now();
    for seed in first..first + count {
        let report = run_seed(seed, config);
        if !report.passed() {
            return Err(shrink(report, config));
        }
        let done = seed - first + 1;
        if progress && done.is_multiple_of(50_000) {
            eprintln!("{done} seeds passed ({:.0} s)", started.elapsed().as_secs_f64());
        }
    }
    Ok(count)
}

/// The same seed with fewer calls and faults, the smallest that still fails.
fn shrink(report: SimReport, config: &SimConfig) -> (SimReport, SimConfig) {
    for calls in 1..=config.calls {
        for faults in 0..=config.faults {
            let smaller = SimConfig {
                calls,
                faults,
                ..config.clone()
            };
            let shrunk = run_seed(report.seed, &smaller);
            if !shrunk.passed() {
                return (shrunk, smaller);
            }
        }
    }
    (report, config.clone())
}

/// A broken variant must be caught by `invariant` within `seeds` seeds: the first seed that
/// catches it.
fn caught(broken: Broken, invariant: Invariant, seeds: u64) -> Option<u64> {
    let config = SimConfig {
        broken: Some(broken),
        ..SimConfig::default()
    };
    (0..seeds).find(|seed| {
        run_seed(*seed, &config)
            .violations
            .iter()
            .any(|v| v.invariant == invariant)
    })
}

fn main() -> ExitCode {
    let config = config_from_env();
    // Replay one seed.
    if let Some(seed) = env_u64("EFFECT_TOOL_SIM_SEED") {
        for warm in 0..env_u64("EFFECT_TOOL_SIM_WARMUP").unwrap_or(0) {
            run_seed(warm, &config);
        }
        let report = run_seed(seed, &config);
        for line in &report.history {
            println!("{line}");
        }
        if report.passed() {
            println!("seed {seed} passed ({} effects)", report.effects);
            return ExitCode::SUCCESS;
        }
        print_failure(&report, &config);
        return ExitCode::FAILURE;
    }
    // Many seeds (the script).
    if let Some(count) = env_u64("EFFECT_TOOL_SIM_SEEDS") {
        let first = env_u64("EFFECT_TOOL_SIM_FIRST").unwrap_or(0);
        let started = std::time::Instant::now();
        return match run_many(first, count, &config, true) {
            Ok(n) => {
                let secs = started.elapsed().as_secs_f64();
                println!("{n} seeds passed in {secs:.1} s ({:.0} seeds/s)", n as f64 / secs);
                ExitCode::SUCCESS
            }
            Err((report, config)) => {
                print_failure(&report, &config);
                ExitCode::FAILURE
            }
        };
    }
    // CI.
    let mut failed = false;
    let started = std::time::Instant::now();
    // Determinism: seeds run again in another order, each the same history byte for byte.
    let first: Vec<_> = (0..20).map(|seed| run_seed(seed, &config).history).collect();
    for seed in (0..20).rev() {
        if run_seed(seed, &config).history != first[seed as usize] {
            eprintln!("seed {seed} is not deterministic: its two histories differ");
            failed = true;
        }
    }
    for &(seed, calls, faults, bug) in REGRESSIONS {
        let config = SimConfig {
            calls,
            faults,
            ..SimConfig::default()
        };
        let report = run_seed(seed, &config);
        if !report.passed() {
            eprintln!("regression seed {seed} ({bug}) fails again");
            print_failure(&report, &config);
            failed = true;
        }
    }
    let mut total = 0;
    match run_many(0, 1_000, &config, false) {
        Ok(n) => total += n,
        Err((report, config)) => {
            print_failure(&report, &config);
            failed = true;
        }
    }
    // SQLite: the same seeds, and the same histories as on the memory journal, byte for byte
    // (one state machine, one schedule).
    let sqlite = SimConfig {
        backend: SimBackend::Sqlite,
        ..config.clone()
    };
    for seed in 0..100 {
        let report = run_seed(seed, &sqlite);
        if !report.passed() {
            print_failure(&report, &sqlite);
            failed = true;
            break;
        }
        if report.history != run_seed(seed, &config).history {
            eprintln!("seed {seed}: the SQLite journal's history differs from the memory journal's");
            failed = true;
            break;
        }
        total += 1;
    }
    // The checker fails when it must.
    for (broken, invariant) in [
        (Broken::IgnoreLiveClaims, Invariant::AtMostOnce),
        (Broken::ShortLeases, Invariant::AtMostOnce),
        (Broken::EndlessLeases, Invariant::NoClaimForever),
        (Broken::CorruptResults, Invariant::OkRecorded),
    ] {
        match caught(broken, invariant, 200) {
            Some(seed) => println!("the broken variant {broken:?} is caught as {invariant:?} (seed {seed})"),
            None => {
                eprintln!("the broken variant {broken:?} was not caught as {invariant:?} in 200 seeds");
                failed = true;
            }
        }
    }
    println!(
        "{total} seeds ({} regression seeds), {:.1} s",
        REGRESSIONS.len(),
        started.elapsed().as_secs_f64()
    );
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
