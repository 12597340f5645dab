//! The URL forms [`RedisStore::connect_any`](crate::RedisStore::connect_any) reads, fred's
//! (`Config::from_url`): one server, a cluster, or the primary that sentinels name. What the
//! URL names is read here, before anything connects; redis-rs reads each node's address and
//! settings.

use std::error::Error;
use std::fmt;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError};

/// Why [`RedisStore::connect_any`](crate::RedisStore::connect_any) could not connect.
///
/// No message repeats the URL, which may hold a password.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is none of the forms `connect_any` reads, or redis-rs cannot read a node's
    /// address or settings in it. Nothing was connected to.
    InvalidUrl {
        /// What is wrong, and what to write instead.
        reason: String,
    },
    /// The URL's scheme names a deployment, or TLS, that a feature of this crate brings, and
    /// this build leaves that feature out. Nothing was connected to.
    FeatureDisabled {
        /// The URL's scheme, such as `redis-cluster`.
        scheme: String,
        /// The feature of `comcount-redis-rs` to turn on.
        feature: &'static str,
    },
    /// The URL is valid, and redis-rs could not connect: no server answered, it refused the
    /// credentials, or no sentinel named a primary for the service.
    Redis(RedisError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::InvalidUrl { reason } => write!(f, "invalid Redis URL: {reason}"),
            ConnectError::FeatureDisabled { scheme, feature } => write!(
                f,
                "a {scheme}:// URL needs the `{feature}` feature of comcount-redis-rs, which this \
                 build leaves out: add \"{feature}\" to the crate's features in Cargo.toml"
            ),
            ConnectError::Redis(error) => write!(f, "cannot connect to Redis: {error}"),
        }
    }
}

impl Error for ConnectError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ConnectError::Redis(error) => Some(error),
            _ => None,
        }
    }
}

fn invalid(reason: impl Into<String>) -> ConnectError {
    ConnectError::InvalidUrl {
        reason: reason.into(),
    }
}

/// What a URL names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Deployment {
    /// One server: `redis://`, `rediss://`, `redis+unix://` and their Valkey names.
    Server,
    /// A Redis Cluster: `redis-cluster://`, `rediss-cluster://`.
    Cluster,
    /// The primary that sentinels name: `redis-sentinel://`, `rediss-sentinel://`.
    Sentinel,
}

impl Deployment {
    /// The feature of this crate that connects to it.
    pub(crate) fn feature(self) -> &'static str {
        match self {
            Deployment::Server => "connection-manager",
            Deployment::Cluster => "cluster",
            Deployment::Sentinel => "sentinel",
        }
    }
}

/// The schemes of one server that redis-rs reads as they are.
const SERVER_SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// The schemes over TCP, each of which a cluster's or a sentinel's scheme starts with.
const TCP_SCHEMES: [&str; 4] = ["redis", "rediss", "valkey", "valkeys"];

/// The query parameters that name more nodes or a sentinel service.
const NODE: &str = "node";
const SERVICE: &str = "sentinelServiceName";
const SENTINEL_USERNAME: &str = "sentinelUsername";
const SENTINEL_PASSWORD: &str = "sentinelPassword";

/// A sentinel's port when the URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// The deployment a URL's scheme names, and the scheme of one of its nodes (`rediss` for
/// `rediss-cluster`). `None` when the scheme is none of those `connect_any` reads.
fn scheme(scheme: &str) -> Option<(Deployment, &'static str)> {
    let scheme = scheme.to_ascii_lowercase();
    for (suffix, deployment) in [
        ("-cluster", Deployment::Cluster),
        ("-sentinel", Deployment::Sentinel),
    ] {
        if let Some(base) = scheme.strip_suffix(suffix) {
            return TCP_SCHEMES
                .into_iter()
                .find(|s| *s == base)
                .map(|base| (deployment, base));
        }
    }
    SERVER_SCHEMES
        .into_iter()
        .find(|s| *s == scheme)
        .map(|base| (Deployment::Server, base))
}

/// The deployment `url`'s scheme names, if it is one `connect_any` reads.
#[cfg_attr(not(feature = "connection-manager"), allow(dead_code))]
pub(crate) fn deployment(url: &str) -> Option<(&str, Deployment)> {
    let (name, _) = url.split_once("://")?;
    scheme(name).map(|(deployment, _)| (name, deployment))
}

/// What a URL names, read.
#[derive(Debug)]
pub(crate) enum Target {
    /// One server.
    #[cfg_attr(not(feature = "connection-manager"), allow(dead_code))]
    Server(ConnectionInfo),
    /// A cluster's seed nodes, each with the URL's credentials and settings.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Cluster(Vec<ConnectionInfo>),
    /// A primary that sentinels name.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Sentinel(SentinelTarget),
}

/// The sentinels to ask, and how to connect to the primary they name.
#[derive(Debug)]
#[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
pub(crate) struct SentinelTarget {
    /// The sentinels, each with the sentinels' credentials.
    pub(crate) sentinels: Vec<ConnectionInfo>,
    /// The name the sentinels know the primary by.
    pub(crate) service: String,
    /// The primary's credentials, database and protocol, and whether to speak TLS to it;
    /// the address is the first sentinel's, and unused.
    pub(crate) primary: ConnectionInfo,
}

/// Reads `url`. `built` says whether a feature of this crate is compiled in: a URL whose
/// deployment needs one that is not is refused before anything else is read.
pub(crate) fn parse(url: &str, built: impl Fn(&str) -> bool) -> Result<Target, ConnectError> {
    let Some((name, rest)) = url.split_once("://") else {
        return Err(invalid(
            "no scheme: write redis://host:port/db for a server, \
             redis-cluster://host:port?node=host:port for a cluster, or \
             redis-sentinel://host:port?sentinelServiceName=NAME for the primary sentinels name",
        ));
    };
    let Some((deployment, base)) = scheme(name) else {
        return Err(invalid(format!(
            "the scheme {name:?} is none of redis, rediss, redis+unix (a server), \
             redis-cluster, rediss-cluster (a cluster), redis-sentinel, rediss-sentinel (the \
             primary sentinels name), or their valkey forms"
        )));
    };
    let name = name.to_ascii_lowercase();
    if !built(deployment.feature()) {
        return Err(ConnectError::FeatureDisabled {
            scheme: name,
            feature: deployment.feature(),
        });
    }
    let parts = Parts::split(rest);
    let query = parts.query()?;
    match deployment {
        Deployment::Server => {
            if let Some((key, _)) = query.named.first() {
                let belongs = if *key == NODE {
                    "a cluster's (redis-cluster://) or a sentinel's (redis-sentinel://)"
                } else {
                    "a sentinel's (redis-sentinel://)"
                };
                return Err(invalid(format!(
                    "{key}= has no meaning in a {name}:// URL, which names one server: it \
                     belongs in {belongs} URL"
                )));
            }
            Ok(Target::Server(node_info(&name, url)?))
        }
        Deployment::Cluster => {
            if let Some((key, _)) = query.named.iter().find(|(key, _)| *key != NODE) {
                return Err(invalid(format!(
                    "{key}= has no meaning in a {name}:// URL, which names a cluster: it \
                     belongs in a sentinel's (redis-sentinel://) URL"
                )));
            }
            let settings = query.others.join("&");
            let mut hosts = vec![parts.host(None)?];
            hosts.extend(query.nodes()?);
            let nodes = hosts
                .iter()
                .map(|host| {
                    let url = parts.url(base, parts.userinfo, host, Some(&settings));
                    node_info(&name, &url)
                })
                .collect::<Result<_, _>>()?;
            Ok(Target::Cluster(nodes))
        }
        Deployment::Sentinel => {
            let Some(service) = query.value(SERVICE) else {
                return Err(invalid(format!(
                    "a {name}:// URL needs sentinelServiceName=NAME, the name the sentinels \
                     know the primary by"
                )));
            };
            let first = parts.host(Some(SENTINEL_PORT))?;
            let settings = query.others.join("&");
            let primary = parts.url(base, parts.userinfo, &first, Some(&settings));
            let primary = node_info(&name, &primary)?;
            // The sentinels' own credentials, when the URL gives them; else the primary's.
            let username = query.value(SENTINEL_USERNAME);
            let password = query.value(SENTINEL_PASSWORD);
            let own = username.is_some() || password.is_some();
            let userinfo = if own { None } else { parts.userinfo };
            let mut hosts = vec![first];
            hosts.extend(query.nodes()?);
            let sentinels = hosts
                .iter()
                .map(|host| {
                    let info = node_info(&name, &parts.url(base, userinfo, host, None))?;
                    if !own {
                        return Ok(info);
                    }
                    let mut settings = RedisConnectionInfo::default();
                    if let Some(username) = username.filter(|u| !u.is_empty()) {
                        settings = settings.set_username(username);
                    }
                    if let Some(password) = password.filter(|p| !p.is_empty()) {
                        settings = settings.set_password(password);
                    }
                    Ok(info.set_redis_settings(settings))
                })
                .collect::<Result<_, ConnectError>>()?;
            Ok(Target::Sentinel(SentinelTarget {
                sentinels,
                service: service.to_owned(),
                primary,
            }))
        }
    }
}

/// Whether a feature of this crate is compiled in.
pub(crate) fn built(feature: &str) -> bool {
    [
        ("connection-manager", cfg!(feature = "connection-manager")),
        ("cluster", cfg!(feature = "cluster")),
        ("sentinel", cfg!(feature = "sentinel")),
    ]
    .into_iter()
    .any(|(name, on)| on && name == feature)
}

/// redis-rs's reading of one node's `url`, of a URL whose scheme is `scheme`.
fn node_info(scheme: &str, url: &str) -> Result<ConnectionInfo, ConnectError> {
    match url.into_connection_info() {
        Ok(info) => Ok(info),
        Err(error) => {
            // A URL that reads without TLS, and not with it, needs redis-rs's TLS.
            let tls = url.starts_with("rediss") || url.starts_with("valkeys");
            let plain = url.replacen("s://", "://", 1);
            if tls && plain.as_str().into_connection_info().is_ok() {
                return Err(ConnectError::FeatureDisabled {
                    scheme: scheme.to_owned(),
                    feature: if cfg!(feature = "tokio") {
                        "tokio-rustls"
                    } else {
                        "smol-rustls"
                    },
                });
            }
            Err(invalid(format!(
                "redis-rs cannot read a node's address or settings in it: {error}"
            )))
        }
    }
}

/// A URL after its scheme, cut into its parts, none of them decoded.
struct Parts<'a> {
    userinfo: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    query: &'a str,
    fragment: Option<&'a str>,
}

/// The query, split: the parameters read here, decoded, and the others as they were written,
/// for redis-rs.
struct Query<'a> {
    named: Vec<(&'static str, String)>,
    others: Vec<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(rest: &'a str) -> Self {
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        Self {
            userinfo,
            host,
            path,
            query,
            fragment,
        }
    }

    /// The host and port after the scheme, with `default_port` when it has none.
    fn host(&self, default_port: Option<u16>) -> Result<String, ConnectError> {
        if self.host.is_empty() {
            return Err(invalid(
                "no host: write the first node as host:port right after the scheme",
            ));
        }
        Ok(match default_port {
            Some(port) if !has_port(self.host) => format!("{}:{port}", self.host),
            _ => self.host.to_owned(),
        })
    }

    fn query(&self) -> Result<Query<'a>, ConnectError> {
        let mut query = Query {
            named: Vec::new(),
            others: Vec::new(),
        };
        for pair in self.query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key)?;
            match [NODE, SERVICE, SENTINEL_USERNAME, SENTINEL_PASSWORD]
                .into_iter()
                .find(|k| *k == key)
            {
                Some(known) => query.named.push((known, decode(value)?)),
                None => query.others.push(pair),
            }
        }
        Ok(query)
    }

    /// The URL of one node at `host` (`host:port`), with `userinfo` and the fragment, and,
    /// for a server rather than a sentinel, the path and `settings`: the parameters left for
    /// redis-rs (`protocol=resp3`).
    fn url(
        &self,
        base: &str,
        userinfo: Option<&str>,
        host: &str,
        settings: Option<&str>,
    ) -> String {
        let mut url = format!("{base}://");
        if let Some(userinfo) = userinfo {
            url.push_str(userinfo);
            url.push('@');
        }
        url.push_str(host);
        if let Some(settings) = settings {
            url.push_str(self.path);
            if !settings.is_empty() {
                url.push('?');
                url.push_str(settings);
            }
        }
        if let Some(fragment) = self.fragment {
            url.push('#');
            url.push_str(fragment);
        }
        url
    }
}

impl Query<'_> {
    /// The value of the first parameter `key`.
    fn value(&self, key: &str) -> Option<&str> {
        self.named
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every `node=host:port`, checked.
    fn nodes(&self) -> Result<Vec<String>, ConnectError> {
        self.named
            .iter()
            .filter(|(key, _)| *key == NODE)
            .map(|(_, node)| {
                let port = node.rsplit_once(':').map(|(_, port)| port);
                if !has_port(node) || port.is_none_or(|p| p.parse::<u16>().is_err()) {
                    return Err(invalid(format!(
                        "node={node} is not host:port; write each further node as \
                         node=host:port, the port included"
                    )));
                }
                Ok(node.clone())
            })
            .collect()
    }
}

/// Whether `host` ends in a port: `host:port`, `[v6]:port`.
fn has_port(host: &str) -> bool {
    if host.starts_with('[') {
        host.contains("]:")
    } else {
        host.contains(':')
    }
}

/// `text` from a query, decoded as a form is: `%XX` is a byte, `+` a space.
fn decode(text: &str) -> Result<String, ConnectError> {
    // The text itself is left out: it may be a password.
    let bad = || {
        invalid(
            "a query parameter does not decode: each % must start a byte in two hex digits, \
             and the bytes must be UTF-8",
        )
    };
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex = rest.get(..2).ok_or_else(bad)?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                rest = &rest[2..];
            }
            other => bytes.push(other),
        }
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use redis::{ConnectionAddr, ProtocolVersion};

    use super::*;

    fn read(url: &str) -> Result<Target, ConnectError> {
        parse(url, |_| true)
    }

    fn refusal(url: &str) -> String {
        match read(url) {
            Err(ConnectError::InvalidUrl { reason }) => reason,
            other => panic!("{url}: expected an invalid URL, got {other:?}"),
        }
    }

    fn tcp(info: &ConnectionInfo) -> (String, u16) {
        match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => panic!("not plain TCP: {other:?}"),
        }
    }

    #[test]
    fn a_servers_url_goes_to_redis_rs_as_it_is() {
        let Ok(Target::Server(info)) = read("redis://:pw@10.0.0.1:6380/3?protocol=resp3") else {
            panic!("one server");
        };
        assert_eq!(tcp(&info), ("10.0.0.1".to_owned(), 6380));
        assert_eq!(info.redis_settings().db(), 3);
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().protocol(), ProtocolVersion::RESP3);
        for url in [
            "REDIS://10.0.0.1",
            "valkey://10.0.0.1:6379",
            "redis+unix:///run/redis.sock?db=2",
            "unix:///run/redis.sock",
        ] {
            assert!(matches!(read(url), Ok(Target::Server(_))), "{url}");
        }
    }

    #[test]
    fn a_cluster_url_gives_every_node_the_urls_credentials_and_settings() {
        let url = "redis-cluster://app:s%40cret@10.0.0.1:7000?node=10.0.0.2:7001&protocol=resp3\
                   &node=%5B%3A%3A1%5D:7002";
        let Ok(Target::Cluster(nodes)) = read(url) else {
            panic!("a cluster");
        };
        let addresses: Vec<(String, u16)> = nodes.iter().map(tcp).collect();
        assert_eq!(
            addresses,
            [
                ("10.0.0.1".to_owned(), 7000),
                ("10.0.0.2".to_owned(), 7001),
                ("::1".to_owned(), 7002)
            ]
        );
        for node in &nodes {
            let settings = node.redis_settings();
            assert_eq!(settings.username(), Some("app"));
            assert_eq!(settings.password(), Some("s@cret"));
            assert_eq!(settings.protocol(), ProtocolVersion::RESP3);
        }
        let Ok(Target::Cluster(one)) = read("valkey-cluster://10.0.0.1") else {
            panic!("a cluster of one seed");
        };
        assert_eq!(
            one.iter().map(tcp).collect::<Vec<_>>(),
            [("10.0.0.1".to_owned(), 6379)]
        );
    }

    #[cfg(any(feature = "tokio-rustls", feature = "smol-rustls"))]
    #[test]
    fn a_tls_cluster_url_speaks_tls_to_every_node() {
        let Ok(Target::Cluster(nodes)) =
            read("rediss-cluster://10.0.0.1:7000?node=10.0.0.2:7001#insecure")
        else {
            panic!("a cluster");
        };
        assert_eq!(nodes.len(), 2);
        for node in &nodes {
            assert!(
                matches!(node.addr(), ConnectionAddr::TcpTls { insecure: true, .. }),
                "{:?}",
                node.addr()
            );
        }
    }

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_service_and_the_primarys_settings() {
        let url = "redis-sentinel://:pw@10.0.0.1/2?sentinelServiceName=my+service\
                   &node=10.0.0.2:26380&protocol=resp3";
        let Ok(Target::Sentinel(target)) = read(url) else {
            panic!("a sentinel");
        };
        assert_eq!(target.service, "my service");
        let sentinels: Vec<(String, u16)> = target.sentinels.iter().map(tcp).collect();
        assert_eq!(
            sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380)
            ]
        );
        for sentinel in &target.sentinels {
            // The URL's credentials, and neither its database nor its protocol: a sentinel
            // has no database to select.
            let settings = sentinel.redis_settings();
            assert_eq!(settings.password(), Some("pw"));
            assert_eq!(settings.db(), 0);
            assert_eq!(settings.protocol(), ProtocolVersion::RESP2);
        }
        let primary = target.primary.redis_settings();
        assert_eq!(primary.password(), Some("pw"));
        assert_eq!(primary.db(), 2);
        assert_eq!(primary.protocol(), ProtocolVersion::RESP3);
    }

    #[test]
    fn the_sentinels_own_credentials_stay_theirs() {
        let url = "redis-sentinel://app:pw@10.0.0.1:26379?sentinelServiceName=main\
                   &sentinelUsername=watcher&sentinelPassword=w%26tch";
        let Ok(Target::Sentinel(target)) = read(url) else {
            panic!("a sentinel");
        };
        let sentinel = target.sentinels[0].redis_settings();
        assert_eq!(sentinel.username(), Some("watcher"));
        assert_eq!(sentinel.password(), Some("w&tch"));
        let primary = target.primary.redis_settings();
        assert_eq!(primary.username(), Some("app"));
        assert_eq!(primary.password(), Some("pw"));

        // An empty password: the sentinels take none.
        let url = "redis-sentinel://:pw@10.0.0.1?sentinelServiceName=main&sentinelPassword=";
        let Ok(Target::Sentinel(target)) = read(url) else {
            panic!("a sentinel");
        };
        assert_eq!(target.sentinels[0].redis_settings().password(), None);
        assert_eq!(target.primary.redis_settings().password(), Some("pw"));
    }

    #[test]
    fn a_url_without_a_known_scheme_is_refused_naming_the_forms() {
        assert!(refusal("10.0.0.1:6379").contains("no scheme"));
        for url in [
            "http://10.0.0.1",
            "redis-proxy://10.0.0.1",
            "unix-cluster:///a",
        ] {
            let reason = refusal(url);
            assert!(reason.contains("redis-cluster"), "{reason}");
            assert!(reason.contains("redis-sentinel"), "{reason}");
        }
    }

    #[test]
    fn a_sentinel_url_without_its_service_is_refused() {
        let reason = refusal("redis-sentinel://10.0.0.1:26379?node=10.0.0.2:26379");
        assert!(reason.contains("sentinelServiceName=NAME"), "{reason}");
    }

    #[test]
    fn a_node_without_a_port_is_refused() {
        for node in [
            "10.0.0.2",
            "10.0.0.2:",
            "10.0.0.2:http",
            "[::1]",
            "10.0.0.2:70000",
        ] {
            let url = format!("redis-cluster://10.0.0.1:7000?node={node}");
            let reason = refusal(&url);
            assert!(reason.contains("node=host:port"), "{url}: {reason}");
        }
        let reason = refusal("redis-cluster://?node=10.0.0.2:7000");
        assert!(reason.contains("no host"), "{reason}");
    }

    #[test]
    fn a_parameter_in_the_wrong_url_is_refused_naming_the_right_one() {
        let reason = refusal("redis://10.0.0.1:7000?node=10.0.0.2:7000");
        assert!(reason.contains("redis-cluster://"), "{reason}");
        let reason = refusal("redis://10.0.0.1:26379?sentinelServiceName=main");
        assert!(reason.contains("redis-sentinel://"), "{reason}");
        let reason = refusal("redis-cluster://10.0.0.1:7000?sentinelServiceName=main");
        assert!(reason.contains("redis-sentinel://"), "{reason}");
    }

    #[test]
    fn what_redis_rs_cannot_read_is_refused() {
        for url in [
            "redis-cluster://10.0.0.1:7000/x",
            "redis-cluster://10.0.0.1:port",
            "redis://10.0.0.1/x",
            "redis-sentinel://0.0.0.0?sentinelServiceName=main",
        ] {
            assert!(refusal(url).contains("redis-rs"), "{url}");
        }
    }

    #[test]
    fn no_error_repeats_a_password() {
        for url in [
            "redis-cluster://app:hunter2@10.0.0.1:7000?node=bad",
            "redis-sentinel://app:hunter2@10.0.0.1",
            "redis-sentinel://10.0.0.1?sentinelServiceName=m&sentinelPassword=hunter2%zz",
            "redis://app:hunter2@10.0.0.1/x",
            "http://app:hunter2@10.0.0.1",
        ] {
            let text = read(url).expect_err(url).to_string();
            assert!(!text.contains("hunter2"), "{url}: {text}");
        }
    }

    #[test]
    fn a_deployment_this_build_leaves_out_names_its_feature() {
        for (url, scheme, feature) in [
            ("redis-cluster://10.0.0.1:7000", "redis-cluster", "cluster"),
            (
                "Rediss-Sentinel://10.0.0.1?sentinelServiceName=m",
                "rediss-sentinel",
                "sentinel",
            ),
            ("redis://10.0.0.1", "redis", "connection-manager"),
        ] {
            let error = parse(url, |f| f != feature).expect_err(url);
            let ConnectError::FeatureDisabled {
                scheme: s,
                feature: f,
            } = &error
            else {
                panic!("{url}: {error:?}");
            };
            assert_eq!((s.as_str(), *f), (scheme, feature));
            let text = error.to_string();
            assert!(text.contains(&format!("`{feature}` feature")), "{text}");
            assert!(text.contains("Cargo.toml"), "{text}");
        }
        assert!(parse("redis-cluster://10.0.0.1:7000", |f| f != "sentinel").is_ok());
    }

    #[test]
    fn built_says_which_deployments_this_build_connects_to() {
        assert_eq!(built("cluster"), cfg!(feature = "cluster"));
        assert_eq!(built("sentinel"), cfg!(feature = "sentinel"));
        assert_eq!(
            built("connection-manager"),
            cfg!(feature = "connection-manager")
        );
        assert!(!built("tokio"));
    }

    #[cfg(not(any(feature = "tokio-rustls", feature = "smol-rustls")))]
    #[test]
    fn tls_without_a_tls_feature_names_the_feature() {
        let error = read("rediss://10.0.0.1").expect_err("no TLS in this build");
        assert!(
            matches!(&error, ConnectError::FeatureDisabled { feature, .. } if feature.ends_with("-rustls")),
            "{error:?}"
        );
    }

    #[test]
    fn deployment_reads_the_scheme_alone() {
        assert_eq!(
            deployment("rediss-cluster://h:1"),
            Some(("rediss-cluster", Deployment::Cluster))
        );
        assert_eq!(
            deployment("valkey-sentinel://h"),
            Some(("valkey-sentinel", Deployment::Sentinel))
        );
        assert_eq!(
            deployment("redis+unix:///s"),
            Some(("redis+unix", Deployment::Server))
        );
        assert_eq!(deployment("h:1"), None);
    }
}
