//! The config's `databases:` opened for the `sql` step: SQLite files (relative to the config
//! file) and PostgreSQL servers, with their pool sizes, timeouts and start-up SQL.

use std::sync::Arc;

use busbar_config::{line_of, ConfigError, DatabaseConfig, DbTls, InitConfig, LoadedConfig};
use busbar_sql::{Database, Kind, Options, PgConfig};

/// Opens database `name`. SQLite opens now (a failure, its init included, is a config error);
/// PostgreSQL connects in the background, so an unreachable server does not stop the start.
pub fn open(
    loaded: &LoadedConfig,
    name: &str,
    d: &DatabaseConfig,
    workers: usize,
) -> Result<Arc<Database>, ConfigError> {
    let at = format!("databases.{name}");
    let fail = |path: &str, line: Option<u64>, msg: String| loaded.error(line, path, msg);
    let kind = if let Some(url) = d.url.as_ref().filter(|u| !u.expose().is_empty()) {
        let u = url.expose();
        if let Some(rest) = u.strip_prefix("sqlite:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            sqlite(loaded, rest, d)
        } else {
            let mut config: PgConfig = u.parse().map_err(|e| {
                fail(
                    &format!("{at}.url"),
                    None,
                    format!("invalid PostgreSQL URL '{}': {e}", url.redacted()),
                )
            })?;
            if let Some(p) = &d.password {
                config.password(p.expose().as_bytes());
            }
            Kind::Postgres(Box::new(config))
        }
    } else if let Some(path) = &d.path {
        sqlite(loaded, path, d)
    } else {
        let mut config = PgConfig::new();
        config.host(d.host.as_deref().unwrap_or("localhost"));
        config.port(d.port.unwrap_or(5432));
        if let Some(u) = &d.user {
            config.user(u);
        }
        if let Some(p) = &d.password {
            config.password(p.expose().as_bytes());
        }
        if let Some(db) = &d.dbname {
            config.dbname(db);
        }
        Kind::Postgres(Box::new(config))
    };
    let init_file = match (&d.init, &kind) {
        (None, _) => None,
        (Some(InitConfig::File(f)), _) => Some(f),
        (Some(InitConfig::ByKind { sqlite, .. }), Kind::Sqlite { .. }) => sqlite.as_ref(),
        (Some(InitConfig::ByKind { postgres, .. }), Kind::Postgres(_)) => postgres.as_ref(),
    };
    let init = match init_file {
        Some(f) => {
            let file = loaded.resolve(&f.value);
            Some(busbar_core::file::read_to_string(&file).map_err(|e| {
                fail(
                    &format!("{at}.init"),
                    line_of(f),
                    format!("cannot read {}: {e}", file.display()),
                )
            })?)
        }
        None => None,
    };
    let tls = match &kind {
        Kind::Postgres(c)
            if d.tls == DbTls::Require || c.get_ssl_mode() == busbar_sql::PgSslMode::Require =>
        {
            let ca = d.tls_ca.as_ref().map(|f| loaded.resolve(f));
            let client = crate::endpoint::tls::client(ca.as_deref(), None, None)
                .map_err(|(_, msg)| fail(&format!("{at}.tls_ca"), None, msg))?;
            Some(client.rustls())
        }
        _ => None,
    };
    let options = Options {
        kind,
        pool: d.pool.filter(|p| *p > 0).unwrap_or(workers),
        acquire_timeout: d.acquire_timeout.0,
        statement_timeout: d.statement_timeout.0,
        connect_timeout: d.connect_timeout.0,
        statement_cache: d.statement_cache,
        init,
        tls,
    };
    Database::open(name, options).map_err(|e| fail(&at, None, e))
}

fn sqlite(loaded: &LoadedConfig, path: &str, d: &DatabaseConfig) -> Kind {
    let path = if path == ":memory:" {
        std::path::PathBuf::from(path)
    } else {
        loaded.resolve(path)
    };
    Kind::Sqlite {
        path,
        busy_timeout: d.busy_timeout.0,
    }
}
