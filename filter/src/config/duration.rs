//! Durations in the configuration: "250ms", "1s", "30s", "1m", "1h", "1d".

/// Milliseconds in `text`, or `None` when it is not `<digits><unit>` with
/// unit ms, s, m, h or d, or is zero, or overflows.
pub fn parse_ms(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at_checked(split)?;
    if digits.is_empty() || digits.len() > 12 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(scale).filter(|ms| *ms > 0)
}

/// The reason given for a bad duration.
pub const DURATION_HELP: &str = "must be a duration like \"250ms\", \"1s\", \"30s\", \"1m\", \"1h\" or \"1d\"";

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn every_documented_unit_parses() {
        assert_eq!(parse_ms("250ms"), Some(250));
        assert_eq!(parse_ms("1s"), Some(1_000));
        assert_eq!(parse_ms("30s"), Some(30_000));
        assert_eq!(parse_ms("1m"), Some(60_000));
        assert_eq!(parse_ms("1h"), Some(3_600_000));
        assert_eq!(parse_ms("1d"), Some(86_400_000));
    }

    #[test]
    #[wasm_bindgen_test]
    fn malformed_durations_are_refused() {
        for bad in ["", "1", "s", "0s", "1.5s", "-1s", "1 s", "1sec", "1S", "99999999999999d", "1m30s"] {
            assert_eq!(parse_ms(bad), None, "{bad:?}");
        }
    }
}
