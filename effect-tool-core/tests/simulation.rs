//! The deterministic simulation's seeds (`effect_tool_core::testing::sim`). Its own `main`
//! (`harness = false`), so that it always prints what it ran.
//!
//! - `cargo test -p effect-tool-core --features testing,sqlite --test simulation`: the CI run
//!   (1,000 memory seeds and 100 SQLite seeds, the regression seeds, the broken variants).
//! - `EFFECT_TOOL_SIM_SEED=123`: replay one seed, its history printed.
//! - `EFFECT_TOOL_SIM_SEEDS=1000000`: that many memory seeds (`scripts/simulate.sh`).
//! - `EFFECT_TOOL_SIM_FIRST` (the first seed, default 0), `EFFECT_TOOL_SIM_BACKEND`
//!   (`memory`, `sqlite`), `EFFECT_TOOL_SIM_CALLS`, `EFFECT_TOOL_SIM_FAULTS`: what a replay
//!   command names.

use std::process::ExitCode;

use effect_tool_core::testing::sim::{Broken, Invariant, SimBackend, SimConfig, SimReport, replay_command, run_seed};

/// Seeds that once failed, each with the bug it found (see TESTING.md, "Simulation").
const REGRESSIONS: &[(u64, SimBackend)] = &[];

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
fn run_many(first: u64, count: u64, config: &SimConfig) -> Result<u64, (SimReport, SimConfig)> {
    for seed in first..first + count {
        let report = run_seed(seed, config);
        if !report.passed() {
            return Err(shrink(report, config));
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
    (0..seeds).find(|seed| run_seed(*seed, &config).violations.iter().any(|v| v.invariant == invariant))
}

fn main() -> ExitCode {
    let config = config_from_env();
    // Replay one seed.
    if let Some(seed) = env_u64("EFFECT_TOOL_SIM_SEED") {
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
        return match run_many(first, count, &config) {
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
    for (seed, backend) in REGRESSIONS {
        let config = SimConfig {
            backend: *backend,
            ..SimConfig::default()
        };
        let report = run_seed(*seed, &config);
        if !report.passed() {
            print_failure(&report, &config);
            failed = true;
        }
    }
    let mut total = 0;
    for (backend, count) in [(SimBackend::Memory, 1_000), (SimBackend::Sqlite, 100)] {
        let config = SimConfig { backend, ..config.clone() };
        match run_many(0, count, &config) {
            Ok(n) => total += n,
            Err((report, config)) => {
                print_failure(&report, &config);
                failed = true;
            }
        }
    }
    // The checker fails when it must.
    for (broken, invariant) in [
        (Broken::IgnoreLiveClaims, Invariant::AtMostOnce),
        (Broken::ShortLeases, Invariant::AtMostOnce),
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
