//! Redis 6.2 compatibility: every command the script calls, and every
//! option token it passes, exists in Redis 6.2.0, by the "since" versions
//! the test server's own `COMMAND DOCS` gives for the command and for each
//! argument on the way to the token. `PEXPIRE ... NX` (7.0) must fail it.

use redis::Value;

use crate::fixture::Fixture;

/// The commands the script calls, each with the upper-case literal tokens
/// among its arguments: calls of `redis.call` and `redis.pcall` and of the
/// local names bound to them, comments left out. Fails on a command that
/// is not a literal.
fn calls(script: &str) -> Vec<(String, Vec<String>)> {
    let (script, callers) = host_tests::script::code_and_callers(script);
    let script = script.as_str();
    let mut out = Vec::new();
    for caller in &callers {
        let opening = format!("{caller}(");
        for (at, _) in script.match_indices(&opening) {
            let before = script[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                continue; // a longer name ending in this one
            }
            let args = balanced(&script[at + opening.len()..]);
            assert!(args.starts_with('\''), "a command that is not a literal: {caller}({args})");
            let literals = literals(args);
            let (command, tokens) = literals.split_first().expect("a command");
            let tokens = tokens.iter().filter(|t| t.chars().all(|c| c.is_ascii_uppercase())).cloned().collect();
            out.push((command.clone(), tokens));
        }
    }
    out
}

/// The text up to the parenthesis closing the one just opened.
fn balanced(text: &str) -> &str {
    let (mut depth, mut quote) = (0, None);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') if depth == 0 => return &text[..i],
            (None, ')') => depth -= 1,
            _ => {}
        }
    }
    panic!("unbalanced call: {text}")
}

/// The single-quoted string literals of `text`, in order.
fn literals(text: &str) -> Vec<String> {
    text.split('\'').skip(1).step_by(2).map(str::to_string).collect()
}

/// "6.2.0" as a comparable triple.
fn version(v: &str) -> (u32, u32, u32) {
    let mut n = v.split('.').map(|p| p.parse::<u32>().expect("a numeric version"));
    (n.next().unwrap_or(0), n.next().unwrap_or(0), n.next().unwrap_or(0))
}

/// A field of a RESP2 flat map or a RESP3 map.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let is = |k: &Value| {
        matches!(k, Value::BulkString(b) if b.eq_ignore_ascii_case(name.as_bytes()))
            || matches!(k, Value::SimpleString(s) if s.eq_ignore_ascii_case(name))
    };
    match v {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        Value::Array(items) => items.chunks(2).find(|p| is(&p[0])).and_then(|p| p.get(1)),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn since(v: &Value) -> Option<(u32, u32, u32)> {
    field(v, "since").and_then(text).map(|s| version(&s))
}

/// The latest "since" on the way to the argument whose token is `token`.
fn token_since(args: &Value, token: &str, floor: (u32, u32, u32)) -> Option<(u32, u32, u32)> {
    let Value::Array(args) = args else { return None };
    args.iter().find_map(|arg| {
        let here = since(arg).map_or(floor, |s| s.max(floor));
        if field(arg, "token").and_then(text).is_some_and(|t| t.eq_ignore_ascii_case(token)) {
            return Some(here);
        }
        field(arg, "arguments").and_then(|sub| token_since(sub, token, here))
    })
}

/// Every use newer than 6.2.0, as "COMMAND TOKEN (since x.y.z)".
fn newer_than_6_2(conn: &mut redis::Connection, script: &str) -> Vec<String> {
    let mut newer = Vec::new();
    for (command, tokens) in calls(script) {
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(&command).query(conn).unwrap();
        let doc = field(&docs, &command).unwrap_or_else(|| panic!("COMMAND DOCS knows no {command}"));
        let since_command = since(doc).expect("a command's since");
        if since_command > (6, 2, 0) {
            newer.push(format!("{command} (since {since_command:?})"));
        }
        for token in tokens {
            let args = field(doc, "arguments").unwrap_or_else(|| panic!("{command} takes no arguments"));
            let at = token_since(args, &token, since_command)
                .unwrap_or_else(|| panic!("{command} has no option {token} in COMMAND DOCS"));
            if at > (6, 2, 0) {
                newer.push(format!("{command} {token} (since {at:?})"));
            }
        }
    }
    newer
}

#[test]
fn every_command_and_option_of_the_script_exists_in_redis_6_2() {
    let mut f = Fixture::new();
    let script = ratelimit::script::SCRIPT;
    let found = calls(script);
    let commands: Vec<&str> = found.iter().map(|(c, _)| c.as_str()).collect();
    let every =
        ["TIME", "MGET", "SET", "GET", "INCRBY", "PTTL", "ZRANGE", "ZCOUNT", "ZREMRANGEBYSCORE", "ZADD", "PEXPIRE"];
    for expected in every {
        assert!(commands.contains(&expected), "the parser missed {expected}: {commands:?}");
    }
    // No option hides in a variable: every upper-case literal of the script
    // is an argument of a call seen above (or the error prefix).
    let seen: Vec<&String> = found.iter().flat_map(|(c, t)| std::iter::once(c).chain(t)).collect();
    let (code, _) = host_tests::script::code_and_callers(script);
    for literal in literals(&code) {
        if literal.len() > 1 && literal.chars().all(|c| c.is_ascii_uppercase()) {
            assert!(seen.contains(&&literal), "{literal} is not passed literally to a call");
        }
    }
    assert_eq!(newer_than_6_2(&mut f.conn, script), Vec::<String>::new());
}

#[test]
fn pexpire_nx_and_7_0_commands_would_be_caught() {
    let mut f = Fixture::new();
    let script = "local c=redis.call\nc('PEXPIRE', key, ttl, 'NX')\nc('SET', k, v, 'PXAT', t)\nredis.call('LMPOP', 1, k, 'LEFT')";
    assert_eq!(
        newer_than_6_2(&mut f.conn, script),
        ["LMPOP (since (7, 0, 0))", "LMPOP LEFT (since (7, 0, 0))", "PEXPIRE NX (since (7, 0, 0))"]
    );
}
