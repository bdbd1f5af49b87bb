//! The official OpenAI and Anthropic Python SDKs, run from the project's
//! virtualenv (`make setup` installs them) against Envoy on loopback.

use std::process::Command;

use crate::paths::root;

/// Runs `script` with the project's Python, `PORT` set to Envoy's; its
/// standard output, trimmed, or a failure with its error output.
pub fn python(script: &str, port: u16) -> String {
    let out = Command::new(root().join(".venv/bin/python"))
        .arg("-c")
        .arg(script)
        .env("PORT", port.to_string())
        .output()
        .expect("the project's Python (make setup)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
