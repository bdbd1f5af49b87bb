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

/// Runs `script` like [`python`], in two steps: the script prints `ready`
/// once it is set up (its imports take seconds on a loaded machine), and
/// then reads a line; meanwhile `before` runs, and the line is sent when
/// it returns. What the script printed after `ready`, trimmed.
pub fn python_after(script: &str, port: u16, before: impl FnOnce()) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let mut child = Command::new(root().join(".venv/bin/python"))
        .arg("-c")
        .arg(script)
        .env("PORT", port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the project's Python (make setup)");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() != "ready" {
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        panic!("the script never said ready: {line}{err}");
    }
    before();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    rest.trim().to_string()
}
