//! The Lua decision script, assembled at compile time from `lua/` into one
//! text with one SHA-1, so a single EVALSHA covers every algorithm.

use crate::digest::{hex, sha1};

/// The parts shared by the production and test builds of the script, in order
/// after the clock.
macro_rules! algorithms_and_driver {
    () => {
        concat!(
            include_str!("../../lua/sliding_window.lua"),
            include_str!("../../lua/fixed_window.lua"),
            include_str!("../../lua/token_bucket.lua"),
            include_str!("../../lua/sliding_log.lua"),
            include_str!("../../lua/gcra.lua"),
            include_str!("../../lua/driver.lua"),
        )
    };
}

/// The prelude the clock and the algorithms build on.
pub const PRELUDE: &str = include_str!("../../lua/prelude.lua");

/// Everything after the clock: the algorithms and the driver.
pub const BODY: &str = algorithms_and_driver!();

/// The production script: Redis `TIME` is the clock.
pub const SCRIPT: &str =
    concat!(include_str!("../../lua/prelude.lua"), include_str!("../../lua/clock.lua"), algorithms_and_driver!(),);

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
        assert!(!SCRIPT.contains("TEST ONLY"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn script_is_prelude_clock_and_body() {
        assert!(SCRIPT.starts_with(PRELUDE));
        assert!(SCRIPT.ends_with(BODY));
    }
}
