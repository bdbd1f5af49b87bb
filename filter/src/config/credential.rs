//! `store.username` and `store.password`: the credential the filter shows
//! the store. With `redis` it is the Redis ACL user given to the host's
//! connection; with `webdis` it is the HTTP basic-auth credential of
//! webdis's ACL (`"http_basic_auth": "username:password"`), sent with every
//! call. The password never reaches a log: it is held as a [`Secret`].
//!
//! `store.password_env` names an environment variable of the VM to read
//! the password from instead: the plugin configuration is shown whole by
//! Envoy's admin `/config_dump`, an environment variable's value is not
//! (Envoy hands the VM the host's variables named in
//! `vm_config.environment_variables.host_env_keys`).

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

/// How the VM's environment is read: a variable's value, if set.
pub type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The VM's own environment (WASI `environ_get`; natively the process's).
pub fn vm_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Reads `username` and `password` (or `password_env`) of the `store`
/// object `o`.
pub fn parse_credential(o: &Obj<'_>, transport: Transport, env: &Env<'_>) -> Result<Credential> {
    let username = o.str("username")?.unwrap_or("");
    let from_env = match o.str("password_env")? {
        None => None,
        Some(_) if o.value("password").is_some() => {
            return Err(ConfigError::at("store.password_env", "give store.password or store.password_env, not both"))
        }
        Some(name) => Some(password_from_env(name, env)?),
    };
    let password = match &from_env {
        Some(p) => p.as_str(),
        None => o.str("password")?.unwrap_or(""),
    };
    if transport == Transport::Webdis {
        check_webdis(username, password)?;
    }
    Ok(Credential { username: username.to_string(), password: Secret::new(password) })
}

/// The value of environment variable `name`, which must be set and not empty.
fn password_from_env(name: &str, env: &Env<'_>) -> Result<String> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(ConfigError::at(
            "store.password_env",
            "must name an environment variable: 1 to 128 of A-Z, a-z, 0-9 and _, not starting with a digit",
        ));
    }
    match env(name) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(ConfigError::at(
            "store.password_env",
            format!(
                "{name} is not set (or empty) in the plugin's environment (Envoy: list it in vm_config.environment_variables.host_env_keys)"
            ),
        )),
    }
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

    fn with_env(fields: &str, env: &Env<'_>) -> std::result::Result<Credential, String> {
        let json = format!(
            r#"{{"store":{{"cluster":"s",{fields}}},"rules":[{{"name":"a","key":["path"],"limits":[{{"limit":1,"window":"1s"}}]}}]}}"#
        );
        let config = crate::config::load_with_env(json.as_bytes(), env).map_err(|e| e.to_string())?;
        Ok(Credential { username: config.store.username, password: config.store.password })
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_password_can_come_from_the_vms_environment() {
        let env = |name: &str| (name == "RL_PASSWORD").then(|| "from-env".to_string());
        let c = with_env(r#""username":"ratelimit","password_env":"RL_PASSWORD""#, &env).unwrap();
        assert_eq!((c.username.as_str(), c.password.expose()), ("ratelimit", "from-env"));
        let refused = |fields: &str| with_env(fields, &env).unwrap_err();
        assert_eq!(
            refused(r#""username":"u","password_env":"UNSET""#),
            "store.password_env: UNSET is not set (or empty) in the plugin's environment (Envoy: list it in vm_config.environment_variables.host_env_keys)"
        );
        let empty = |_: &str| Some(String::new());
        assert!(with_env(r#""username":"u","password_env":"X""#, &empty)
            .unwrap_err()
            .contains("X is not set (or empty)"));
        assert_eq!(
            refused(r#""username":"u","password":"p","password_env":"RL_PASSWORD""#),
            "store.password_env: give store.password or store.password_env, not both"
        );
        for bad in ["", "1X", "A-B", "A B"] {
            assert_eq!(
                refused(&format!(r#""username":"u","password_env":"{bad}""#)),
                "store.password_env: must name an environment variable: 1 to 128 of A-Z, a-z, 0-9 and _, not starting with a digit",
                "{bad:?}"
            );
        }
        // Checked as a configured password is: webdis needs the user too.
        assert_eq!(
            refused(r#""password_env":"RL_PASSWORD""#),
            "store.password: webdis's basic auth needs store.username too"
        );
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
