//! A throw-away PostgreSQL server for tests: `initdb` into a temporary directory, `pg_ctl`
//! on a free loopback port, stopped (and the directory removed) when dropped. The server
//! binaries are found through `BUSBAR_PG_BIN`, Debian's `/usr/lib/postgresql/*/bin`, or
//! `PATH`; as root, the server runs as the `postgres` user (it refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running server; stopped when dropped.
#[derive(Debug)]
pub struct TempPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    tls: bool,
}

impl TempPostgres {
    /// Starts a server, or explains what is missing.
    pub fn start() -> Result<Self, String> {
        Self::start_with(false)
    }

    /// Starts a server that also accepts TLS, with a certificate for `127.0.0.1` and
    /// `localhost` issued by a CA of its own ([`TempPostgres::ca`]).
    pub fn start_tls() -> Result<Self, String> {
        Self::start_with(true)
    }

    /// The PEM file of the CA that issued the TLS server's certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn start_with(tls: bool) -> Result<Self, String> {
        let bin = find_bin().ok_or(
            "PostgreSQL's server programs (initdb, pg_ctl) were not found: install Debian's \
             'postgresql' package (scripts/setup.sh does) or set BUSBAR_PG_BIN",
        )?;
        let as_postgres = is_root();
        let dir = std::env::temp_dir().join(format!(
            "busbar-pg-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(&dir))?;
        }
        if tls {
            make_certificates(&dir)?;
            if as_postgres {
                run(Command::new("chown")
                    .arg("postgres:")
                    .arg(dir.join("server.key")))?;
            }
        }
        let mut pg = Self {
            dir,
            bin,
            port: 0,
            as_postgres,
            tls,
        };
        let data = pg.dir.join("data");
        pg.run_pg(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "busbar".as_ref(),
                "--auth=trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        // A free port can be taken between the probe and the server's bind: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            pg.port = free_port()?;
            match pg.pg_ctl_start() {
                Ok(()) => return Ok(pg),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A URL to connect to the `postgres` database as the superuser `busbar`.
    pub fn url(&self) -> String {
        format!("postgres://busbar@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server now (`immediate`: as if it crashed), keeping its data.
    pub fn stop(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        self.run_pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        )
        .map(|_| ())
    }

    /// Starts the server again on the same port, after [`TempPostgres::stop`].
    /// The process id of the server's postmaster, from its pid file, while it runs.
    pub fn server_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("data").join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off \
             -c max_connections=400",
            self.port,
            self.dir.display()
        );
        if self.tls {
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                self.dir.display()
            ));
        }
        self.run_pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                opts.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "30".as_ref(),
                "start".as_ref(),
            ],
        )
        .map(|_| ())
        .map_err(|e| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })
    }

    fn run_pg(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<Output, String> {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.arg("-u").arg("postgres").arg("--").arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args).current_dir(&self.dir);
        run(&mut cmd)
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA and a server certificate it issued for 127.0.0.1 and localhost (openssl).
fn make_certificates(dir: &Path) -> Result<(), String> {
    let at = |f: &str| dir.join(f).display().to_string();
    let openssl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=busbar test CA",
        "-keyout",
        &at("ca.key"),
        "-out",
        &at("ca.crt"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &at("server.key"),
        "-out",
        &at("server.csr"),
    ])?;
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        &at("server.csr"),
        "-CA",
        &at("ca.crt"),
        "-CAkey",
        &at("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        &at("server.crt"),
        "-extfile",
        &at("server.ext"),
    ])?;
    // The server refuses a key others can read.
    run(Command::new("chmod").arg("600").arg(dir.join("server.key"))).map(|_| ())
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("BUSBAR_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").is_file())
        .collect();
    debian.sort_by_key(|p| {
        p.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(p) = debian.pop() {
        return Some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").is_file() && p.join("pg_ctl").is_file())
    })
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
