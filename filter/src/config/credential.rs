//! `store.username` and `store.password`: the credential the filter shows
//! the store. With `redis` it is the Redis ACL user given to the host's
//! connection; with `webdis` it is the HTTP basic-auth credential of
//! webdis's ACL (`"http_basic_auth": "username:password"`), sent with every
//! call. The password never reaches a log: it is held as a [`Secret`].

use super::error::ConfigError;
use super::json::{Obj, Result};
use crate::secret::Secret;
use crate::store::Transport;

/// The longest `username:password` webdis's basic auth can match: Debian's
/// webdis 0.1.9 encodes its `http_basic_auth` with the system libb64, which
/// breaks its base64 line after 72 characters (54 bytes), so a longer
/// credential never matches and every call would be refused with 403.
pub const MAX_WEBDIS_CREDENTIAL: usize = 53;

/// The credential as configured (both empty: none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credential {
    /// The Redis ACL user (redis) or the basic-auth user (webdis).
    pub username: String,
    /// Its password.
    pub password: Secret,
}

/// Reads `username` and `password` of the `store` object `o`.
pub fn parse_credential(o: &Obj<'_>, transport: Transport) -> Result<Credential> {
    let username = o.str("username")?.unwrap_or("");
    let password = o.str("password")?.unwrap_or("");
    if transport == Transport::Webdis {
        check_webdis(username, password)?;
    }
    Ok(Credential { username: username.to_string(), password: Secret::new(password) })
}

/// webdis's basic auth: both or neither; `username:password` must read back
/// as exactly these two (no colon in the user, RFC 7617) and fit webdis.
fn check_webdis(username: &str, password: &str) -> Result<()> {
    let at = |field: &str, reason: String| Err(ConfigError::at(&format!("store.{field}"), reason));
    match (username.is_empty(), password.is_empty()) {
        (true, true) => return Ok(()),
        (true, false) => return at("password", "webdis's basic auth needs store.username too".into()),
        (false, true) => return at("username", "webdis's basic auth needs store.password too".into()),
        (false, false) => {}
    }
    if username.contains(':') {
        return at("username", "must not contain ':' (basic auth joins username:password with it)".into());
    }
    for (field, value) in [("username", username), ("password", password)] {
        if value.chars().any(char::is_control) {
            return at(field, "must not contain control characters".into());
        }
    }
    let len = username.len() + 1 + password.len();
    if len > MAX_WEBDIS_CREDENTIAL {
        return at(
            "password",
            format!(
                "username:password is {len} bytes; webdis matches at most {MAX_WEBDIS_CREDENTIAL} (Debian's webdis 0.1.9 breaks longer ones)"
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn error_of(store: &str) -> String {
        let json = format!(r#"{{"store":{{"cluster":"s",{store}}},"rules":[]}}"#);
        crate::config::load(json.as_bytes()).unwrap_err().to_string()
    }

    fn credential_of(fields: &str) -> Credential {
        let store = if fields.is_empty() { String::new() } else { format!(",{fields}") };
        let json = format!(
            r#"{{"store":{{"cluster":"s"{store}}},"rules":[{{"name":"a","key":["path"],"limits":[{{"limit":1,"window":"1s"}}]}}]}}"#
        );
        let config = crate::config::load(json.as_bytes()).unwrap();
        Credential { username: config.store.username, password: config.store.password }
    }

    #[test]
    #[wasm_bindgen_test]
    fn webdis_takes_a_basic_auth_credential() {
        let c = credential_of(r#""username":"ratelimit","password":"p4ss word!""#);
        assert_eq!((c.username.as_str(), c.password.expose()), ("ratelimit", "p4ss word!"));
        assert_eq!(credential_of(""), Credential::default());
        // 53 bytes in all is the most.
        let longest = format!(r#""username":"u","password":"{}""#, "p".repeat(51));
        assert_eq!(credential_of(&longest).password.expose().len(), 51);
    }

    #[test]
    #[wasm_bindgen_test]
    fn webdis_refuses_half_or_unusable_credentials() {
        let cases = [
            (r#""password":"x""#, "store.password: webdis's basic auth needs store.username too"),
            (r#""username":"u""#, "store.username: webdis's basic auth needs store.password too"),
            (r#""username":"u","password":"""#, "store.username: webdis's basic auth needs store.password too"),
            (
                r#""username":"a:b","password":"x""#,
                "store.username: must not contain ':' (basic auth joins username:password with it)",
            ),
            (r#""username":"u\n","password":"x""#, "store.username: must not contain control characters"),
            (r#""username":"u","password":"x\u0000y""#, "store.password: must not contain control characters"),
            (r#""username":"u","password":7"#, "store.password: must be a string"),
            (
                &format!(r#""username":"u","password":"{}""#, "p".repeat(52)),
                "store.password: username:password is 54 bytes; webdis matches at most 53 (Debian's webdis 0.1.9 breaks longer ones)",
            ),
        ];
        for (store, want) in cases {
            assert_eq!(error_of(store), want, "{store}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_password_never_shows_in_debug_output() {
        let c = credential_of(r#""username":"ratelimit","password":"hunter2""#);
        let printed = format!("{c:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("Secret(redacted)"), "{printed}");
        assert_eq!(format!("{:?}", Secret::default()), "Secret(empty)");
    }
}
