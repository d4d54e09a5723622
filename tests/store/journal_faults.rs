//! Disk and file faults under a SQLite journal (issue 12, item 5): a full file system, a
//! read-only one, a truncated journal file and a corrupt one.
//!
//! For each fault an irreversible tool, whose effect goes to a downstream ledger the engine
//! cannot see, is called: the call fails before any effect, with an error that says what
//! happened and what to do; nothing panics (the call runs inside the test); and once the fault
//! is gone (space freed, the file system remounted read-write, the file restored from a copy)
//! the same call runs once and is recorded.
//!
//! The journals live on a small tmpfs that each test mounts itself (the tests need root, or
//! `CAP_SYS_ADMIN`); it is unmounted when the test ends, failed or not. Where mounting is not
//! permitted the test says loudly that it was skipped.
//!
//! Run: `cargo test -p effect-tool --test store journal_faults::`

#![cfg(target_os = "linux")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::ledger::Downstream;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{EffectClass, EffectCtx, EffectError, Engine, RecordState, Store, Tool, ToolError};

/// An irreversible tool: each call applies one effect downstream, keyed by its idempotency key.
#[derive(Clone)]
struct Transfer {
    down: Arc<Downstream>,
}

impl Tool for Transfer {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "transfer";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.down.apply(&ctx.idempotency_key());
        Ok(format!("sent {} bytes", to.len()))
    }
}

/// A tmpfs of `size` mounted by the test; unmounted (lazily, so that an open file cannot keep
/// it) when dropped, however the test ends.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// `None` (after saying so loudly) where this process may not mount.
    fn mount(name: &str, size: &str) -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(format!("effect-tool-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                let _ = std::fs::remove_dir(&dir);
                eprintln!("\n*** SKIPPED JOURNAL FAULT TEST `{name}`: cannot mount a tmpfs ({why}); run as root ***\n");
                None
            }
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn remount(&self, mode: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.dir)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "remount {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Fill the file system holding `path` until a write fails for want of space.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("creating the filler");
    let block = vec![0u8; 4096];
    loop {
        match f.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc_enospc()) => break,
            Err(e) => panic!("filling the file system: {e}"),
        }
    }
    let _ = f.sync_all();
}

fn libc_enospc() -> i32 {
    28
}

fn engine(store: SqliteStore) -> Engine {
    Engine::with_config(store, common::short())
}

/// The call fails, with the ledger untouched, and its message contains every one of `says`.
async fn fails_before_effect(
    engine: &Engine,
    tool: &Transfer,
    args: &str,
    down: &Downstream,
    says: &[&str],
) -> EffectError<ToolError> {
    let run = common::run("r");
    let err = engine
        .call(tool, &run, Default::default(), args.to_owned())
        .await
        .expect_err("the journal cannot take the claim, so the call must fail");
    assert_eq!(down.requests(), 0, "no effect may happen without a claim: {err}");
    let text = err.to_string();
    eprintln!("the call failed as it should: {text}");
    for s in says {
        assert!(text.contains(s), "the error should say `{s}`: {text}");
    }
    err
}

/// The call runs once and its record is completed.
async fn runs_once(store: &SqliteStore, engine: &Engine, tool: &Transfer, args: &str, down: &Downstream) {
    let run = common::run("r");
    engine
        .call(tool, &run, Default::default(), args.to_owned())
        .await
        .expect("once the fault is gone the call runs");
    assert_eq!(down.requests(), 1, "the effect happens once");
    let key = common::key_of(tool, &run, &args.to_owned());
    let rec = store.get(&key).await.unwrap().expect("the call is recorded");
    assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
}

#[tokio::test]
async fn a_full_file_system_fails_the_claim_and_work_resumes_once_space_is_freed() {
    let Some(fs) = Tmpfs::mount("journal-full", "1m") else {
        return;
    };
    let path = fs.path("j.db");
    let store = SqliteStore::open(&path).expect("opening the journal");
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    let engine = engine(store.clone());
    // The input is recorded with the claim: larger than any free space left, so the claim's
    // write must grow the journal.
    let args = "x".repeat(256 * 1024);
    fill(&fs.path("filler"));
    fails_before_effect(&engine, &tool, &args, &down, &["full", "free space"]).await;
    let run = common::run("r");
    let key = common::key_of(&tool, &run, &args);
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "a claim that failed leaves nothing claimed"
    );
    std::fs::remove_file(fs.path("filler")).unwrap();
    runs_once(&store, &engine, &tool, &args, &down).await;
    drop(engine);
    drop(store);
}

#[tokio::test]
async fn a_read_only_file_system_fails_the_open_and_work_resumes_once_writable() {
    let Some(fs) = Tmpfs::mount("journal-ro", "4m") else {
        return;
    };
    let path = fs.path("j.db");
    drop(SqliteStore::open(&path).expect("creating the journal"));
    // Linux refuses to remount read-only while a file is open for writing: the fault a process
    // meets is a journal on a file system that is read-only when it starts. So first the
    // checkpoint thread's connection must have closed.
    wait_closed(&path);
    fs.remount("ro");
    let err = SqliteStore::open(&path).expect_err("a read-only journal cannot take claims");
    let text = err.to_string();
    eprintln!("the journal did not open, as it should not: {text}");
    assert!(text.contains("read-only"), "the error says what happened: {text}");
    assert!(text.contains("read-write"), "the error says what to do: {text}");
    fs.remount("rw");
    let store = SqliteStore::open(&path).expect("the journal opens once writable");
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    let engine = engine(store.clone());
    runs_once(&store, &engine, &tool, "alice", &down).await;
}

/// A journal with `n` completed records, closed (its WAL checkpointed into the file).
async fn populated(path: &Path, n: usize) {
    let store = SqliteStore::open(path).expect("creating the journal");
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    let engine = engine(store.clone());
    for i in 0..n {
        engine
            .call(&tool, &common::run("fill"), Default::default(), format!("{i:0>600}"))
            .await
            .unwrap();
    }
    drop(engine);
    drop(store);
    // Damage done to the file must not be masked by the WAL.
    wait_closed(path);
}

/// Wait until the journal at `path` is closed: the last connection to close (the checkpoint
/// thread's, which stops on its own a moment after the store is dropped) folds the WAL into
/// the file and removes it.
///
/// SQLite folds and removes the WAL only in the connection that finds itself the last: two
/// connections closing at the same moment (the checkpoint thread's and a reader's, on a busy
/// machine) can each see the other and leave it. If the WAL is still there after a while, a
/// connection of the test's own, alone now, opens and closes the file, which folds it; a
/// connection the store leaked would still hold it, and the test fails as it should.
fn wait_closed(path: &Path) {
    let wal = path.with_extension("db-wal");
    for round in 0..1000 {
        if !wal.exists() {
            return;
        }
        if round == 200 {
            let conn = rusqlite::Connection::open(path).expect("opening the closed journal");
            // A read opens the WAL; the close, the only one now, folds and removes it.
            let _: i64 = conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .expect("reading the closed journal");
            drop(conn);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} is still there after the journal was closed", wal.display());
}

/// The call fails (at open or at the claim) with `says` in the message, with no effect.
async fn damaged_journal_fails(path: &Path, says: &[&str]) {
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    match SqliteStore::open(path) {
        Err(e) => {
            let text = e.to_string();
            eprintln!("the journal did not open, as it should not: {text}");
            for s in says {
                assert!(text.contains(s), "the error should say `{s}`: {text}");
            }
        }
        Ok(store) => {
            let engine = engine(store);
            fails_before_effect(&engine, &tool, "alice", &down, says).await;
        }
    }
    assert_eq!(down.requests(), 0);
}

#[tokio::test]
async fn a_truncated_journal_fails_and_work_resumes_from_a_restored_copy() {
    let Some(fs) = Tmpfs::mount("journal-truncated", "16m") else {
        return;
    };
    let path = fs.path("j.db");
    populated(&path, 200).await;
    let copy = fs.path("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    damaged_journal_fails(&path, &["damaged", "restore"]).await;
    std::fs::copy(&copy, &path).unwrap();
    let store = SqliteStore::open(&path).expect("the restored journal opens");
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    let engine = engine(store.clone());
    runs_once(&store, &engine, &tool, "alice", &down).await;
}

#[tokio::test]
async fn a_corrupt_journal_fails_and_work_resumes_from_a_restored_copy() {
    let Some(fs) = Tmpfs::mount("journal-corrupt", "16m") else {
        return;
    };
    let path = fs.path("j.db");
    populated(&path, 200).await;
    let copy = fs.path("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    // The middle half of the file, past the header page: garbage.
    for b in &mut bytes[len / 4..len * 3 / 4] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    damaged_journal_fails(&path, &["damaged", "restore"]).await;
    std::fs::copy(&copy, &path).unwrap();
    let store = SqliteStore::open(&path).expect("the restored journal opens");
    let down = Arc::new(Downstream::default());
    let tool = Transfer { down: down.clone() };
    let engine = engine(store.clone());
    runs_once(&store, &engine, &tool, "alice", &down).await;
}

/// A tool whose effect coincides with the disk filling up: it fills the file system, applies
/// its effect and returns an output too large for the space left, so the completion's write
/// fails after the effect.
#[derive(Clone)]
struct FillsTheDisk {
    down: Arc<Downstream>,
    filler: PathBuf,
}

impl Tool for FillsTheDisk {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "fills_the_disk";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        fill(&self.filler);
        self.down.apply(&ctx.idempotency_key());
        Ok(format!("{to}{}", "y".repeat(256 * 1024)))
    }
}

#[tokio::test]
async fn a_completion_that_meets_a_full_disk_is_retried_until_space_is_freed() {
    let Some(fs) = Tmpfs::mount("journal-full-after", "1m") else {
        return;
    };
    let store = SqliteStore::open(fs.path("j.db")).expect("opening the journal");
    let down = Arc::new(Downstream::default());
    let filler = fs.path("filler");
    let tool = FillsTheDisk {
        down: down.clone(),
        filler: filler.clone(),
    };
    let engine =
        Engine::with_config(store.clone(), common::short()).with_store_retry(std::time::Duration::from_secs(60));
    // The operator frees the space once the effect has happened (the completion's first write
    // has then failed, or is about to): the call must wait for it, not give up nor repeat.
    let freer = {
        let down = down.clone();
        std::thread::spawn(move || {
            while down.requests() == 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
            std::fs::remove_file(&filler).expect("freeing the space");
        })
    };
    let run = common::run("r");
    let out = engine.call(&tool, &run, Default::default(), "bob".to_owned()).await;
    freer.join().unwrap();
    let out = out.expect("the completion is retried until it is recorded");
    assert!(out.starts_with("bob"));
    assert_eq!(down.requests(), 1, "the effect happened once");
    let key = common::key_of(&tool, &run, &"bob".to_owned());
    let rec = store.get(&key).await.unwrap().expect("recorded");
    assert_eq!(rec.state, RecordState::Completed, "{:?}", rec.state);
    // Called again, it replays the record.
    engine
        .call(&tool, &run, Default::default(), "bob".to_owned())
        .await
        .expect("replayed");
    assert_eq!(down.requests(), 1, "a replay does not repeat the effect");
}
