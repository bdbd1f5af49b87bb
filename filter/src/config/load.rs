//! Loading the configuration: parsing it (`Config::parse`), then what the
//! chosen transport needs of it.

use super::{Config, ConfigError, Rule};
use crate::keys::MAX_IDENTITY;
use crate::spec::LimitSpec;
use crate::store::webdis::{decision_size, BODY_HEAD, MAX_BODY};
use crate::store::Transport;

/// Parses the configuration, then lets its transport check it.
pub fn load(bytes: &[u8]) -> Result<Config, ConfigError> {
    load_with_env(bytes, &super::credential::vm_env)
}

/// `load` with the environment read through `env`.
pub fn load_with_env(bytes: &[u8], env: &super::credential::Env<'_>) -> Result<Config, ConfigError> {
    let config = Config::parse_with_env(bytes, env)?;
    match config.store.transport {
        Transport::Webdis => check_body_bound(&config)?,
        Transport::Redis => {}
    }
    Ok(config)
}

/// Refuses a configuration whose largest decision would not fit webdis's
/// body bound alone: every rule of one key group matching, the longest
/// identity. (Batches are split to fit; one decision cannot be.)
fn check_body_bound(config: &Config) -> Result<(), ConfigError> {
    let identity = "x".repeat(MAX_IDENTITY);
    for group in &config.groups {
        let mut limits: Vec<(&str, LimitSpec)> = Vec::new();
        for &r in &group.rules {
            let rule: &Rule = &config.rules[r];
            limits.extend(rule.limits.iter().map(|l| (rule.name.as_str(), l.spec)));
            let size = BODY_HEAD + decision_size(&config.domain, &identity, &limits, config.overrides.is_some());
            if size > MAX_BODY {
                return Err(ConfigError::at(
                    &format!("rules[{r}]"),
                    format!(
                        "with the rules before it that share its key, one store call could need {size} bytes; webdis takes at most {MAX_BODY} (use fewer limits or shorter rule names)"
                    ),
                ));
            }
        }
    }
    Ok(())
}
