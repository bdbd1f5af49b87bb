//! RESP2, as far as the host needs it: checking that a query is exactly one
//! command (an array of bulk strings), framing the replies read from a
//! connection, and encoding the host's own commands (AUTH, SELECT).

/// Encodes one command as an array of bulk strings.
pub fn command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The arguments of `query` if it is exactly ONE RESP2 command: an array of
/// bulk strings and nothing after it. Higress writes the query verbatim on a
/// pipelined connection and matches replies first in, first out, so a
/// second command would misalign every later reply.
pub fn parse_command(query: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let (count, mut at) = header(query, 0, b'*')?;
    let count = usize::try_from(count).map_err(|_| "a command is a non-null array".to_string())?;
    if count == 0 {
        return Err("an empty array is no command".into());
    }
    let mut args = Vec::with_capacity(count);
    for i in 0..count {
        let (len, start) = header(query, at, b'$').map_err(|e| format!("argument {i}: {e}"))?;
        let len = usize::try_from(len).map_err(|_| format!("argument {i} is a null bulk string"))?;
        let end =
            start.checked_add(len).filter(|e| e + 2 <= query.len()).ok_or(format!("argument {i} is truncated"))?;
        if &query[end..end + 2] != b"\r\n" {
            return Err(format!("argument {i} does not end with CRLF"));
        }
        args.push(query[start..end].to_vec());
        at = end + 2;
    }
    if at != query.len() {
        return Err(format!("{} bytes follow the command: one query must carry exactly one command", query.len() - at));
    }
    Ok(args)
}

/// Reads `<kind><integer>\r\n` at `at`; the integer and where the next part starts.
fn header(buf: &[u8], at: usize, kind: u8) -> Result<(i64, usize), String> {
    if buf.get(at) != Some(&kind) {
        return Err(format!("expected '{}' at byte {at}", kind as char));
    }
    let (n, next) = line(buf, at + 1).ok_or("truncated")?;
    let n = std::str::from_utf8(n).ok().and_then(|s| s.parse::<i64>().ok()).ok_or("not an integer")?;
    Ok((n, next))
}

/// The line starting at `at` (without CRLF) and where the next one starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rel = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[at..at + rel], at + rel + 2))
}

/// The length of the complete RESP2 value at the start of `buf`; `Ok(None)`
/// if more bytes are needed; an error if it is not RESP2.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, String> {
    value_end(buf, 0, 0)
}

fn value_end(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, String> {
    if depth > 64 {
        return Err("nested deeper than 64".into());
    }
    let Some(&kind) = buf.get(at) else { return Ok(None) };
    let Some((text, next)) = line(buf, at + 1) else { return Ok(None) };
    let int = || std::str::from_utf8(text).ok().and_then(|s| s.parse::<i64>().ok()).ok_or("bad length".to_string());
    match kind {
        b'+' | b'-' | b':' => Ok(Some(next)),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some(next));
            }
            let end = next + usize::try_from(n).map_err(|_| "bad length")? + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' => {
            let n = int()?;
            let mut at = next;
            for _ in 0..n.max(0) {
                match value_end(buf, at, depth + 1)? {
                    Some(end) => at = end,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        other => Err(format!("unknown RESP2 type byte 0x{other:02x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_command_per_query() {
        let q = command(&["EVALSHA", "abc", "1", "k", "5"]);
        assert_eq!(
            parse_command(&q).unwrap(),
            vec![b"EVALSHA".to_vec(), b"abc".to_vec(), b"1".to_vec(), b"k".to_vec(), b"5".to_vec()]
        );
        let mut two = q.clone();
        two.extend_from_slice(&command(&["PING"]));
        assert!(parse_command(&two).unwrap_err().contains("exactly one command"));
        assert!(parse_command(b"PING\r\n").is_err(), "inline commands are not RESP arrays");
        assert!(parse_command(b"*1\r\n$4\r\nPIN").is_err());
        assert!(parse_command(b"*1\r\n:4\r\n").is_err());
    }

    #[test]
    fn frames_whole_values_only() {
        assert_eq!(frame(b"+OK\r\n:1\r\n"), Ok(Some(5)));
        assert_eq!(frame(b"$3\r\nabc\r\n"), Ok(Some(9)));
        assert_eq!(frame(b"$3\r\nab"), Ok(None));
        assert_eq!(frame(b"*2\r\n:1\r\n$-1\r\n"), Ok(Some(13)));
        assert_eq!(frame(b"*2\r\n:1\r\n"), Ok(None));
        assert!(frame(b"!x\r\n").is_err());
    }
}
