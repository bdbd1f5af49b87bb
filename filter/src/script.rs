//! The Lua decision script, assembled at build time from `lua/` (by
//! `build.rs`, which strips comments and indentation) into one text with
//! one SHA-1, so a single EVALSHA covers every algorithm.

use crate::digest::{hex, sha1};

/// The prelude the clock and the algorithms build on.
pub const PRELUDE: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude.lua"));

/// Everything after the clock: the algorithms and the driver.
pub const BODY: &str = include_str!(concat!(env!("OUT_DIR"), "/body.lua"));

/// The clock of the test build (the last argument), never shipped in
/// `SCRIPT`: a different text, so a different SHA-1.
pub const TEST_CLOCK: &str = include_str!(concat!(env!("OUT_DIR"), "/test_clock.lua"));

/// The production script: Redis `TIME` is the clock.
pub const SCRIPT: &str = concat!(
    include_str!(concat!(env!("OUT_DIR"), "/prelude.lua")),
    include_str!(concat!(env!("OUT_DIR"), "/clock.lua")),
    include_str!(concat!(env!("OUT_DIR"), "/body.lua")),
);

const SHA1_HEX: [u8; 40] = hex(&sha1(SCRIPT.as_bytes()));

/// The script's SHA-1 in lower-case hex: the name EVALSHA uses.
pub fn sha1_hex() -> &'static str {
    // Hex digits are ASCII, so this never fails; the fallback keeps it panic-free.
    core::str::from_utf8(&SHA1_HEX).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn sha1_is_forty_hex_digits_of_the_production_script() {
        let sha = sha1_hex();
        assert_eq!(sha.len(), 40);
        assert!(sha.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(SCRIPT.contains("redis.call('TIME')"));
        assert!(!SCRIPT.contains("ARGV[#ARGV]"), "the test clock never ships");
        assert!(TEST_CLOCK.contains("ARGV[#ARGV]"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn script_is_prelude_clock_and_body_without_comments() {
        assert!(SCRIPT.starts_with(PRELUDE));
        assert!(SCRIPT.ends_with(BODY));
        assert!(!SCRIPT.lines().any(|l| l.starts_with("--") || l.starts_with(' ')));
        // Redis compiles it once per SHA-1; the text only travels on NOSCRIPT.
        assert!(SCRIPT.len() < 16 * 1024, "{} bytes", SCRIPT.len());
    }
}
