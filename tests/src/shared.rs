//! The servers a test binary shares: one standalone server and one cluster, started on first
//! use and stopped by their watchdogs when the binary exits.

use std::sync::OnceLock;

use crate::cluster::Cluster;
use crate::server::RedisServer;

static STANDALONE: OnceLock<RedisServer> = OnceLock::new();
static CLUSTER: OnceLock<Cluster> = OnceLock::new();

/// The standalone server for the tests: `REDIS_URL` when set, else one started for this binary.
pub fn standalone_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => STANDALONE.get_or_init(RedisServer::standalone).url(),
    }
}

/// The cluster for the tests, started for this binary.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(Cluster::start)
}
