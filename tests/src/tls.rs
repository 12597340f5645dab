//! A throwaway certificate authority and a certificate for 127.0.0.1 signed by it, made with
//! the `openssl` command when a test starts, and clients of both kinds that trust only it; and
//! certificates for the nodes of a TLS cluster, which serve both ends of a connection.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tempfile::TempDir;

/// A certificate authority and one server certificate (`localhost`, `127.0.0.1`), in PEM
/// files under a temporary directory that goes with it.
pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    /// Makes a new authority and server certificate, valid for two days.
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("comcount-tls-")
            .tempdir()
            .expect("cannot make a temporary directory for certificates");
        let ca = Self { dir };
        std::fs::write(
            ca.path("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
             basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n",
        )
        .expect("cannot write the certificate extensions");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        ca.openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
                &["-subj", "/CN=comcount test CA"],
                &["-addext", "basicConstraints=critical,CA:TRUE"],
                &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ]
            .concat(),
        );
        ca.openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr"],
                &["-subj", "/CN=localhost"],
            ]
            .concat(),
        );
        ca.openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        ca
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run openssl, which the TLS tests need to make their certificates \
                     (`apt-get install openssl`): {e}"
                )
            });
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The authority's certificate, PEM.
    pub fn ca_file(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The server's certificate, PEM.
    pub fn cert_file(&self) -> PathBuf {
        self.path("server.crt")
    }

    /// The server's private key, PEM.
    pub fn key_file(&self) -> PathBuf {
        self.path("server.key")
    }

    /// The authority's certificate, PEM, as bytes.
    pub fn ca_pem(&self) -> Vec<u8> {
        read(&self.ca_file())
    }

    /// Issues a new certificate and key (PEM files) for a node of a TLS cluster, for the same
    /// names as the [server's](Self::cert_file) (`localhost`, `127.0.0.1`), and returns their
    /// paths. It serves both ends of a connection, where the server's certificate serves
    /// only the server's end: a node connects to the others' cluster bus, and to its primary,
    /// with its own certificate, and a node checks the certificate of every node that connects
    /// to its bus, whatever `tls-auth-clients` says.
    pub fn issue_node_certificate(&self) -> (PathBuf, PathBuf) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("node-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let (ext, key, csr, cert) = (
            format!("{name}.ext"),
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        std::fs::write(
            self.path(&ext),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
             basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )
        .expect("cannot write the certificate extensions");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ]);
        // A serial of its own rather than the CA's serial file, which certificates issued at
        // the same time would race on.
        let serial = format!("0x{:016x}", fastrand::u64(1..));
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &serial,
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
        (self.path(&cert), self.path(&key))
    }

    /// A redis-rs client for a `rediss://` URL that trusts this authority (and the system's).
    pub fn redis_rs_client(&self, url: &str) -> redis::Client {
        redis_rs_client(url, self.ca_pem())
    }

    /// A rustls client configuration that trusts this authority alone, for fred.
    pub fn rustls_config(&self) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&self.ca_pem()) {
            roots
                .add(cert.expect("the CA file holds a bad certificate"))
                .expect("rustls refuses the test CA");
        }
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring offers no TLS version")
        .with_root_certificates(roots)
        .with_no_client_auth()
    }
}

/// A redis-rs client for `url` that trusts the authority `ca_pem`.
pub(crate) fn redis_rs_client(url: &str, ca_pem: Vec<u8>) -> redis::Client {
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem),
        },
    )
    .unwrap_or_else(|e| panic!("cannot make a TLS client for {url}: {e}"))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
