//! A real S3-compatible server for tests: moto's server (`pip install "moto[server]"`), on a
//! free loopback port, stopped when dropped. Shared by storage and end-to-end tests.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    pub async fn start() -> Moto {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // On PATH, or where deploy/host-setup.sh --test-deps installs it.
        let venv = "/var/cache/warren/tools/moto/bin/moto_server";
        let program = if std::path::Path::new(venv).exists() {
            venv
        } else {
            "moto_server"
        };
        let child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server runs (deploy/host-setup.sh --test-deps installs it)");
        let m = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "moto_server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        m
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates a bucket (object stores never create buckets themselves).
    pub async fn bucket(&self, name: &str) {
        let r = reqwest::Client::new()
            .put(format!("{}/{name}", self.endpoint()))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "create bucket: {}", r.status());
    }
}

/// The object-store location of `bucket/prefix` on an S3 server at `port` of loopback.
pub fn location(port: u16, bucket: &str, prefix: &str) -> String {
    format!("s3://{bucket}/{prefix}?endpoint=http://127.0.0.1:{port}&region=us-east-1")
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Credentials moto accepts (any will do; object_store needs some to sign).
pub fn set_test_credentials() {
    // SAFETY: set before any thread reads the environment in these tests' processes is not
    // guaranteed, so only set values every test agrees on.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", "warren-test");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "warren-test-secret");
    }
}
