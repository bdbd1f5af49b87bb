//! Assembles the decision script from `lua/`: the driver with each
//! algorithm's fragment inlined where it says `--@include <file>` (so the
//! script defines no function or table per algorithm: Redis runs the whole
//! text on every call), then strips comments and indentation. The text
//! Redis receives (and hashes for EVALSHA) stays small, while `lua/` keeps
//! the readable, commented source.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let read = |name: &str| -> Result<String, Box<dyn Error>> {
        println!("cargo:rerun-if-changed={}", lua.join(name).display());
        Ok(fs::read_to_string(lua.join(name))?)
    };
    for part in ["prelude.lua", "clock.lua", "test_clock.lua"] {
        fs::write(out.join(part), minify(&read(part)?))?;
    }
    let mut body = String::new();
    for line in read("driver.lua")?.lines() {
        match line.trim().strip_prefix("--@include ") {
            Some(fragment) => body.push_str(&read(fragment.trim())?),
            None => body.push_str(line),
        }
        body.push('\n');
    }
    fs::write(out.join("body.lua"), minify(&body))?;
    Ok(())
}

/// Drops comment lines, trailing comments on lines without string
/// literals, indentation and blank lines. Lua needs no indentation, and a
/// line break stays between statements.
fn minify(source: &str) -> String {
    let mut out = String::with_capacity(source.len() / 2);
    for line in source.lines() {
        let mut code = line.trim();
        if code.starts_with("--") {
            continue;
        }
        if let Some(at) = code.find(" --") {
            if !code.contains(['\'', '"']) {
                code = code[..at].trim_end();
            }
        }
        if !code.is_empty() {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}
