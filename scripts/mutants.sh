#!/usr/bin/env bash
# Mutation testing of the decision core (issue 20): the files that decide whether a call may
# run again. Slow (each mutant is a build and a test run); not part of CI. See TESTING.md.
#
#   scripts/mutants.sh                   every decision-core file against the tests that matter:
#                                        effect-tool-core's unit and integration tests and the
#                                        root crate's engine and journal tests (ROOT_TESTS)
#   scripts/mutants.sh --core-only       only effect-tool-core's own tests, doc tests included
#                                        (much faster: one crate to build per mutant)
#   scripts/mutants.sh --in-diff [BASE]  only mutants on lines changed since BASE (default
#                                        HEAD, i.e. uncommitted changes): the before-commit routine
#   scripts/mutants.sh --file decide/policy.rs  one file (repeatable; a path under effect-tool-core/src)
#   scripts/mutants.sh ... -- ARGS       extra arguments for cargo-mutants (e.g. --list)
#
# Environment: JOBS (parallel mutants, default 1 on a shared machine; with more, each job builds
# in a target directory of its own), MUTANTS_TARGET_DIR (a build directory kept between runs,
# default target/mutants, so dependencies build once; with JOBS=1 only),
# MUTANTS_OUT (where results go, default target/mutants-out), ROOT_TESTS (the root crate's test
# binaries to run, space-separated: `engine store toolkit macros ops`), ROOT_SKIP (test-name substrings skipped in
# them: by default the PostgreSQL, crash and HTTP tests and the fault tests that run worker
# processes or a frozen server, which skip here or take minutes per mutant; the in-process
# shutdown, pause and store-fault tests stay in).
# Needs `cargo install cargo-mutants --locked`. Equivalent mutants are excluded, with their
# reasons, in mutants.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

core=(decide/policy.rs decide/record.rs decide/identity.rs call/key.rs value/canonical.rs value/marker.rs value/outcome.rs engine/entry.rs engine/replay.rs engine/join.rs engine/execute.rs engine/lead.rs engine/complete.rs engine/compensation.rs)
files=()
# The decision core's tests: effect-tool-core's library (unit tests) and integration tests, and
# the root crate's tests of the engine's decisions and of the journals (the conformance suite).
# Each test binary holds many files' tests, named `<file>::<test>`: ROOT_SKIP leaves out files.
core_tests=(decisions)
read -r -a root_tests <<< "${ROOT_TESTS:-engine store toolkit macros ops}"
read -r -a root_skip <<< "${ROOT_SKIP:-engine_faults_hang:: engine_faults_pause::a_paused_worker engine_faults_restart:: engine_faults_shutdown::sigterm keys_big_integers:: testing_kit:: people_notify:: console_api:: store_postgres:: crash_sqlite:: crash_postgres:: journal_faults:: journal_files::}"
tests=(--test-package effect-tool-core,effect-tool --cargo-test-arg=--lib)
# The same selection as plain `cargo test` arguments, for the script's own baseline (below).
baseline_targets=(-p effect-tool-core -p effect-tool --lib)
baseline_filters=()
for t in "${core_tests[@]}" "${root_tests[@]}"; do
    tests+=("--cargo-test-arg=--test=$t")
    baseline_targets+=("--test=$t")
done
if [[ ${#root_skip[@]} -gt 0 ]]; then
    tests+=("--cargo-test-arg=--")
    for s in "${root_skip[@]}"; do
        tests+=("--cargo-test-arg=--skip=$s")
        baseline_filters+=("--skip=$s")
    done
fi
root_mode=1
diff_base=""
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --core-only) tests=(--test-package effect-tool-core); root_mode=0; shift ;;
        --in-diff)
            shift
            diff_base="HEAD"
            if [[ $# -gt 0 && "$1" != --* ]]; then diff_base="$1"; shift; fi
            ;;
        --file) files+=("$2"); shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "scripts/mutants.sh: unknown argument \`$1\` (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#files[@]} -eq 0 ]] && files=("${core[@]}")

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "cargo-mutants is not installed: run \`cargo install cargo-mutants --locked\`" >&2
    exit 2
fi

args=(--config mutants.toml -p effect-tool-core "${tests[@]}" --jobs "${JOBS:-1}"
      --features effect-tool-core/testing,effect-tool-core/sqlite --output "${MUTANTS_OUT:-target/mutants-out}")
for f in "${files[@]}"; do
    args+=(--file "effect-tool-core/src/$f")
done

if [[ -n "$diff_base" ]]; then
    mkdir -p target
    diff_file=target/mutants.diff
    git diff "$diff_base" -- $(printf 'effect-tool-core/src/%s ' "${files[@]}") > "$diff_file"
    if [[ ! -s "$diff_file" ]]; then
        echo "no changes to the decision core since $diff_base: no mutants to test"
        exit 0
    fi
    args+=(--in-diff "$diff_file")
fi

export CARGO_TARGET_DIR="${MUTANTS_TARGET_DIR:-$PWD/target/mutants}"
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_TERM_COLOR=never
features=(--features effect-tool-core/testing,effect-tool-core/sqlite)
# `--list` and `--list-files` only name the mutants: no baseline to run for them.
listing=0
for a in "${extra[@]}"; do [[ $a == --list* ]] && listing=1; done
if [[ $root_mode == 1 && $listing == 0 ]]; then
    # cargo-mutants' own baseline runs only the mutated package's tests (effect-tool-core), where
    # the root crate's test binaries do not exist, so it fails. This script runs the baseline
    # itself, unmutated, with the root tests, then tells cargo-mutants to skip its own and
    # derives the test timeout from it (3x the baseline's run, at least 60 s). A mutant's build
    # (both crates and every selected test binary, incrementally) may take 15 min.
    log="${MUTANTS_OUT:-target/mutants-out}.baseline.log"
    # cargo-mutants builds each mutant in a copy of the tree with this same target directory,
    # and cargo names a workspace crate's build by its path *within* the workspace: the last
    # mutant's build of effect-tool-core is newer than these sources, so cargo would take it as
    # up to date and the baseline would test a mutant (it once did: a retry loop without
    # backoff). Touching the sources makes cargo build them again.
    find effect-tool-core/src src -name '*.rs' -exec touch {} +
    echo "baseline (unmutated): cargo test ${baseline_targets[*]} -- ${baseline_filters[*]}"
    cargo test --no-run "${features[@]}" "${baseline_targets[@]}" > "$log" 2>&1 || {
        echo "the unmutated tests do not build: see $log; no mutants tested" >&2
        exit 1
    }
    t0=$(date +%s)
    cargo test "${features[@]}" "${baseline_targets[@]}" -- "${baseline_filters[@]}" >> "$log" 2>&1 || {
        echo "the unmutated tests fail: see $log; no mutants tested" >&2
        exit 1
    }
    test_secs=$(( $(date +%s) - t0 ))
    timeout=$(( test_secs * 3 > 60 ? test_secs * 3 : 60 ))
    echo "baseline passed in ${test_secs} s: test timeout ${timeout} s"
    args+=(--baseline=skip --timeout "$timeout" --build-timeout 900)
fi
if [[ "${JOBS:-1}" -gt 1 ]]; then
    # Parallel mutants must not share a target directory: cargo names a workspace crate's build
    # by its path within the workspace, so every job's copy of the tree builds the same
    # artifacts, and one job's test run would pick up the binary another job just built from
    # its own mutant (seen: a mutant of `Debug for Engine` "timed out" on a shutdown test that
    # only another job's mutant breaks, while the test that checks the Debug output passed).
    # Unset, each job builds in its own copy's `target/` (a cold build of the dependencies
    # once per job).
    unset CARGO_TARGET_DIR
fi
exec cargo mutants "${args[@]}" "${extra[@]}"
