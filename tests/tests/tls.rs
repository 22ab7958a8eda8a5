//! `rediss://` end to end: a TLS-only Redis port with a certificate from a test CA. The
//! client trusting that CA (from `tls_ca_file`) locks; one trusting only the system roots
//! cannot connect, so the certificate is really checked.

use std::path::Path;
use std::process::Command;

use dlock_config::Config;
use dlock_tests::RedisServer;

/// A CA and a server certificate for 127.0.0.1, made with the `openssl` command.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl must be installed (apt-get install -y openssl)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=dlock test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_lock_over_tls_with_the_configured_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).display().to_string();
    let tls_port = free_port().to_string();
    let _server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("server.pem"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]);

    let config_path = certs.path().join("dlock.toml");
    std::fs::write(
        &config_path,
        format!("[redis.single]\naddress = \"rediss://127.0.0.1:{tls_port}\"\n\n[connection]\ntls_ca_file = \"ca.pem\"\nconnect_timeout = \"2s\"\n"),
    )
    .unwrap();
    let client = Config::from_file(&config_path)
        .unwrap()
        .build()
        .await
        .expect("TLS connection with the test CA");
    let guard = client.lock("over-tls").lock().await.unwrap();
    assert!(client.lock("over-tls").is_locked().await.unwrap());
    guard.unlock().await.unwrap();

    // Without the CA the server's certificate is not trusted.
    let untrusted = format!("[redis.single]\naddress = \"rediss://127.0.0.1:{tls_port}\"\n[connection]\nconnect_timeout = \"2s\"\n");
    let err = Config::from_toml_str(&untrusted)
        .unwrap()
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("could not connect"), "{err}");
}
