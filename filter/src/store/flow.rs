//! The steps of one store call, whatever the transport: a missing script is
//! loaded and the call retried once; a lost authentication is renewed once.

use super::Transport;
use super::{Reply, StoreError};
use crate::store::script_call::ScriptReply;

/// Where a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The first EVALSHA.
    First,
    /// webdis: NOSCRIPT came back; the script is being loaded.
    Loading,
    /// webdis: EVALSHA again after loading; NOSCRIPT now is an error.
    Retry,
    /// redis: EVAL with the script after NOSCRIPT.
    Eval,
    /// redis: EVALSHA again after re-initializing on NOAUTH.
    AfterAuth,
}

/// What the transport sends next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// EVALSHA with the call's keys and arguments.
    Evalsha,
    /// webdis: load the script (`SCRIPT LOAD`).
    LoadScript,
    /// redis: EVAL with the script and the call's keys and arguments.
    Eval,
}

/// The next step after a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `Message` and wait in `Stage`; `reinit` first (redis, NOAUTH).
    Send { stage: Stage, message: Message, reinit: bool },
    /// The call's result.
    Done(Result<ScriptReply, StoreError>),
}

/// Decides the next step of a call in `stage` given its decoded reply.
pub fn next(transport: Transport, stage: Stage, reply: Result<Reply, StoreError>) -> Step {
    let send = |stage, message, reinit| Step::Send { stage, message, reinit };
    match (reply, stage) {
        (Err(e), _) => Step::Done(Err(e)),
        (Ok(Reply::Values(d)), _) => Step::Done(Ok(d)),
        (Ok(Reply::Loaded), Stage::Loading) => send(Stage::Retry, Message::Evalsha, false),
        (Ok(Reply::NoScript), Stage::First | Stage::AfterAuth) => match transport {
            Transport::Webdis => send(Stage::Loading, Message::LoadScript, false),
            Transport::Redis => send(Stage::Eval, Message::Eval, false),
        },
        (Ok(Reply::NoAuth), Stage::First) if transport == Transport::Redis => {
            send(Stage::AfterAuth, Message::Evalsha, true)
        }
        (Ok(Reply::NoScript), _) => Step::Done(Err(StoreError::ScriptMissing)),
        (Ok(Reply::NoAuth), _) => Step::Done(Err(StoreError::Redis("NOAUTH after re-initializing".into()))),
        (Ok(Reply::Loaded), _) => Step::Done(Err(StoreError::Malformed("unexpected script-load reply"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn webdis_loads_the_script_then_retries_once() {
        let w = Transport::Webdis;
        assert_eq!(
            next(w, Stage::First, Ok(Reply::NoScript)),
            Step::Send { stage: Stage::Loading, message: Message::LoadScript, reinit: false }
        );
        assert_eq!(
            next(w, Stage::Loading, Ok(Reply::Loaded)),
            Step::Send { stage: Stage::Retry, message: Message::Evalsha, reinit: false }
        );
        assert_eq!(next(w, Stage::Retry, Ok(Reply::NoScript)), Step::Done(Err(StoreError::ScriptMissing)));
        assert_eq!(
            next(w, Stage::First, Ok(Reply::NoAuth)),
            Step::Done(Err(StoreError::Redis("NOAUTH after re-initializing".into())))
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn redis_evals_on_noscript_and_reinitializes_once_on_noauth() {
        let r = Transport::Redis;
        assert_eq!(
            next(r, Stage::First, Ok(Reply::NoScript)),
            Step::Send { stage: Stage::Eval, message: Message::Eval, reinit: false }
        );
        assert_eq!(next(r, Stage::Eval, Ok(Reply::NoScript)), Step::Done(Err(StoreError::ScriptMissing)));
        assert_eq!(
            next(r, Stage::First, Ok(Reply::NoAuth)),
            Step::Send { stage: Stage::AfterAuth, message: Message::Evalsha, reinit: true }
        );
        assert_eq!(
            next(r, Stage::AfterAuth, Ok(Reply::NoScript)),
            Step::Send { stage: Stage::Eval, message: Message::Eval, reinit: false }
        );
        assert!(matches!(next(r, Stage::AfterAuth, Ok(Reply::NoAuth)), Step::Done(Err(_))));
        assert_eq!(next(r, Stage::Eval, Err(StoreError::Status(1))), Step::Done(Err(StoreError::Status(1))));
    }
}
