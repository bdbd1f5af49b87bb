//! Assembles the decision script from `lua/` as written: the prelude, the
//! clock and the driver, into whose loop each algorithm's file is copied
//! where the driver says `--@include <file>` (inlined, not called: a Lua
//! function call costs Redis on every limit). Nothing is renamed or
//! moved; a comment line is left empty and a line of code unindented, so
//! every line of the script is a line of a file in `lua/` (a comment's,
//! blank);
//! `script_map.rs` says which (docs/algorithms.md, "The decision script"), and names
//! the script by its SHA-1, computed here for EVALSHA.
//!
//! Outputs in OUT_DIR: `script.lua` (production: Redis `TIME` is the
//! clock), `test_script.lua` (the test clock: the last argument; never
//! shipped), `script_map.rs` (`SCRIPT_SHA1`, `SCRIPT_MAP`).

use std::error::Error;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Where a run of script lines comes from: from script line `from` on
/// (1-based), the lines of `file` from its line `line`.
struct Run {
    from: usize,
    file: String,
    line: usize,
}

/// A script text and where each of its lines comes from.
#[derive(Default)]
struct Assembled {
    text: String,
    runs: Vec<Run>,
    lines: usize,
}

impl Assembled {
    /// Appends lines `first..` of `file` (1-based), as they are.
    fn push(&mut self, file: &str, first: usize, lines: &[&str]) {
        if lines.is_empty() {
            return;
        }
        self.runs.push(Run { from: self.lines + 1, file: file.to_string(), line: first });
        for l in lines {
            // A comment line is left empty, and a line of code loses its
            // indentation: the module carries the script (20 KB of its 42
            // were comments, 2 KB indentation), and the line stays a line.
            let code = l.trim();
            if !code.starts_with("--") {
                self.text.push_str(code);
            }
            self.text.push('\n');
        }
        self.lines += lines.len();
    }
}

fn read(lua: &Path, name: &str) -> Result<String, Box<dyn Error>> {
    println!("cargo:rerun-if-changed={}", lua.join(name).display());
    Ok(fs::read_to_string(lua.join(name)).map_err(|e| format!("lua/{name}: {e}"))?)
}

/// The prelude, `clock`, then the driver with its includes copied in.
fn assemble(lua: &Path, clock: &str) -> Result<Assembled, Box<dyn Error>> {
    let mut out = Assembled::default();
    for name in ["prelude.lua", clock] {
        let text = read(lua, name)?;
        out.push(name, 1, &text.lines().collect::<Vec<_>>());
    }
    let driver = read(lua, "driver.lua")?;
    let lines: Vec<&str> = driver.lines().collect();
    let mut start = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(fragment) = line.trim().strip_prefix("--@include ") {
            out.push("driver.lua", start + 1, &lines[start..i]);
            let fragment = fragment.trim();
            let text = read(lua, fragment)?;
            if text.lines().any(|l| l.trim().starts_with("--@include")) {
                return Err(format!("lua/{fragment}: an included file includes nothing").into());
            }
            out.push(fragment, 1, &text.lines().collect::<Vec<_>>());
            start = i + 1;
        }
    }
    out.push("driver.lua", start + 1, &lines[start..]);
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    // Read when the script runs, not when it was compiled: a build script
    // compiled in another checkout (a copied target/) would read that
    // checkout's lua/.
    let lua = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../lua");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let script = assemble(&lua, "clock.lua")?;
    let test = assemble(&lua, "test_clock.lua")?;
    // One map for both: the test clock takes the production clock's lines.
    if test.lines != script.lines {
        return Err("lua/test_clock.lua must have as many lines as lua/clock.lua (one line map serves both)".into());
    }
    fs::write(out.join("script.lua"), &script.text)?;
    fs::write(out.join("test_script.lua"), &test.text)?;
    let mut map = String::new();
    writeln!(map, "/// SHA-1 of `SCRIPT` in lower-case hex: the name EVALSHA uses.")?;
    writeln!(map, "pub const SCRIPT_SHA1: &str = {:?};", sha1_smol::Sha1::from(&script.text).digest().to_string())?;
    writeln!(map, "/// Where the script's lines come from, in order (see `ScriptLines`).")?;
    writeln!(map, "pub const SCRIPT_MAP: &[ScriptLines] = &[")?;
    for r in &script.runs {
        writeln!(map, "    ScriptLines {{ from: {}, file: {:?}, line: {} }},", r.from, r.file, r.line)?;
    }
    writeln!(map, "];")?;
    writeln!(map, "/// How many lines the script has.")?;
    writeln!(map, "pub const SCRIPT_LINES: usize = {};", script.lines)?;
    fs::write(out.join("script_map.rs"), map)?;
    Ok(())
}
