#!/usr/bin/env bash
# Run every test of the workspace (all features, all backends) with the services they need:
# a throwaway PostgreSQL (started and stopped here), the Python MCP client used as the external
# client of the MCP server test, Prometheus, and headless Chromium for the console's pages.
# Works on a fresh machine: it installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f tests/mcp_client/requirements.txt ]; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r tests/mcp_client/requirements.txt
fi

# A real Prometheus (and promtool) for tests/observe_prometheus.rs: Debian's package.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }) ||
      echo "scripts/test.sh: could not install prometheus (apt-get install prometheus)" >&2
  fi
fi
export EFFECT_TOOL_REQUIRE_PROMETHEUS=1

# Headless Chromium and chromedriver for the web console's browser test
# (tests/ops/console_browser.rs): Debian's packages, driven through WebDriver.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }) ||
      echo "scripts/test.sh: could not install chromium (apt-get install chromium chromium-driver)" >&2
  fi
fi
export EFFECT_TOOL_REQUIRE_BROWSER=1

# A real PgBouncer (Debian's 1.18) for tests/pg_production/: the conformance suite through it
# in transaction pooling mode. The test starts and stops its own instance.
if [ ! -x /usr/sbin/pgbouncer ] && command -v apt-get >/dev/null 2>&1; then
  (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null; }) ||
    echo "scripts/test.sh: could not install pgbouncer (apt-get install pgbouncer)" >&2
fi

# The third-party MCP servers the gateway's tests front (tests/adapters/gateway.rs): npm's
# filesystem, memory and everything servers and PyPI's mcp-server-git, at pinned versions.
if [ -z "${EFFECT_TOOL_MCP_SERVERS:-}" ]; then
  eval "$(scripts/mcp-servers.sh install)"
fi
export EFFECT_TOOL_REQUIRE_MCP_SERVERS=1

if [ -z "${EFFECT_TOOL_PG_URL:-}" ]; then
  eval "$(.ci/postgres.sh start)"
  trap '.ci/postgres.sh stop' EXIT
fi
# With a server at hand, the Postgres tests must run, never skip.
export EFFECT_TOOL_REQUIRE_PG=1

# The compile-fail cases (crate `ui-tests`) build in trybuild's own project, which does not read
# this workspace's profiles: the same debug setting as Cargo.toml's `[profile.dev]` keeps its
# builds as small. They build against `effect-tool` with its default features, whatever this
# command turns on, so one pass checks every `.stderr`.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only

cargo test --workspace --all-features --no-fail-fast "$@"
