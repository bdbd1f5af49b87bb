//! The proxy-wasm serialized header map: a u32 count, then per pair the
//! u32 lengths of name and value, then per pair the name and the value,
//! each followed by a NUL (all little-endian; see the SDK's
//! `hostcalls::utils::serialize_map`).

/// Header pairs in order; names as given (Envoy's are lower case).
pub type Headers = Vec<(String, String)>;

/// Serializes `pairs`.
pub fn serialize(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + pairs.iter().map(|(n, v)| n.len() + v.len() + 10).sum::<usize>());
    out.extend_from_slice(&len32(pairs.len()).to_le_bytes());
    for (name, value) in pairs {
        out.extend_from_slice(&len32(name.len()).to_le_bytes());
        out.extend_from_slice(&len32(value.len()).to_le_bytes());
    }
    for (name, value) in pairs {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

/// Parses a map the module sent; an error names what is wrong, so a bad
/// map is reported as the module's bug, not as a host crash.
pub fn deserialize(bytes: &[u8]) -> Result<Headers, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let count = read32(bytes, 0).ok_or("header map shorter than its count")? as usize;
    let mut data =
        4usize.checked_add(count.checked_mul(8).ok_or("absurd header count")?).ok_or("absurd header count")?;
    if data > bytes.len() {
        return Err(format!("header map of {} bytes cannot hold {count} pairs", bytes.len()));
    }
    let mut pairs = Vec::with_capacity(count);
    for i in 0..count {
        let mut field = |k: usize| -> Result<String, String> {
            let len = read32(bytes, 4 + i * 8 + k * 4).ok_or("truncated length")? as usize;
            let end = data.checked_add(len).filter(|e| *e < bytes.len()).ok_or("header map truncated")?;
            if bytes[end] != 0 {
                return Err(format!("header map pair {i}: no NUL after field {k}"));
            }
            let s = String::from_utf8(bytes[data..end].to_vec()).map_err(|_| format!("pair {i} is not UTF-8"))?;
            data = end + 1;
            Ok(s)
        };
        let name = field(0)?;
        let value = field(1)?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("a header map field longer than 4 GiB")
}

fn read32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_the_sdks_format() {
        let pairs = vec![(":method".to_string(), "GET".to_string()), ("x".to_string(), String::new())];
        let bytes = serialize(&pairs);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(bytes.len(), 4 + 16 + 8 + 3 + 2 + 2);
        assert_eq!(deserialize(&bytes).unwrap(), pairs);
        assert_eq!(deserialize(&[]).unwrap(), Vec::<(String, String)>::new());
        assert_eq!(deserialize(&[0, 0, 0, 0]).unwrap(), Vec::<(String, String)>::new());
    }

    #[test]
    fn garbage_is_an_error_not_a_crash() {
        assert!(deserialize(&[1, 0, 0]).is_err());
        assert!(deserialize(&[255, 255, 255, 255]).is_err());
        assert!(deserialize(&[1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, b'a']).is_err());
    }
}
