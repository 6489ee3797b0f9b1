//! The flags that bound a server's connections, the same on `tern controller` and `tern sim
//! serve` ([`tern::serve::ConnectionLimits`]).

use std::time::Duration;

use tern::serve::ConnectionLimits;
use tern::serve::connections::{default_max_connections, default_per_address};

#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Connections open at once: one more closes the oldest that is in no request, or, when
    /// all are, gets a 503 and is closed unread (default: half the open-files limit,
    /// `ulimit -n`, at most 8192).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Connections open at once from one client address, by the same rule among its own, so
    /// one client cannot take every slot (default: half of --max-connections). Behind a proxy
    /// or NAT every client shares an address: set it to --max-connections there.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: Option<u32>,
    /// A connection is closed when its TLS handshake takes longer than this, or a request's
    /// headers do from the connection (or handshake) or the previous answer; so it is also
    /// the idle keep-alive (seconds, or `30s`).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::number::duration)]
    header_timeout: f64,
    /// A request's body must have arrived this long after its headers, and a client that
    /// takes none of an answer for this long is dropped (seconds, or `1m`).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::number::duration)]
    body_timeout: f64,
}

impl ConnectionArgs {
    pub fn limits(&self) -> ConnectionLimits {
        let max_connections = self
            .max_connections
            .map_or_else(default_max_connections, |n| n as usize);
        ConnectionLimits {
            max_connections,
            max_per_address: self
                .max_connections_per_address
                .map_or_else(|| default_per_address(max_connections), |n| n as usize),
            header_timeout: Duration::from_secs_f64(self.header_timeout),
            body_timeout: Duration::from_secs_f64(self.body_timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tern::serve::connections::{BODY_TIMEOUT, HEADER_TIMEOUT};

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        connections: ConnectionArgs,
    }

    #[test]
    fn the_flags_default_to_the_library_defaults() {
        let cli = Cli::try_parse_from(["x"]).expect("parse");
        let limits = cli.connections.limits();
        assert_eq!(limits.header_timeout, HEADER_TIMEOUT);
        assert_eq!(limits.body_timeout, BODY_TIMEOUT);
        assert_eq!(limits.max_connections, default_max_connections());
        assert_eq!(limits.max_per_address, default_max_connections() / 2);
    }

    #[test]
    fn the_flags_set_the_limits() {
        let cli = Cli::try_parse_from([
            "x",
            "--max-connections",
            "40",
            "--header-timeout",
            "1.5",
            "--body-timeout",
            "2m",
        ])
        .expect("parse");
        assert_eq!(
            cli.connections.limits(),
            ConnectionLimits {
                max_connections: 40,
                max_per_address: 20,
                header_timeout: Duration::from_millis(1500),
                body_timeout: Duration::from_secs(120),
            }
        );
        for bad in [
            &["x", "--max-connections", "0"][..],
            &["x", "--header-timeout", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
