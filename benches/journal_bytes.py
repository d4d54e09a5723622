#!/usr/bin/env python3
"""What each SQLite journal write carries (issue 36, item 2): bytes per row and per index
entry, and pages (WAL frames) written per commit, for the writes of a new idempotent call.

The journal is made with the store's own schema (every migration of
`effect-tool-core/src/store/sqlite/schema.rs`, read from the source, so it stays in step), and
filled with the two writes the store makes for each new call of the benches' refund tool
(`benches/common`): the claim's INSERT of the whole row (the engine's key, fingerprint, input
and holder, as it writes them) and the completion's UPDATE of the four columns it changes,
each its own transaction, as the writer commits them one call at a time. `wal_autocheckpoint`
is off, so the WAL only grows and each commit's frames are the growth of the file.

Then SQLite's `dbstat` table says what the rows and index entries hold: payload bytes per
entry and pages per B-tree. No timing: these are counts, the same on any machine.

Run: `python3 benches/journal_bytes.py [calls]` (default 2,000; the journal in a temporary
directory). `--keep DIR` writes it there instead.
"""

import json
import os
import re
import secrets
import sqlite3
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_RS = os.path.join(HERE, "..", "effect-tool-core", "src", "store", "sqlite", "schema.rs")


def migrations():
    """The SQL of every schema version, in order, as `schema.rs` declares them."""
    text = open(SCHEMA_RS).read()
    consts = dict(re.findall(r'pub\(super\) const (SCHEMA_V\d+): &str = "(.*?)";', text, re.S))
    order = re.findall(r"\((\d+), (SCHEMA_V\d+)\)", text)
    return [consts[name] for _, name in order]


def new_journal(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    for sql in migrations():
        conn.executescript(sql)
    conn.execute("CREATE TABLE IF NOT EXISTS effect_tool_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)")
    return conn


def wal_frames(path, page):
    try:
        size = os.path.getsize(path + "-wal")
    except FileNotFoundError:
        return 0
    return max(0, (size - 32) // (page + 24))


INSERT = """INSERT INTO effect_records (key, version, tool, class, run_id, thread_id, call_id, fingerprint,
    input, state, attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at,
    expires_at, call_ids, holder)
 VALUES (?1, 1, 'issue_refund', 'idempotent', 'bench', NULL, NULL, ?2, ?3, 'claimed', 1, ?4, NULL, NULL,
    NULL, NULL, ?5, ?5, NULL, NULL, ?6)"""

COMPLETE = """UPDATE effect_records SET state = 'completed', lease_until = NULL, output = ?2, updated_at = ?3
 WHERE key = ?1 AND attempt = 1 AND updated_at = ?4 AND lease_until IS ?5 AND version = 1"""


def fill(conn, path, calls):
    """`calls` new calls' writes, one commit each; the WAL frames of each kind of commit."""
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    holder = json.dumps(
        {"instance": secrets.token_hex(16), "host": os.uname().nodename, "pid": os.getpid()},
        separators=(",", ":"),
    )
    claim_frames, complete_frames = [], []
    now = 1_780_000_000_000
    for n in range(calls):
        args = {
            "amount_cents": 12345,
            "currency": "EUR",
            "order_id": f"ord_{n:016}",
            "reason": "customer returned the damaged item",
        }
        # The canonical JSON (RFC 8785 sorts keys; these are plain ASCII).
        text = json.dumps(args, separators=(",", ":"), sort_keys=True)
        digest = __import__("hashlib").sha256(text.encode()).hexdigest()
        key = f"bench:issue_refund:{digest}"
        before = wal_frames(path, page)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, (key, digest, text, now + 30_000, now, holder))
        conn.execute("COMMIT")
        middle = wal_frames(path, page)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(COMPLETE, (key, "12345", now + 1, now, now + 30_000))
        conn.execute("COMMIT")
        after = wal_frames(path, page)
        claim_frames.append(middle - before)
        complete_frames.append(after - middle)
        now += 2
    return page, claim_frames, complete_frames


def frame_pages(path, page):
    """The page number of every frame in the WAL, in order."""
    out = []
    with open(path + "-wal", "rb") as f:
        f.seek(32)
        while True:
            head = f.read(24)
            if len(head) < 24:
                return out
            out.append(int.from_bytes(head[:4], "big"))
            f.seek(page, 1)


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def main():
    args = sys.argv[1:]
    keep = None
    if "--keep" in args:
        i = args.index("--keep")
        keep = args[i + 1]
        del args[i : i + 2]
    calls = int(args[0]) if args else 2000
    directory = keep or tempfile.mkdtemp(prefix="journal-bytes-")
    path = os.path.join(directory, "journal.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = new_journal(path)
    page, claims, completes = fill(conn, path, calls)
    written = frame_pages(path, page)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"SQLite {sqlite3.sqlite_version}, page size {page} B, {calls} new calls, one commit per write\n")
    print("| B-tree | entries | payload bytes per entry | pages | bytes per page used |")
    print("|---|---|---|---|---|")
    rows = conn.execute(
        """SELECT name, SUM(ncell), SUM(payload), COUNT(*), SUM(pgsize - unused)
           FROM dbstat WHERE name LIKE 'effect_records%' OR name LIKE 'sqlite_autoindex_effect_records%'
           GROUP BY name ORDER BY name"""
    ).fetchall()
    for name, cells, payload, pages, used in rows:
        # These are index B-trees (the table is WITHOUT ROWID): interior cells hold entries too.
        per = payload / cells if cells else 0
        print(f"| `{name}` | {cells} | {per:.0f} | {pages} | {used / pages:.0f} |")
    row = conn.execute(
        """SELECT AVG(LENGTH(key)), AVG(LENGTH(fingerprint)), AVG(LENGTH(input)), AVG(LENGTH(output)),
                  AVG(LENGTH(holder)), AVG(LENGTH(tool) + LENGTH(class) + LENGTH(run_id) + LENGTH(state))
           FROM effect_records"""
    ).fetchone()
    print(
        "\nA completed row's columns (mean bytes): key {:.0f}, fingerprint {:.0f}, input {:.0f}, output {:.0f}, "
        "holder {:.0f}, tool + class + run_id + state {:.0f}; the rest are integers and NULLs.".format(*row)
    )
    print("\n| commit | WAL frames (pages written), mean | first 100 calls | last 100 calls |")
    print("|---|---|---|---|")
    for label, counted in (("claim (INSERT of the row)", claims), ("completion (UPDATE of 4 columns)", completes)):
        print(f"| {label} | {mean(counted):.2f} | {mean(counted[:100]):.2f} | {mean(counted[-100:]):.2f} |")
    # Which B-tree each frame of the last 100 calls' commits belongs to.
    owner = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
    owner[1] = owner.get(1, "sqlite_schema") + " (page 1: the header)"
    tail = written[-(sum(claims[-100:]) + sum(completes[-100:])):]
    counts = {}
    for pg in tail:
        name = owner.get(pg, "free or new page")
        counts[name] = counts.get(name, 0) + 1
    print("\nFrames of the last 100 calls' commits, by B-tree (per call):\n")
    print("| B-tree | frames per call |")
    print("|---|---|")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"| `{name}` | {n / 100:.2f} |")
    if keep is None:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        os.rmdir(directory)


if __name__ == "__main__":
    main()
