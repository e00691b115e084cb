//! Security hardening regressions that need the real binary or the whole pipeline: the published
//! demo key never serves beyond loopback.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Regression: `serve` accepted the published demo HS256 secret on any address, so anyone who
/// read config/default.toml could mint admin tokens for a reachable deployment.
#[test]
fn the_demo_key_refuses_to_serve_beyond_loopback() {
    let snapshots = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .current_dir(MANIFEST_DIR)
        .arg("serve")
        .arg("--config")
        .arg(Path::new(MANIFEST_DIR).join("config/default.toml"))
        .env("WARRANT__SERVER__BIND", "0.0.0.0:0")
        .env("WARRANT__EMBEDDER__KIND", "hashed")
        .env("WARRANT__EMBEDDER__DIM", "64")
        .env("WARRANT__INDEX__SHARDS", "1")
        .env("WARRANT__DEMO__CORPUS", Path::new(MANIFEST_DIR).join("fixtures/demo/corpus.json"))
        .env("WARRANT__SNAPSHOTS__DIR", snapshots.path())
        .env_remove("WARRANT__AUTH__HS256_SECRET")
        .env_remove("WARRANT__AUTH__RS256_PUBLIC_KEY_FILE")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn warrant");
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        if line.starts_with("warrant listening on") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started on 0.0.0.0 with the demo key:\n{stderr}{line}");
        }
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "exit status {status}: {stderr}");
    for named in ["auth.hs256_secret", "server.bind", "0.0.0.0:0", "WARRANT__AUTH__HS256_SECRET"] {
        assert!(stderr.contains(named), "the refusal does not name {named}: {stderr}");
    }
}
