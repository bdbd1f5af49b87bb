//! Assembles the decision script from `lua/`: the driver with each
//! algorithm's fragment inlined where it says `--@include <file>` (so the
//! script defines no function or table per algorithm: Redis runs the whole
//! text on every call), then strips comments and spaces and shortens local
//! names. The text Redis receives (and hashes for EVALSHA) stays small, and
//! so does the module that embeds it, while `lua/` keeps the readable,
//! commented source.

#[path = "build/minify.rs"]
mod minify;
#[path = "build/rename.rs"]
mod rename;

use std::error::Error;
use std::fs;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    // Read when the script runs, not when it was compiled: a build script
    // compiled in another checkout (a copied target/) would read that
    // checkout's lua/.
    let lua = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../lua");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed=build");
    let read = |name: &str| -> Result<String, Box<dyn Error>> {
        println!("cargo:rerun-if-changed={}", lua.join(name).display());
        Ok(fs::read_to_string(lua.join(name))?)
    };
    let mut body = String::new();
    for line in read("driver.lua")?.lines() {
        match line.trim().strip_prefix("--@include ") {
            Some(fragment) => body.push_str(&read(fragment.trim())?),
            None => body.push_str(line),
        }
        body.push('\n');
    }
    // One renaming for all parts: they are concatenated into one script.
    let names = ["prelude.lua", "clock.lua", "test_clock.lua", "body.lua"];
    let mut parts = Vec::new();
    for name in &names[..3] {
        parts.push(minify::minify(&read(name)?)?);
    }
    parts.push(minify::minify(&body)?);
    for (name, text) in names.iter().zip(rename::rename(&parts)?) {
        fs::write(out.join(name), text)?;
    }
    Ok(())
}
