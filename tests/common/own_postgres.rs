//! A PostgreSQL server of a test's own (its own data folder and port, started with
//! `.ci/postgres.sh`), for tests that crash, stop or pause the server: the shared server of the
//! other tests is never touched. Stopped, and its data folder removed, when dropped.

use std::path::PathBuf;

/// A test's own PostgreSQL server.
pub struct OwnPostgres {
    /// Its URL (`postgres://postgres@127.0.0.1:PORT/effect_tool_test`).
    pub url: String,
    dir: &'static str,
    port: &'static str,
}

impl OwnPostgres {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/postgres.sh")
    }

    /// Start a server in data folder `dir` on `port` (each test binary picks its own pair, below
    /// 32768: a port in the kernel's ephemeral range can be held by any client connection, and
    /// the server then fails to bind it).
    pub fn start(dir: &'static str, port: &'static str) -> Self {
        let out = std::process::Command::new("bash")
            .arg(Self::script())
            .arg("start")
            .env("EFFECT_TOOL_PG_DIR", dir)
            .env("EFFECT_TOOL_PG_PORT", port)
            .output()
            .expect("running .ci/postgres.sh start");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "could not start PostgreSQL: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let url = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export EFFECT_TOOL_PG_URL="))
            .expect("the script prints the URL")
            .trim()
            .to_owned();
        OwnPostgres { url, dir, port }
    }

    fn pg_ctl(&self, args: &[&str]) {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|dirs| dirs.filter_map(|d| d.ok()).map(|d| d.path().join("bin/pg_ctl")).max())
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("pg_ctl"));
        let data = format!("{}/data", self.dir);
        let mut cmd = if is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            std::process::Command::new(&bin)
        };
        let status = cmd
            .args(["-D", &data])
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("running pg_ctl");
        assert!(status.success(), "pg_ctl {args:?} failed");
    }

    /// Stop the server at once, as a crash does (no checkpoint, connections cut).
    pub fn kill(&self) {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
    }

    /// Start it again with the settings `.ci/postgres.sh` gave it.
    pub fn revive(&self) {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}/sock -c max_connections=400",
            self.port, self.dir
        );
        let log = format!("{}/server.log", self.dir);
        self.pg_ctl(&["-l", &log, "-w", "-t", "60", "-o", &opts, "start"]);
    }

    /// The server's processes: the postmaster (first line of `postmaster.pid`) and its
    /// children (a backend per connection, and the background workers).
    fn processes(&self) -> Vec<String> {
        let pidfile = format!("{}/data/postmaster.pid", self.dir);
        let text = std::fs::read_to_string(&pidfile).unwrap_or_else(|e| panic!("reading {pidfile}: {e}"));
        let main = text
            .lines()
            .next()
            .expect("postmaster.pid names the postmaster")
            .trim()
            .to_owned();
        let out = std::process::Command::new("pgrep")
            .args(["-P", &main])
            .output()
            .expect("running pgrep");
        let mut pids = vec![main];
        pids.extend(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
        pids
    }

    fn signal_all(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .args(self.processes())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{signal} of the server's processes failed");
    }

    /// Freeze the server (SIGSTOP to every one of its processes): connections stay open and
    /// nothing answers, as with a hung host or a network partition without resets.
    pub fn pause(&self) {
        self.signal_all("STOP");
    }

    /// Let a [`OwnPostgres::pause`]d server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal_all("CONT");
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        // A paused server cannot stop: let it go on first (harmless if it runs).
        let _ = std::process::Command::new("kill")
            .arg("-CONT")
            .args(
                std::fs::read_to_string(format!("{}/data/postmaster.pid", self.dir))
                    .ok()
                    .and_then(|t| t.lines().next().map(str::to_owned)),
            )
            .status();
        let _ = std::process::Command::new("bash")
            .arg(OwnPostgres::script())
            .arg("stop")
            .env("EFFECT_TOOL_PG_DIR", self.dir)
            .env("EFFECT_TOOL_PG_PORT", self.port)
            .output();
    }
}
