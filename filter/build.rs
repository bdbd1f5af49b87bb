//! Assembles the decision script from `lua/` and strips it of comments and
//! indentation: the text Redis receives (and hashes for EVALSHA) stays
//! small, while `lua/` keeps the readable, commented source.

use std::error::Error;
use std::fs;
use std::path::Path;

/// The algorithms and the driver, in the order the script defines them.
const BODY: [&str; 6] =
    ["sliding_window.lua", "fixed_window.lua", "token_bucket.lua", "sliding_log.lua", "gcra.lua", "driver.lua"];

fn main() -> Result<(), Box<dyn Error>> {
    let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
    let out = std::env::var("OUT_DIR")?;
    let read = |name: &str| -> Result<String, Box<dyn Error>> {
        println!("cargo:rerun-if-changed={}", lua.join(name).display());
        Ok(minify(&fs::read_to_string(lua.join(name))?))
    };
    for part in ["prelude.lua", "clock.lua", "test_clock.lua"] {
        fs::write(Path::new(&out).join(part), read(part)?)?;
    }
    let body: String = BODY.iter().map(|f| read(f)).collect::<Result<_, _>>()?;
    fs::write(Path::new(&out).join("body.lua"), body)?;
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
