//! Redis names the line of the script an error was raised at
//! (`user_script:<line>`); the script is `lua/` as written, and
//! `ratelimit::script::source_of` says which file and line that is.

use host_tests::redis_server::RedisServer;
use host_tests::script::{evalsha_raw, load};
use ratelimit::algorithm::Algorithm::{SlidingWindow, TokenBucket};
use ratelimit::script::{source_of, SCRIPT, TEST_SCRIPT};
use ratelimit::spec::{DecisionCall, Op};
use ratelimit::store::redis_error;
use ratelimit::store::script_call::ScriptCall;

use crate::fixture::{limit, spec, T0};
use ratelimit::time::Instant;

/// Line `line` (1-based) of `lua/<file>`.
fn lua_line(file: &str, line: usize) -> String {
    let path = host_tests::paths::root().join("lua").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().nth(line - 1).unwrap_or_else(|| panic!("lua/{file} has no line {line}")).to_string()
}

/// The line Redis names in `error` (`… on @user_script:<line>.`).
fn script_line(error: &str) -> usize {
    let at = error.rfind("user_script:").unwrap_or_else(|| panic!("no line in {error:?}")) + "user_script:".len();
    error[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

#[test]
fn a_command_refused_inside_the_script_names_its_line_in_the_file_that_made_it() {
    let redis = RedisServer::start();
    let mut conn = redis.connect();
    let sha = load(&mut conn, SCRIPT);
    // A replica of nothing: every write is refused (READONLY). A new
    // sliding_window count is written at once by the usual decision's
    // fragment; a token bucket's state by the driver's apply.
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(1).query(&mut conn).unwrap();
    for (algorithm, file, command) in [
        (SlidingWindow, "lone_window.lua", "call('SET', key, lone_text"),
        (TokenBucket, "driver.lua", "call('SET', key"),
    ] {
        let limits = [limit(spec(algorithm, 5, 60_000, 5), Op::Use(1))];
        let call = ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity: "c", limits: &limits }]);
        let error = evalsha_raw(&mut conn, &sha, &call, None).unwrap_err();
        assert!(error.contains("read only replica"), "{error}");
        let (named, line) = source_of(script_line(&error)).unwrap();
        assert_eq!(named, file, "{error}");
        let text = lua_line(file, line);
        assert!(text.contains(command), "lua/{file}:{line} is {text:?}");
        // The filter's log names it.
        let logged = redis_error(&error).to_string();
        assert!(logged.ends_with(&format!(" [lua/{file}:{line}]")), "{logged}");
    }
}

#[test]
fn a_lua_error_inside_an_algorithm_names_its_line_in_that_algorithm_file() {
    // The test build (same lines) given a clock that is no number: the
    // token bucket's first use of it, on a state it holds, is an error.
    let redis = RedisServer::start();
    let mut conn = redis.connect();
    let sha = load(&mut conn, TEST_SCRIPT);
    let limits = [limit(spec(TokenBucket, 5, 60_000, 5), Op::Use(1))];
    let call = ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity: "c", limits: &limits }]);
    let _: () = redis::cmd("SET").arg(&call.keys[0]).arg(format!("{T0}:0:0")).query(&mut conn).unwrap();
    let error: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(call.keys.len())
        .arg(&call.keys)
        .arg(&call.args)
        .arg("not a clock")
        .query::<redis::Value>(&mut conn)
        .unwrap_err()
        .to_string();
    assert!(error.contains("arithmetic"), "{error}");
    let (file, line) = source_of(script_line(&error)).unwrap();
    assert_eq!(file, "tat.lua", "{error}");
    let text = lua_line(file, line);
    assert!(text.contains("store_now - num(at)"), "lua/tat.lua:{line} is {text:?}");
}
