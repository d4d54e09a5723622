#!/usr/bin/env bash
# What the index behind "records that need a person" costs claims, and what it saves the
# listing (issue 17). Two copies of the journal's table in one PostgreSQL: `with_index` exactly
# as migration 1 makes it (records_state, records_run, records_expires), and `no_index` without
# records_state. pgbench runs the journal's two writes of a new call (the claim's INSERT, the
# completion's UPDATE, each its own commit) against each, in alternating rounds, with
# synchronous_commit off so that the index's own cost is not hidden under the fsync. Then the
# needs-a-person listing (the gauges', the console's) is timed on both, among ROWS completed
# records and 60 that need a person.
#
#   EFFECT_TOOL_PG_URL=postgres://... benches/pg/needs_person_index.sh
#   (or eval "$(.ci/postgres.sh start)" first). Settings: ROWS (default 200000), ROUNDS (3),
#   SECONDS_PER_ROUND (10), CLIENTS (4).
set -euo pipefail
URL="${EFFECT_TOOL_PG_URL:?set EFFECT_TOOL_PG_URL (eval \"\$(.ci/postgres.sh start)\")}"
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
ROWS="${ROWS:-200000}" ROUNDS="${ROUNDS:-3}" SECS="${SECONDS_PER_ROUND:-10}" CLIENTS="${CLIENTS:-4}"
psql() { "$BIN/psql" "$URL" -X -q -v ON_ERROR_STOP=1 "$@"; }

for s in with_index no_index; do
  psql <<SQL
DROP SCHEMA IF EXISTS $s CASCADE;
CREATE SCHEMA $s;
CREATE SEQUENCE $s.row_version_seq;
CREATE TABLE $s.records (
    key text PRIMARY KEY, version integer NOT NULL, tool text NOT NULL, class text NOT NULL,
    run_id text NOT NULL, thread_id text, call_id text, fingerprint text NOT NULL,
    input json NOT NULL, state text NOT NULL, attempt bigint NOT NULL, lease_until bigint,
    output json, reason text, approval_role text, decided_by text, created_at bigint NOT NULL,
    updated_at bigint NOT NULL, expires_at bigint,
    row_version bigint NOT NULL DEFAULT nextval('$s.row_version_seq')
) WITH (fillfactor = 80);
CREATE INDEX records_run ON $s.records (run_id, created_at);
CREATE INDEX records_expires ON $s.records (expires_at) WHERE expires_at IS NOT NULL;
INSERT INTO $s.records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
                        output, created_at, updated_at)
SELECT 'run-' || (g % 1000) || ':refund:' || md5(g::text), 4, 'refund', 'idempotent',
       'run-' || (g % 1000), md5(g::text), '{"order": "A-1"}', 'completed', 1, '"ok"', g, g
FROM generate_series(1, $ROWS) g;
INSERT INTO $s.records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
                        lease_until, created_at, updated_at)
SELECT 'run-x:send_email:' || md5(g::text), 4, 'send_email', 'irreversible', 'run-x', md5(g::text),
       '"a@b.c"', (ARRAY['in-doubt', 'awaiting-approval', 'claimed'])[1 + g % 3], 1, 0, g, g
FROM generate_series(1, 60) g;
VACUUM ANALYZE $s.records;
SQL
done
psql -c "CREATE INDEX records_state ON with_index.records (state, created_at); ANALYZE with_index.records;"

script() {
  cat <<SQL
\\set k random(1, 2000000000)
INSERT INTO $1.records (key, version, tool, class, run_id, fingerprint, input, state, attempt, lease_until, created_at, updated_at) VALUES ('bench:refund:' || :k || ':' || :client_id, 4, 'refund', 'idempotent', 'bench', 'f', '{"order": "B-1"}', 'claimed', 1, 0, $ROWS + :k, $ROWS + :k) ON CONFLICT (key) DO NOTHING;
UPDATE $1.records SET state = 'completed', output = '"ok"', lease_until = NULL, updated_at = updated_at + 1, row_version = nextval('$1.row_version_seq') WHERE key = 'bench:refund:' || :k || ':' || :client_id;
SQL
}
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
script with_index > "$tmp/with_index.sql"; script no_index > "$tmp/no_index.sql"

echo "# new calls per second (claim + completion, 2 commits), $CLIENTS clients, ${SECS}s rounds, synchronous_commit off"
for r in $(seq 1 "$ROUNDS"); do
  for s in no_index with_index; do
    tps="$(PGOPTIONS='-c synchronous_commit=off' "$BIN/pgbench" "$URL" -n -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" -f "$tmp/$s.sql" 2>/dev/null \
      | awk '/^tps/ {print int($3)}')"
    echo "round $r  $s  $tps"
  done
done

echo "# the needs-a-person listing among $ROWS completed records (execution time, best of 5)"
for s in no_index with_index; do
  best=""
  for _ in 1 2 3 4 5; do
    t="$(psql -At -c "EXPLAIN (ANALYZE, FORMAT JSON) SELECT key, state, tool, updated_at FROM $s.records WHERE state = ANY(ARRAY['in-doubt', 'awaiting-approval', 'claimed'])" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Execution Time"])')"
    best="$(python3 -c "print(min(float('$t'), float('${best:-1e9}')))")"
  done
  plan="$(psql -At -c "EXPLAIN SELECT key FROM $s.records WHERE state = ANY(ARRAY['in-doubt', 'awaiting-approval', 'claimed'])" | head -n 1)"
  echo "$s  ${best} ms  ($plan)"
done
psql -c "DROP SCHEMA with_index CASCADE; DROP SCHEMA no_index CASCADE;"
