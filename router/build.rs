//! Bundles the web page's npm dependencies (xterm.js and its fit addon) into the binary:
//! `npm ci` in `web/` when they are missing, then a copy into OUT_DIR for `include_bytes!`.

use std::path::{Path, PathBuf};
use std::process::Command;

const FILES: [(&str, &str); 3] = [
    ("@xterm/xterm/lib/xterm.js", "xterm.js"),
    ("@xterm/xterm/css/xterm.css", "xterm.css"),
    ("@xterm/addon-fit/lib/addon-fit.js", "addon-fit.js"),
];

fn main() {
    // Read when the script runs, not baked in when it is compiled: cargo reuses a compiled
    // build script for a clone of the workspace at another path (same target dir).
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let web = Path::new(&manifest_dir).join("../web");
    println!(
        "cargo:rerun-if-changed={}",
        web.join("package-lock.json").display()
    );
    let modules = web.join("node_modules");
    let missing = FILES.iter().any(|(src, _)| !modules.join(src).is_file());
    if missing {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&web)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("`npm ci` in {} failed ({s}); the web page needs xterm.js from npm", web.display()),
            Err(e) => panic!(
                "cannot run npm ({e}): install Node.js and npm (deploy/host-setup.sh does) to bundle the web page"
            ),
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    for (src, dst) in FILES {
        let from = modules.join(src);
        println!("cargo:rerun-if-changed={}", from.display());
        std::fs::copy(&from, out.join(dst))
            .unwrap_or_else(|e| panic!("cannot copy {}: {e}", from.display()));
    }
}
