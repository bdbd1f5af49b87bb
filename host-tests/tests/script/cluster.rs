//! A 3-master Redis Cluster: a multi-limit call on hash-tagged keys runs on
//! whichever node owns the slot, and never fails with CROSSSLOT.

use host_tests::redis_cluster::RedisCluster;
use host_tests::script::{evalsha, load};
use ratelimit::algorithm::Algorithm;
use ratelimit::script::SCRIPT;

use crate::fixture::{spec, Fixture, T0};

#[test]
fn multi_limit_calls_run_on_the_slot_owner_of_every_identity() {
    let cluster = RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        load(&mut node.connect(), SCRIPT);
    }
    let limits: Vec<_> = Algorithm::RATES.iter().map(|a| spec(*a, 5, 60_000, 5)).collect();
    let mut owners = std::collections::HashSet::new();
    for i in 0..24 {
        let call = Fixture::call(&format!("user{i}"), T0, &limits, 1);
        assert_eq!(call.keys.len(), 6);
        let slot: u16 =
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(&call.keys[0]).query(&mut cluster.nodes[0].connect()).unwrap();
        assert_eq!(ratelimit::keys::cluster_slot(&format!("user{i}")).0, slot, "the filter's slot of user{i}");
        let owner = cluster.owner_of(&call.keys[0]);
        owners.insert(owner.port);
        let decisions = evalsha(&mut owner.connect(), ratelimit::script::sha1_hex(), &call, None)
            .unwrap_or_else(|e| panic!("user{i} on its owner: {e}"));
        assert!(decisions[0].iter().all(|d| d.allowed && d.remaining == 4), "user{i}: {decisions:?}");
        // Any other node redirects: the keys are one slot, never CROSSSLOT.
        let other = cluster.nodes.iter().find(|n| n.port != owner.port).unwrap();
        let err = evalsha(&mut other.connect(), ratelimit::script::sha1_hex(), &call, None).unwrap_err();
        assert!(err.contains("MOVED") || err.contains("Moved"), "user{i} elsewhere: {err}");
        assert!(!err.contains("CROSSSLOT"), "{err}");
    }
    assert_eq!(owners.len(), 3, "24 identities should spread over all 3 masters");
}

#[test]
fn an_override_sits_in_its_clients_hash_slot_and_is_read_with_the_counts() {
    use ratelimit::spec::{DecisionCall, LimitCall, Op};
    let cluster = RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        load(&mut node.connect(), SCRIPT);
    }
    let limits = [
        LimitCall { rule: "r", spec: spec(Algorithm::SlidingWindow, 5, 60_000, 5), op: Op::Use(1), offset_ms: None },
        LimitCall { rule: "s", spec: spec(Algorithm::TokenBucket, 5, 60_000, 5), op: Op::Use(1), offset_ms: None },
    ];
    for i in 0..12 {
        let identity = format!("user{i}");
        let call = ratelimit::store::script_call::ScriptCall::with_overrides(
            "t",
            ratelimit::time::Instant::from_ms(T0),
            &[DecisionCall { identity: &identity, limits: &limits }],
            true,
        );
        // Its override keys come first: the operator writes one on the owner.
        let owner = cluster.owner_of(&call.keys[0]);
        assert_eq!(cluster.owner_of(&call.keys[0]).port, cluster.owner_of(&call.keys[2]).port);
        let () = redis::cmd("SET")
            .arg(&call.keys[0])
            .arg("sw:60000=9")
            .arg("PX")
            .arg(60_000)
            .query(&mut owner.connect())
            .unwrap();
        let decisions = evalsha(&mut owner.connect(), ratelimit::script::sha1_hex(), &call, None)
            .unwrap_or_else(|e| panic!("{identity} on its owner: {e}"));
        assert_eq!((decisions[0][0].remaining, decisions[0][1].remaining), (8, 4), "{identity}: {decisions:?}");
        assert_eq!(decisions[0][0].overridden.map(|o| o.limit), Some(9));
    }
}
