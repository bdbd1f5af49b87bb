//! Whether a rule applies to a request.
//!
//! A header condition holds when ANY field line of that header, or any
//! comma-separated member of one, equals the value: adding a second line
//! or member can make more rules apply, never fewer, so nobody dodges a
//! rule by repeating a header.

use crate::config::Matcher;
use crate::request::{members, trim_ows, BodyProblem, Request, RequestSource};

impl Matcher {
    /// True when every condition given holds (none given: every request),
    /// the body read whatever its length; a body condition the body cannot
    /// answer does not hold. (The pipeline reads the body within the
    /// rule's bound: `matches_headers`, then `body_holds`.)
    pub fn matches<S: RequestSource + ?Sized>(&self, req: &Request<'_, S>) -> bool {
        self.matches_headers(req) && self.body_holds(req, u64::MAX) == Ok(true)
    }

    /// Whether the body conditions hold for a body read within `max_body`
    /// bytes: a field absent or of another value does not hold; a body
    /// that cannot be read (past the bound, not JSON) answers nothing.
    pub fn body_holds<S: RequestSource + ?Sized>(
        &self,
        req: &Request<'_, S>,
        max_body: u64,
    ) -> Result<bool, BodyProblem> {
        for (field, want) in &self.body {
            match req.body().field(field.keys(), max_body) {
                Ok(text) if *text == *want.as_bytes() => {}
                Ok(_) | Err(BodyProblem::Missing | BodyProblem::NotText) => return Ok(false),
                Err(problem) => return Err(problem),
            }
        }
        Ok(true)
    }

    /// True when every condition but the body's holds (what is known when
    /// the headers arrive).
    pub fn matches_headers<S: RequestSource + ?Sized>(&self, req: &Request<'_, S>) -> bool {
        if let Some(prefix) = &self.path_prefix {
            let prefix = prefix.as_bytes();
            let under = |p: &[u8]| match self.path_ignore_case {
                false => p.starts_with(prefix),
                true => p.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix)),
            };
            if !req.path().is_some_and(under) {
                return false;
            }
        }
        if !self.methods.is_empty() && !req.method().is_some_and(|m| self.methods.iter().any(|x| x.as_bytes() == m)) {
            return false;
        }
        self.headers.iter().all(|(name, value)| {
            let want = value.as_bytes();
            req.headers().lines(name).any(|line| trim_ows(line) == want || members(line).any(|m| m == want))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{BodyPath, Matcher};
    use crate::request::fake::FakeRequest;
    use crate::request::{Body, BodyProblem, Request};
    use wasm_bindgen_test::wasm_bindgen_test;

    fn login() -> Matcher {
        Matcher {
            path_prefix: Some("/login".into()),
            path_ignore_case: false,
            methods: vec!["POST".into()],
            headers: vec![("x-tier".into(), "free".into())],
            body: Vec::new(),
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn every_condition_must_hold() {
        let m = login();
        let yes = FakeRequest::new("POST", "/login?next=/").with("x-tier", "free");
        assert!(m.matches(&Request::new(&yes)));
        let encoded = FakeRequest::new("POST", "/%6Cogin").with("x-tier", "free");
        assert!(m.matches(&Request::new(&encoded)), "an escaped path still matches");
        for no in [
            FakeRequest::new("GET", "/login").with("x-tier", "free"),
            FakeRequest::new("POST", "/logout").with("x-tier", "free"),
            FakeRequest::new("POST", "/login").with("x-tier", "pro"),
            FakeRequest::new("POST", "/login"),
            FakeRequest::new("POST", "/login").with_bytes("x-tier", b"\xfffree"),
        ] {
            assert!(!m.matches(&Request::new(&no)));
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_empty_matcher_matches_everything() {
        assert!(Matcher::default().matches(&Request::new(&FakeRequest::new("GET", "/anything"))));
    }

    #[test]
    #[wasm_bindgen_test]
    fn repeating_a_header_or_writing_the_method_in_lower_case_dodges_nothing() {
        let m = login();
        for yes in [
            FakeRequest::new("post", "/login").with("x-tier", "free"),
            FakeRequest::new("POST", "/login").with("x-tier", "pro").with("x-tier", "free"),
            FakeRequest::new("POST", "/login").with("x-tier", "pro, free"),
            FakeRequest::new("POST", "/login").with("x-tier", " free "),
        ] {
            assert!(m.matches(&Request::new(&yes)));
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn segment_parameters_never_dodge_a_prefix_and_case_is_the_rules_choice() {
        let api = |ignore_case| Matcher {
            path_prefix: Some("/api/".into()),
            path_ignore_case: ignore_case,
            ..Matcher::default()
        };
        let matches = |m: &Matcher, path: &str| m.matches(&Request::new(&FakeRequest::new("GET", path)));
        for path in ["/api/x", "/api;p=1/x", "/api;/x", "/api%3B/x", "/api%3b/x", "/%61pi/x"] {
            assert!(matches(&api(false), path), "{path}");
            assert!(matches(&api(true), path), "{path}");
        }
        for path in ["/API/x", "/Api/x", "/%41PI/x", "/aPi;v=1/x"] {
            assert!(!matches(&api(false), path), "{path}: case counts by default");
            assert!(matches(&api(true), path), "{path}");
        }
        for path in ["/apix", "/ap", "/", "/x/api/"] {
            assert!(!matches(&api(true), path), "{path}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_body_condition_holds_for_its_exact_value_only() {
        let gpt4o = Matcher {
            path_prefix: Some("/v1/".into()),
            body: vec![(BodyPath::parse("model").unwrap(), "gpt-4o".into())],
            ..Matcher::default()
        };
        let req = FakeRequest::new("POST", "/v1/chat/completions");
        let holds = |body: &[u8], bound: u64| gpt4o.body_holds(&Request::with_body(&req, &Body::of(body)), bound);
        assert_eq!(holds(br#"{"model":"gpt-4o"}"#, 100), Ok(true));
        assert_eq!(holds(br#"{"model":"gpt\u002d4o"}"#, 100), Ok(true), "escapes decoded");
        for other in
            [&br#"{"model":"gpt-4o-mini"}"#[..], br#"{"model":"GPT-4o"}"#, br#"{"x":1}"#, br#"{"model":["gpt-4o"]}"#]
        {
            assert_eq!(holds(other, 100), Ok(false));
        }
        assert_eq!(holds(br#"{"model":"gpt-4o"}"#, 10), Err(BodyProblem::TooLarge(10)), "past its bound: no answer");
        assert!(matches!(holds(br#"{"model":"gpt-4o","model":"x"}"#, 100), Err(BodyProblem::NotJson(_))));
        assert!(gpt4o.matches_headers(&Request::new(&req)), "the headers' conditions alone");
        assert!(!gpt4o.matches(&Request::new(&req)), "a body never read answers no condition");
        let five = Matcher { body: vec![(BodyPath::parse("n").unwrap(), "5".into())], ..Matcher::default() };
        assert!(five.matches(&Request::with_body(&req, &Body::of(br#"{"n":5}"#))), "an integer's decimal text");
    }
}
