//! Header maps as Envoy holds them: field lines of bytes, in order, names in
//! lower case (Envoy's codecs lower-case them; `LowerCaseString` does the
//! same for names the module passes). Values are raw bytes: Envoy 1.40
//! hands a module whatever the client sent, UTF-8 or not.
//!
//! Lookups follow Envoy's `Context::getHeaderMapValue`: the key is
//! lower-cased and the FIRST matching line is the value (Envoy ignores the
//! others); `getHeaderMapPairs` gives every line in order.
//!
//! The serialized form (`proxy_get_header_map_pairs` and the maps a module
//! passes) is a u32 count, then per pair the u32 lengths of name and value,
//! then per pair the name and the value, each followed by a NUL (all
//! little-endian; proxy-wasm-cpp-host's `PairsUtil::marshalPairs`).

/// One field line: name and value.
pub type Field = (Vec<u8>, Vec<u8>);

/// Field lines in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderMap {
    lines: Vec<Field>,
}

impl HeaderMap {
    /// An empty map.
    pub fn new() -> HeaderMap {
        HeaderMap::default()
    }

    /// A map of text lines, names taken as given.
    pub fn from_text(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.push(*name, *value);
        }
        map
    }

    /// Appends one field line, name as given.
    pub fn push(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.lines.push((name.as_ref().to_vec(), value.as_ref().to_vec()));
    }

    /// The value of the first line named `name` (ASCII case-insensitive, as
    /// Envoy lower-cases the key before looking it up).
    pub fn first(&self, name: impl AsRef<[u8]>) -> Option<&[u8]> {
        let name = name.as_ref();
        self.lines.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }

    /// The first value of `name` as text; `None` if absent. A value that is
    /// not UTF-8 fails the test: read it with `first`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.first(name).map(|v| {
            std::str::from_utf8(v).unwrap_or_else(|_| panic!("header {name} is not UTF-8 ({v:?}): read it as bytes"))
        })
    }

    /// Every field line, in order.
    pub fn lines(&self) -> &[Field] {
        &self.lines
    }

    /// How many field lines.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there is no line at all.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Removes every line named `name` (lower case).
    pub fn remove(&mut self, name: &[u8]) {
        self.lines.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    /// Envoy's `setCopy`: every line of `name` goes, one line is appended.
    pub fn replace(&mut self, name: &[u8], value: &[u8]) {
        self.remove(name);
        self.push(name, value);
    }

    /// Sets the value of `name` where its first line stands (appended if
    /// absent); later lines of that name go. For building a request.
    pub fn set_in_place(&mut self, name: &[u8], value: &[u8]) {
        match self.lines.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some(at) => {
                self.lines[at].1 = value.to_vec();
                let mut seen = 0;
                self.lines.retain(|(n, _)| {
                    let keep = !n.eq_ignore_ascii_case(name) || seen == 0;
                    seen += usize::from(n.eq_ignore_ascii_case(name));
                    keep
                });
            }
            None => self.push(name, value),
        }
    }

    /// Every line as text (lossy), for messages and for comparing maps of text.
    pub fn to_text(&self) -> Vec<(String, String)> {
        self.lines
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    /// The serialized form.
    pub fn serialize(&self) -> Vec<u8> {
        let size = 4 + self.lines.iter().map(|(n, v)| n.len() + v.len() + 10).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&len32(self.lines.len()).to_le_bytes());
        for (name, value) in &self.lines {
            out.extend_from_slice(&len32(name.len()).to_le_bytes());
            out.extend_from_slice(&len32(value.len()).to_le_bytes());
        }
        for (name, value) in &self.lines {
            out.extend_from_slice(name);
            out.push(0);
            out.extend_from_slice(value);
            out.push(0);
        }
        out
    }

    /// Parses a map the module sent; an error names what is wrong, so a bad
    /// map is reported as the module's bug, not as a host crash.
    pub fn deserialize(bytes: &[u8]) -> Result<HeaderMap, String> {
        if bytes.is_empty() {
            return Ok(HeaderMap::new());
        }
        let count = read32(bytes, 0).ok_or("header map shorter than its count")? as usize;
        let mut data =
            4usize.checked_add(count.checked_mul(8).ok_or("absurd header count")?).ok_or("absurd header count")?;
        if data > bytes.len() {
            return Err(format!("header map of {} bytes cannot hold {count} pairs", bytes.len()));
        }
        let mut map = HeaderMap { lines: Vec::with_capacity(count) };
        for i in 0..count {
            let mut field = |k: usize| -> Result<Vec<u8>, String> {
                let len = read32(bytes, 4 + i * 8 + k * 4).ok_or("truncated length")? as usize;
                let end = data.checked_add(len).filter(|e| *e < bytes.len()).ok_or("header map truncated")?;
                if bytes[end] != 0 {
                    return Err(format!("header map pair {i}: no NUL after field {k}"));
                }
                let f = bytes[data..end].to_vec();
                data = end + 1;
                Ok(f)
            };
            let name = field(0)?;
            let value = field(1)?;
            map.lines.push((name, value));
        }
        Ok(map)
    }
}

impl<N: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(N, V)> for HeaderMap {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in iter {
            map.push(n, v);
        }
        map
    }
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
        let map = HeaderMap::from_text(&[(":method", "GET"), ("x", "")]);
        let bytes = map.serialize();
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(bytes.len(), 4 + 16 + 8 + 3 + 2 + 2);
        assert_eq!(HeaderMap::deserialize(&bytes).unwrap(), map);
        assert_eq!(HeaderMap::deserialize(&[]).unwrap(), HeaderMap::new());
        assert_eq!(HeaderMap::deserialize(&[0, 0, 0, 0]).unwrap(), HeaderMap::new());
    }

    #[test]
    fn values_are_bytes_and_the_first_line_wins() {
        let mut map = HeaderMap::new();
        map.push("x-api-key", [0xff, 0xfe]);
        map.push("x-api-key", "k2");
        assert_eq!(map.first("X-API-KEY"), Some(&[0xff, 0xfe][..]));
        let back = HeaderMap::deserialize(&map.serialize()).unwrap();
        assert_eq!(back.lines(), map.lines(), "every line, in order, byte for byte");
        map.replace(b"x-api-key", b"k3");
        assert_eq!(map.lines(), [(b"x-api-key".to_vec(), b"k3".to_vec())]);
    }

    #[test]
    fn set_in_place_keeps_the_position() {
        let mut map = HeaderMap::from_text(&[(":method", "GET"), (":path", "/"), ("a", "1"), (":path", "/x")]);
        map.set_in_place(b":path", b"/\xff");
        assert_eq!(map.lines()[1], (b":path".to_vec(), b"/\xff".to_vec()));
        assert_eq!(map.len(), 3);
    }

    #[test]
    fn garbage_is_an_error_not_a_crash() {
        assert!(HeaderMap::deserialize(&[1, 0, 0]).is_err());
        assert!(HeaderMap::deserialize(&[255, 255, 255, 255]).is_err());
        assert!(HeaderMap::deserialize(&[1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, b'a']).is_err());
    }
}
