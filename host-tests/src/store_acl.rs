//! The Redis ACL users docs/store-security.md shows, read from that page
//! itself so that the tests apply exactly what users are told to, and the
//! commands the decision script calls, read from the script (Redis checks
//! each of them against the user who runs the script).

use std::collections::BTreeSet;

use crate::paths::root;

/// The page that shows the users.
pub const PAGE: &str = "docs/store-security.md";

/// What the page writes where the user's password goes.
pub const PASSWORD_PLACEHOLDER: &str = ">REPLACE-WITH-A-PASSWORD";

/// The rules of the page's `ACL SETUSER <user> ...` line (everything after
/// the user name), with the password placeholder replaced by `password`.
pub fn readme_rules(user: &str, password: &str) -> Vec<String> {
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let prefix = format!("ACL SETUSER {user} ");
    let lines: Vec<&str> = page.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "{PAGE} shows one `{prefix}...` line");
    let rules: Vec<String> = lines[0][prefix.len()..]
        .split_whitespace()
        .map(|r| if r == PASSWORD_PLACEHOLDER { format!(">{password}") } else { r.to_string() })
        .collect();
    assert!(rules.iter().any(|r| *r == format!(">{password}")), "{PAGE}'s {user} line has no {PASSWORD_PLACEHOLDER}");
    rules
}

/// The commands `rules` allow (`+evalsha`, `+script|load`: lower case).
pub fn allowed_commands(rules: &[String]) -> BTreeSet<String> {
    rules.iter().filter_map(|r| r.strip_prefix('+')).map(str::to_ascii_lowercase).collect()
}

/// `ACL SETUSER user rules...` on `conn`.
pub fn set_user(conn: &mut redis::Connection, user: &str, rules: &[String]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user);
    for r in rules {
        cmd.arg(r);
    }
    let () = cmd.query(conn).unwrap_or_else(|e| panic!("ACL SETUSER {user} {rules:?}: {e}"));
}

/// The commands `script` calls (lower case): every literal first argument
/// of `redis.call`, `redis.pcall` and the local names bound to them
/// (`local call = redis.call`), comments left out. Fails on a command that
/// is not a literal.
pub fn script_commands(script: &str) -> BTreeSet<String> {
    let (code, callers) = crate::script::code_and_callers(script);
    let mut out = BTreeSet::new();
    for caller in &callers {
        let opening = format!("{caller}(");
        for (at, _) in code.match_indices(&opening) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                continue; // a longer name ending in this one
            }
            let args = &code[at + opening.len()..];
            let command = args
                .strip_prefix('\'')
                .and_then(|rest| rest.split_once('\''))
                .unwrap_or_else(|| panic!("a command that is not a literal: {caller}({})", &args[..args.len().min(40)]))
                .0;
            out.insert(command.to_ascii_lowercase());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_one_user_for_each_transport() {
        for user in ["webdis", "ratelimit"] {
            let rules = readme_rules(user, "pw");
            assert!(rules.contains(&">pw".to_string()) && rules.contains(&"+evalsha".to_string()), "{user}: {rules:?}");
        }
    }

    #[test]
    fn the_script_commands_are_found_through_aliases() {
        let script = "local y=redis.call\nlocal a4 = redis.pcall\nlocal t=redis.call('TIME')\n-- y('DEL', k)\ny('MGET',k) -- then y('DEL')\nif a4('INCRBY',k,'--') then xy('DEL') end";
        let found: Vec<String> = script_commands(script).into_iter().collect();
        assert_eq!(found, ["incrby", "mget", "time"]);
    }
}
