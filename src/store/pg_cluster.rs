//! A private PostgreSQL server for tests: `initdb` into a temporary directory, `pg_ctl start`
//! on a free loopback port, `pg_ctl stop -m immediate` on drop. It needs the server binaries
//! (`scripts/setup --test` installs Debian's `postgresql`); as root it runs them as the
//! `postgres` user, because the server refuses to run as root.
//!
//! Shared by the store's unit tests and the HA integration test (`tests/common` includes this
//! file by path).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[derive(Debug)]
pub struct PgCluster {
    root: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    pub port: u16,
}

fn bindir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("TERN_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return Ok(bin);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    Err(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb, no \
         pg_config); install them with `scripts/setup --test` or set TERN_PG_BIN"
            .into(),
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl PgCluster {
    /// Create and start a cluster with a superuser `tern` trusted on loopback.
    pub fn start() -> Result<PgCluster, String> {
        PgCluster::start_with(None)
    }

    /// As [`PgCluster::start`], with TLS on (`ssl=on`) using this PEM certificate and key;
    /// plain connections are still accepted, as with a default server.
    pub fn start_tls(cert: &Path, key: &Path) -> Result<PgCluster, String> {
        PgCluster::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&Path, &Path)>) -> Result<PgCluster, String> {
        let bin = bindir()?;
        let as_postgres = is_root();
        let root =
            std::env::temp_dir().join(format!("tern-pg-{}-{}", std::process::id(), free_port()?));
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let mut cluster = PgCluster {
            root,
            bin,
            as_postgres,
            port: 0,
        };
        if as_postgres {
            cluster.check(Command::new("chown").arg("postgres").arg(&cluster.root))?;
        }
        let data = cluster.data();
        cluster.check(
            cluster
                .tool("initdb")
                .args(["-A", "trust", "-U", "tern", "-E", "UTF8", "--no-sync", "-D"])
                .arg(&data),
        )?;
        let ssl = match tls {
            Some((cert, key)) => cluster.install_tls(cert, key)?,
            None => String::new(),
        };
        // Retry on a port taken between choosing and binding it.
        let mut last = String::new();
        for _ in 0..3 {
            cluster.port = free_port()?;
            let opts = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off{ssl}",
                cluster.port,
                cluster.root.display()
            );
            let log = cluster.root.join("server.log");
            match cluster.check(
                cluster
                    .tool("pg_ctl")
                    .args(["-w", "-t", "60", "-D"])
                    .arg(&data)
                    .arg("-l")
                    .arg(&log)
                    .args(["-o", &opts, "start"]),
            ) {
                Ok(_) => return Ok(cluster),
                Err(e) => {
                    last = format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default())
                }
            }
        }
        Err(format!("PostgreSQL did not start: {last}"))
    }

    /// Copy the certificate and key where the server (maybe the `postgres` user) reads them;
    /// the server options that turn TLS on.
    fn install_tls(&self, cert: &Path, key: &Path) -> Result<String, String> {
        let (c, k) = (self.root.join("server.crt"), self.root.join("server.key"));
        std::fs::copy(cert, &c).map_err(|e| format!("{}: {e}", cert.display()))?;
        std::fs::copy(key, &k).map_err(|e| format!("{}: {e}", key.display()))?;
        // The server refuses a key others can read.
        self.check(Command::new("chmod").arg("600").arg(&k))?;
        if self.as_postgres {
            self.check(Command::new("chown").arg("postgres").arg(&c).arg(&k))?;
        }
        Ok(format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            c.display(),
            k.display()
        ))
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn check(&self, cmd: &mut Command) -> Result<Output, String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(format!(
                "{cmd:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// URL of database `db` (created by [`PgCluster::create_db`], or `postgres`).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://tern@127.0.0.1:{}/{db}", self.port)
    }

    /// A fresh, empty database, so tests sharing a cluster do not see each other's rows.
    pub fn create_db(&self, db: &str) -> Result<String, String> {
        self.check(
            self.tool("createdb")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "tern",
                ])
                .arg(db),
        )?;
        Ok(self.url(db))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.port != 0 {
            let _ = self
                .tool("pg_ctl")
                .args(["-m", "immediate", "-D"])
                .arg(self.data())
                .arg("stop")
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
