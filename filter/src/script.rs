//! The Lua decision script, embedded as written in `lua/` by `build.rs`:
//! the prelude, the clock and the driver with each algorithm's file copied
//! in. One text, one SHA-1, so a single EVALSHA covers every algorithm.
//! Nothing is renamed or moved; a comment line is left empty and a line
//! of code unindented: every line of the script is a line of a file in
//! `lua/`, and `source_of` says
//! which, so a Redis error's
//! `user_script:<line>` points into `lua/`.

/// Where a run of the script's lines comes from: from script line `from`
/// (1-based) on, until the next run, the lines of `lua/<file>` from `line`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptLines {
    /// The first script line of the run.
    pub from: usize,
    /// The file in `lua/`.
    pub file: &'static str,
    /// Its line that script line `from` is.
    pub line: usize,
}

include!(concat!(env!("OUT_DIR"), "/script_map.rs"));

/// The production script: Redis `TIME` is the clock.
pub const SCRIPT: &str = include_str!(concat!(env!("OUT_DIR"), "/script.lua"));

/// The test build: `lua/test_clock.lua` (the clock is the last argument)
/// in place of `clock.lua`, on as many lines, so `source_of` holds for it
/// too. Never shipped: a different text, so a different SHA-1.
pub const TEST_SCRIPT: &str = include_str!(concat!(env!("OUT_DIR"), "/test_script.lua"));

/// The script's SHA-1 in lower-case hex: the name EVALSHA uses.
pub fn sha1_hex() -> &'static str {
    SCRIPT_SHA1
}

/// The file in `lua/` and its line (1-based) that line `line` of the
/// script is; `None` past its end.
pub fn source_of(line: usize) -> Option<(&'static str, usize)> {
    if line == 0 || line > SCRIPT_LINES {
        return None;
    }
    let run = SCRIPT_MAP.iter().rev().find(|r| r.from <= line)?;
    Some((run.file, run.line + (line - run.from)))
}

/// The source of the line a Redis error names (`user_script:<line>`, its
/// last mention), as `lua/<file>:<line>`.
pub fn source_of_error(message: &str) -> Option<String> {
    const AT: &[u8] = b"user_script:";
    let bytes = message.as_bytes();
    let at = bytes.windows(AT.len()).rposition(|w| w == AT)? + AT.len();
    let digits = bytes.get(at..)?.iter().take_while(|b| b.is_ascii_digit()).take(9);
    let line = digits.fold(None, |n: Option<usize>, d| Some(n.unwrap_or(0) * 10 + usize::from(d - b'0')))?;
    let (file, line) = source_of(line)?;
    Some(format!("lua/{file}:{line}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// Every file the script is made of, as `lua/` holds it.
    const SOURCES: [(&str, &str); 13] = [
        ("prelude.lua", include_str!("../../lua/prelude.lua")),
        ("clock.lua", include_str!("../../lua/clock.lua")),
        ("driver.lua", include_str!("../../lua/driver.lua")),
        ("lone_window.lua", include_str!("../../lua/lone_window.lua")),
        ("sliding_window.lua", include_str!("../../lua/sliding_window.lua")),
        ("fixed_window.lua", include_str!("../../lua/fixed_window.lua")),
        ("tat.lua", include_str!("../../lua/tat.lua")),
        ("refund.lua", include_str!("../../lua/refund.lua")),
        ("sliding_log.lua", include_str!("../../lua/sliding_log.lua")),
        ("sliding_log_write.lua", include_str!("../../lua/sliding_log_write.lua")),
        ("concurrency.lua", include_str!("../../lua/concurrency.lua")),
        ("concurrency_write.lua", include_str!("../../lua/concurrency_write.lua")),
        ("override.lua", include_str!("../../lua/override.lua")),
    ];

    /// Line `line` of `file` as the script holds it: a comment line empty,
    /// a line of code unindented.
    fn source_line(file: &str, line: usize) -> &'static str {
        let (_, text) = SOURCES.iter().find(|(f, _)| *f == file).unwrap_or_else(|| panic!("{file} is not in lua/"));
        let l = text.lines().nth(line - 1).unwrap_or_else(|| panic!("lua/{file} has no line {line}")).trim();
        if l.starts_with("--") {
            ""
        } else {
            l
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn every_line_of_the_script_is_the_line_of_lua_the_map_names() {
        let lines: Vec<&str> = SCRIPT.lines().collect();
        assert_eq!(lines.len(), SCRIPT_LINES);
        for (i, line) in lines.iter().enumerate() {
            let (file, at) = source_of(i + 1).unwrap();
            assert_eq!(*line, source_line(file, at), "script line {} is lua/{file}:{at}", i + 1);
        }
        assert_eq!(source_of(0), None);
        assert_eq!(source_of(SCRIPT_LINES + 1), None);
        // Every line of every file is in it, the include lines excepted;
        // the driver's last line is the script's.
        let include_lines = SOURCES[2].1.lines().filter(|l| l.trim().starts_with("--@include")).count();
        let whole: usize = SOURCES.iter().map(|(_, t)| t.lines().count()).sum();
        assert_eq!(SCRIPT_LINES, whole - include_lines);
        assert_eq!(source_of(SCRIPT_LINES), Some(("driver.lua", SOURCES[2].1.lines().count())));
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_test_build_differs_only_in_its_clock() {
        assert!(SCRIPT.contains("redis.call('TIME')"));
        assert!(!SCRIPT.contains("ARGV[#ARGV]"), "the test clock never ships");
        assert!(TEST_SCRIPT.contains("ARGV[#ARGV]"));
        let (script, test): (Vec<&str>, Vec<&str>) = (SCRIPT.lines().collect(), TEST_SCRIPT.lines().collect());
        assert_eq!(script.len(), test.len());
        for (i, (a, b)) in script.iter().zip(&test).enumerate() {
            if a != b {
                assert_eq!(source_of(i + 1).map(|(f, _)| f), Some("clock.lua"), "line {}", i + 1);
            }
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn sha1_is_forty_lower_case_hex_digits() {
        // That it is Redis's SHA-1 of SCRIPT: host-tests' script tests.
        assert_eq!(SCRIPT_SHA1.len(), 40);
        assert!(SCRIPT_SHA1.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(sha1_hex(), SCRIPT_SHA1);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_redis_error_names_its_line_in_lua() {
        let (file, line) = source_of(SCRIPT_LINES - 1).unwrap();
        let message = format!(
            "READONLY You can't write against a read only replica. script: {SCRIPT_SHA1}, on @user_script:{}.",
            SCRIPT_LINES - 1
        );
        assert_eq!(source_of_error(&message), Some(format!("lua/{file}:{line}")));
        assert_eq!(
            source_of_error("ERR user_script:1: boom script: x, on @user_script:1."),
            Some("lua/prelude.lua:1".into())
        );
        let (file, line) = source_of(2).unwrap();
        assert_eq!(
            source_of_error("ERR user_script:1: boom script: x, on @user_script:2."),
            Some(format!("lua/{file}:{line}")),
            "the last mention"
        );
        for none in ["WRONGTYPE Operation against a key", "user_script:", "user_script:0", "user_script:99999999999999"]
        {
            assert_eq!(source_of_error(none), None, "{none}");
        }
        assert_eq!(source_of_error(&format!("user_script:{}", SCRIPT_LINES + 1)), None);
    }
}
