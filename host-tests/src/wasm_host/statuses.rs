//! Statuses a test makes hostcalls return. Every `env.proxy_*` hostcall
//! the module imports is wrapped at the linker; an injected status is
//! returned INSTEAD of the hostcall's work (nothing is read, written or
//! done), for the next N calls, every call, or a seeded random fraction.

use crate::prng::Rng;

/// Which calls of a hostcall an injection takes.
#[derive(Clone, Debug, PartialEq)]
pub enum Times {
    /// The next `n` calls.
    Next(u32),
    /// Every call from now on.
    Always,
    /// Each call with this probability, drawn from a generator seeded with `seed`.
    Random {
        /// Chance per call, 0 to 1.
        probability: f64,
        /// The generator's seed.
        seed: u64,
    },
}

/// How often a hostcall was called, and how often a status was injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostcallCount {
    /// Calls made by the module.
    pub calls: u64,
    /// Of those, answered with an injected status.
    pub injected: u64,
    /// Of those, with Ok: the hostcall claimed success without working.
    pub injected_ok: u64,
}

#[derive(Debug)]
struct Injection {
    status: i32,
    times: Times,
    rng: Rng,
}

impl Injection {
    /// Whether it takes this call.
    fn takes(&mut self) -> bool {
        match &mut self.times {
            Times::Next(0) => false,
            Times::Next(n) => {
                *n -= 1;
                true
            }
            Times::Always => true,
            Times::Random { probability, .. } => self.rng.uniform() < *probability,
        }
    }
}

/// The injections of one host, per wrapped hostcall.
#[derive(Debug, Default)]
pub struct StatusPlan {
    names: Vec<String>,
    injections: Vec<Vec<Injection>>,
    counts: Vec<HostcallCount>,
}

impl StatusPlan {
    /// A plan for these hostcalls (index = the wrapper's index).
    pub fn new(names: Vec<String>) -> StatusPlan {
        let n = names.len();
        StatusPlan {
            names,
            injections: (0..n).map(|_| Vec::new()).collect(),
            counts: vec![HostcallCount::default(); n],
        }
    }

    /// The hostcalls statuses can be injected into.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Makes `times` calls of `hostcall` return `status`; injections added
    /// earlier are asked first.
    pub fn add(&mut self, hostcall: &str, status: i32, times: Times) -> Result<(), String> {
        let Some(i) = self.names.iter().position(|n| n == hostcall) else {
            return Err(format!("the module does not import env.{hostcall}; it imports {:?}", self.names));
        };
        let seed = match times {
            Times::Random { seed, .. } => seed,
            _ => 0,
        };
        self.injections[i].push(Injection { status, times, rng: Rng::new(seed) });
        Ok(())
    }

    /// Forgets every injection (the counts stay).
    pub fn clear(&mut self) {
        self.injections.iter_mut().for_each(Vec::clear);
    }

    /// Counts a call of hostcall `index`; the status to return instead of
    /// its work, if one is injected.
    pub fn on_call(&mut self, index: usize) -> Option<i32> {
        let count = &mut self.counts[index];
        count.calls += 1;
        let injections = &mut self.injections[index];
        let status = injections.iter_mut().find_map(|i| i.takes().then_some(i.status));
        injections.retain(|i| i.times != Times::Next(0));
        if let Some(s) = status {
            count.injected += 1;
            count.injected_ok += u64::from(s == 0);
        }
        status
    }

    /// The counts of `hostcall` (zero if the module does not import it).
    pub fn count(&self, hostcall: &str) -> HostcallCount {
        self.names.iter().position(|n| n == hostcall).map(|i| self.counts[i]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_always_and_random_take_the_calls_they_say() {
        let mut plan = StatusPlan::new(vec!["proxy_log".into(), "proxy_http_call".into()]);
        assert!(plan.add("proxy_nope", 1, Times::Always).is_err());
        plan.add("proxy_http_call", 2, Times::Next(2)).unwrap();
        plan.add("proxy_http_call", 10, Times::Always).unwrap();
        let got: Vec<Option<i32>> = (0..4).map(|_| plan.on_call(1)).collect();
        assert_eq!(got, [Some(2), Some(2), Some(10), Some(10)]);
        assert_eq!(plan.on_call(0), None);
        assert_eq!(plan.count("proxy_http_call"), HostcallCount { calls: 4, injected: 4, injected_ok: 0 });
        plan.clear();
        assert_eq!(plan.on_call(1), None);
        plan.add("proxy_log", 7, Times::Random { probability: 0.25, seed: 3 }).unwrap();
        let hits = (0..4000).filter(|_| plan.on_call(0).is_some()).count();
        assert!((800..1200).contains(&hits), "{hits}");
        let mut again = StatusPlan::new(vec!["proxy_log".into()]);
        again.add("proxy_log", 7, Times::Random { probability: 0.25, seed: 3 }).unwrap();
        assert_eq!((0..4000).filter(|_| again.on_call(0).is_some()).count(), hits, "seeded: the same calls");
    }
}
