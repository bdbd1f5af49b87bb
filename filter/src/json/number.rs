//! A JSON number as written, read without floating point: its first 19
//! significant digits and the power of ten of the last, exactly, and
//! whether a digit after them was not zero. The module computes with one
//! fraction only (`retry_after_jitter`, kept in parts per million), so
//! core's decimal-to-double parser is not linked: 16 KB of the module
//! (docs/BENCHMARKS.md, "Room in the module"). What a number is refused
//! for stays exact: beyond every double, as a parser that rounds
//! correctly finds it.

/// The least magnitude that rounds to infinity: 2^1024 - 2^970, halfway
/// between `f64::MAX` and 2^1024 (a tie rounds to 2^1024, the even one).
const OVERFLOW: &[u8] = b"179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";

/// Significant digits kept (10^19 - 1 fits a u64).
const KEPT: u32 = 19;

/// A number: `digits × 10^exponent`, less what `inexact` says was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    /// At most 19 significant digits (0 for zero).
    digits: u64,
    exponent: i32,
    /// A digit past the 19th was not zero.
    inexact: bool,
}

impl Decimal {
    /// Reads a number's text as the parser found it
    /// (`-?digits(.digits)?([eE][+-]?digits)?`); `None` when no double
    /// holds it (its magnitude is at least 2^1024 - 2^970).
    pub fn read(text: &[u8]) -> Option<Decimal> {
        let (negative, text) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let mantissa_end = text.iter().position(|b| matches!(b, b'e' | b'E')).unwrap_or(text.len());
        let (mantissa, exponent_text) = text.split_at(mantissa_end);
        let mut d = Decimal { negative, digits: 0, exponent: 0, inexact: false };
        // `scale`: the power of ten of the last digit kept.
        let (mut kept, mut scale, mut fraction) = (0u32, 0i64, false);
        for &b in mantissa {
            if b == b'.' {
                fraction = true;
                continue;
            }
            let digit = u64::from(b.wrapping_sub(b'0'));
            if kept < KEPT {
                d.digits = d.digits * 10 + digit;
                kept += u32::from(d.digits != 0);
                scale -= i64::from(fraction);
            } else {
                d.inexact |= digit != 0;
                scale += i64::from(!fraction);
            }
        }
        if d.digits == 0 {
            return Some(Decimal { negative, ..Decimal::ZERO });
        }
        // The exponent written, saturated far beyond any double's.
        let (sign, digits) = match exponent_text.get(1..).unwrap_or_default().split_first() {
            Some((b'-', rest)) => (-1, rest),
            Some((b'+', rest)) => (1, rest),
            _ => (1, exponent_text.get(1..).unwrap_or_default()),
        };
        let written = digits.iter().fold(0i64, |e, &b| (e * 10 + i64::from(b.wrapping_sub(b'0'))).min(1 << 40));
        let exponent = scale + sign * written;
        // The power of ten of the first significant digit.
        let first = exponent + i64::from(d.digits.ilog10());
        if first > 308 || (first == 308 && !below(mantissa, OVERFLOW)) {
            return None;
        }
        d.exponent = exponent.clamp(-(1 << 20), 1 << 20) as i32;
        Some(d)
    }

    const ZERO: Decimal = Decimal { negative: false, digits: 0, exponent: 0, inexact: false };

    /// An integer's.
    pub fn integer(i: i64) -> Decimal {
        Decimal { negative: i < 0, digits: i.unsigned_abs(), exponent: 0, inexact: false }
    }

    /// Whether it is below zero (`-0` is not).
    pub fn is_negative(&self) -> bool {
        self.negative && self.digits != 0
    }

    /// The integer part of its magnitude, `u64::MAX` beyond; digits past
    /// the 19th read as zeros (below 10^19 the integer part is exact: a
    /// dropped digit is then worth less than the last one kept, itself a
    /// whole or less).
    pub fn whole(&self) -> u64 {
        match u32::try_from(self.exponent) {
            Ok(up) => 10u64.checked_pow(up).and_then(|p| self.digits.checked_mul(p)).unwrap_or(u64::MAX),
            Err(_) => 10u64.checked_pow(self.exponent.unsigned_abs()).map_or(0, |p| self.digits / p),
        }
    }

    /// The double nearest to it when it has at most 15 significant digits
    /// and a power of ten within ±22 (one rounding of exact operands, as a
    /// correct parser rounds); otherwise within a few units in the last
    /// place.
    pub fn to_f64(&self) -> f64 {
        let digits = self.digits as f64;
        let magnitude = if self.exponent >= 0 {
            digits * 10f64.powi(self.exponent)
        } else {
            digits / 10f64.powi(self.exponent.saturating_neg())
        };
        if self.negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// Its parts: whether negative, the digits kept, the power of ten of
    /// the last, and whether a digit past them was not zero.
    pub fn parts(&self) -> (bool, u64, i32, bool) {
        (self.negative, self.digits, self.exponent, self.inexact)
    }
}

/// Whether the significant digits of `mantissa` (a number's digits with
/// its point, whose first significant digit has the power of ten of
/// `bound`'s first) make a smaller number than `bound`'s.
fn below(mantissa: &[u8], bound: &[u8]) -> bool {
    let mut digits = mantissa.iter().filter(|b| b.is_ascii_digit()).skip_while(|&&b| b == b'0');
    for &want in bound {
        match digits.next() {
            Some(&got) if got == want => {}
            Some(&got) => return got < want,
            None => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn read(text: &str) -> Option<Decimal> {
        Decimal::read(text.as_bytes())
    }

    #[test]
    #[wasm_bindgen_test]
    fn digits_and_exponent_are_read_exactly() {
        for (text, want) in [
            ("0", (false, 0, 0, false)),
            ("-0.000", (true, 0, 0, false)),
            ("12.50", (false, 1250, -2, false)),
            ("0.0025", (false, 25, -4, false)),
            ("-1E+3", (true, 1, 3, false)),
            ("1200e-5", (false, 1200, -5, false)),
            ("12345678901234567890", (false, 1_234_567_890_123_456_789, 1, false)),
            ("12345678901234567891", (false, 1_234_567_890_123_456_789, 1, true)),
            ("0.00000000000000000000123456789012345678901", (false, 1_234_567_890_123_456_789, -39, true)),
            ("1e-99999999999999999999", (false, 1, -(1 << 20), false)),
        ] {
            assert_eq!(read(text).map(|d| d.parts()), Some(want), "{text}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_number_is_refused_exactly_where_it_rounds_to_infinity() {
        // The bound (2^1024 - 2^970) and one less, as integers, with a
        // point, and scaled: each side as std's correct parser rounds it.
        let m = std::str::from_utf8(OVERFLOW).unwrap();
        let below_m = format!("{}1", &m[..308]);
        let mut texts = vec![format!("{}.{}e308", &m[..1], &m[1..]), format!("{m}.000000001"), format!("{below_m}.99")];
        for digits in [m, &below_m] {
            texts.extend([digits.to_string(), format!("{digits}0e-1"), format!("0.{digits}e309")]);
        }
        let near =
            ["1.7976931348623157e308", "1.797693134862315807937e308", "1.7976931348623159e308", "1e308", "1e309"];
        texts.extend(near.map(String::from));
        for text in texts.iter().flat_map(|t| [t.clone(), format!("-{t}")]) {
            let std = text.parse::<f64>().unwrap();
            assert_eq!(read(&text).is_some(), std.is_finite(), "{text}");
        }
        for text in ["0e999999999999", "1e-400", "-2.5e-330", "9e307"] {
            assert!(read(text).is_some(), "{text}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_integer_part_is_exact_below_10_pow_19_and_saturates() {
        for (text, whole) in [
            ("0.99999999999999999999999", 0),
            ("12.5", 12),
            ("-7.9", 7),
            ("9199999999999999488.5", 9_199_999_999_999_999_488),
            ("18446744073709551615", 18_446_744_073_709_551_610),
            ("18446744073709551619e0", 18_446_744_073_709_551_610),
            ("1e19", 10_000_000_000_000_000_000),
            ("1e20", u64::MAX),
            ("1234567890123456789.9999", 1_234_567_890_123_456_789),
            ("1e-30", 0),
        ] {
            assert_eq!(read(text).unwrap().whole(), whole, "{text}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn short_fractions_are_the_double_a_correct_parser_reads() {
        for text in ["0.1", "0.25", "0.3", "0.000001", "0.123456789012345", "1e-22", "-0.7", "0.0000005", "1", "1.0"] {
            let ours = read(text).unwrap().to_f64();
            assert_eq!(ours.to_bits(), text.parse::<f64>().unwrap().to_bits(), "{text}");
        }
        let long = "0.12345678901234567890123";
        assert!((read(long).unwrap().to_f64() - long.parse::<f64>().unwrap()).abs() <= f64::EPSILON, "{long}");
    }
}
