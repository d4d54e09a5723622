//! WAL checkpoints on a thread and connection of their own, and keeping the WAL file ahead of
//! its frames (see the module docs of `sqlite`).

use super::*;

/// How many operations the write connection applies between two background checkpoints (an
/// operation appends one to a dozen pages to the WAL; see [`autocheckpoint_pages`]).
pub(super) const CHECKPOINT_EVERY_OPS: usize = 128;

/// The WAL size (in pages) at which SQLite checkpoints in the committing caller's transaction.
///
/// The background checkpoints copy frames into the database file, but under a steady stream
/// of writes they never let the WAL start over: it restarts only when a write begins with every
/// frame already copied, which a checkpoint running beside the writer does not reach. So this
/// checkpoint, in a commit, is what bounds the WAL file, and it runs every so many calls (about
/// every 1,200 new calls at 10,000 pages), with two fsyncs. SQLite's default, 1,000 pages,
/// would run it ten times as often.
///
/// - `FULL`: 10,000 pages (~40 MB of WAL at most). Each commit's own fsync dwarfs this
///   checkpoint's share: 4 times the bound measured no faster.
/// - `NORMAL`: 40,000 pages (~160 MB). With no fsync per commit, this checkpoint was 5.8% of
///   the writing thread's time at 10,000, and a sequential new call 15% slower than at 40,000
///   (BENCHMARKS.md). NORMAL is chosen for speed; its docs say what the WAL may grow to.
pub(super) fn autocheckpoint_pages(synchronous: Synchronous) -> usize {
    match synchronous {
        Synchronous::Full => 10_000,
        Synchronous::Normal => 40_000,
    }
}

/// The checkpoint thread: copy committed WAL frames into the database file when the writer
/// asks, without blocking it (`PASSIVE` waits for no lock, and skips frames a reader still
/// needs). It syncs the database file as the connection's `synchronous` setting says before
/// the WAL is reused, as SQLite's own automatic checkpoints do: durability is unchanged. Then,
/// under `FULL`, it keeps the WAL file ahead of the frames written ([`WalAhead`]).
pub(super) fn checkpoint_loop(conn: Connection, asked: mpsc::Receiver<()>, ahead: Option<WalAhead>) {
    while asked.recv().is_ok() {
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match done {
            Ok((_, frames, _)) => {
                if let Some(ahead) = &ahead {
                    ahead.keep_ahead(&conn, u64::try_from(frames).unwrap_or(0));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "a background SQLite checkpoint failed; the next one, or the writer, will do it")
            }
        }
    }
}

/// How far ahead of the last frame written the WAL file is kept (bytes), at least.
pub(super) const WAL_AHEAD_LOW: u64 = 4 << 20;
/// How much the WAL file is extended by at a time (bytes).
pub(super) const WAL_AHEAD_STEP: u64 = 4 << 20;

/// Keeps the WAL file longer than the frames in it, with blocks already written (zeros), so
/// that a commit's fsync under `synchronous = FULL` does not also extend the file.
///
/// A commit that appends past the file's end makes its fsync write the file system's metadata
/// too (the new blocks, the file's size: on ext4 a journal commit), which measured about twice
/// the cost of an fsync that overwrites blocks the file already has (BENCHMARKS.md, "a fresh
/// journal"). The WAL grows until SQLite's checkpoint in a commit lets it start over
/// ([`autocheckpoint_pages`]), then is rewritten from its start; every new journal, and every
/// journal opened again (the last connection to close removes the WAL), went through that
/// growth: its first ~2,000 new calls.
///
/// Safe beside SQLite: the zeros are written past the file's end only while this connection
/// holds the write lock (`BEGIN IMMEDIATE`, then `ROLLBACK`: nothing is written to the
/// journal), so no frame is appended meanwhile, and SQLite reads a WAL only up to its last valid
/// frame (a zero frame ends recovery, as the end of the file does). The WAL has no locks of its
/// own (they are on the `-shm` file), so opening and closing it here releases none of SQLite's.
/// The extension is synced here, on the checkpoint thread, not by a caller's commit.
pub(super) struct WalAhead {
    wal: PathBuf,
    /// A frame's size: the page and its 24-byte header.
    frame: u64,
    /// The most the WAL reaches before SQLite's checkpoint in a commit starts it over (bytes).
    bound: u64,
}

impl WalAhead {
    /// `None` unless the journal is a file with `synchronous = FULL` (with `NORMAL`, commits do
    /// not fsync, and the WAL's bound is four times larger).
    pub(super) fn new(path: &Path, options: &SqliteOptions, conn: &Connection) -> Option<WalAhead> {
        let name = path.to_string_lossy();
        if options.synchronous != Synchronous::Full || name.starts_with("file:") || name == ":memory:" {
            return None;
        }
        // The name SQLite gives the WAL: its own full path of the journal, with `-wal`.
        let file: String = conn
            .query_row("SELECT file FROM pragma_database_list WHERE name = 'main'", [], |r| {
                r.get(0)
            })
            .ok()?;
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).ok()?;
        let frame = u64::try_from(page).ok()? + 24;
        Some(WalAhead {
            wal: PathBuf::from(format!("{file}-wal")),
            frame,
            bound: 32 + (autocheckpoint_pages(options.synchronous) as u64 + 256) * frame,
        })
    }

    /// After a checkpoint found `frames` frames in the WAL: extend the file if its end is near.
    pub(super) fn keep_ahead(&self, conn: &Connection, frames: u64) {
        let end = 32 + frames * self.frame;
        let Ok(len) = std::fs::metadata(&self.wal).map(|m| m.len()) else {
            return;
        };
        if len >= self.bound || end + WAL_AHEAD_LOW <= len {
            return;
        }
        if let Err(e) = self.extend(conn, (end.max(len) + WAL_AHEAD_STEP).min(self.bound)) {
            tracing::debug!(error = %e, wal = %self.wal.display(), "could not extend the SQLite WAL ahead of its writes");
        }
    }

    pub(super) fn extend(&self, conn: &Connection, to: u64) -> Result<(), Box<dyn std::error::Error>> {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&self.wal)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let written = (|| -> std::io::Result<()> {
            // Under the write lock: the file's end is where the zeros may go.
            let len = file.metadata()?.len();
            if len < to {
                file.seek(SeekFrom::Start(len))?;
                let zeros = vec![0u8; 256 << 10];
                let mut at = len;
                while at < to {
                    let n = (to - at).min(zeros.len() as u64) as usize;
                    file.write_all(&zeros[..n])?;
                    at += n as u64;
                }
            }
            Ok(())
        })();
        conn.execute_batch("ROLLBACK")?;
        written?;
        file.sync_data()?;
        Ok(())
    }
}
