//! Fixed windows shifted per client: the window works on now + offset, its
//! reset says when the SHIFTED window ends, it never admits more than the
//! limit per shifted window, and its key (`fo`) never mixes with the
//! aligned windows' (`fw`).

use ratelimit::algorithm::Algorithm::FixedWindow;
use ratelimit::spec::{LimitCall, Op};

use crate::fixture::{row, spec, Fixture, Row, T0};

fn shifted(offset_ms: u64, cost: u64) -> LimitCall<'static> {
    LimitCall { rule: "r", spec: spec(FixedWindow, 3, 1000, 3), op: Op::Use(cost), offset_ms: Some(offset_ms) }
}

#[test]
fn a_shifted_window_resets_at_its_own_boundary() {
    // Offset 300: the windows run from T0 - 300 + k x 1000, i.e. end at T0 + 700, 1700, ...
    let mut f = Fixture::new();
    let steps: &[(u64, u64, Row)] = &[
        (0, 1, (true, 2, 700, 0)),
        (600, 2, (true, 0, 100, 0)),
        (699, 1, (false, 0, 1, 1)),
        (700, 3, (true, 0, 1000, 0)), // a new shifted window
        (1699, 1, (false, 0, 1, 1)),
    ];
    for &(t, cost, want) in steps {
        assert_eq!(row(&f.one("c", T0 + t, &[shifted(300, cost)])[0]), want, "t={t}");
    }
    // The first shifted window's key is gone; the second's has its own index.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut f.conn).unwrap();
    assert_eq!(keys, [format!("t:{{c}}:r:fo:1000:{}", (T0 + 700 + 300) / 1000)]);
}

#[test]
fn no_shifted_window_admits_more_than_the_limit() {
    let mut f = Fixture::new();
    let offset = 437;
    let mut admitted: std::collections::BTreeMap<u64, u64> = Default::default();
    // Every 45 ms for 5 s: 111 requests over 6 shifted windows.
    for i in 0..=111 {
        let now = T0 + i * 45;
        if f.one("c", now, &[shifted(offset, 1)])[0].allowed {
            *admitted.entry((now + offset) / 1000).or_default() += 1;
        }
    }
    assert_eq!(admitted.len(), 6);
    assert!(admitted.values().all(|&n| n == 3), "{admitted:?}");
}

#[test]
fn shifted_and_aligned_windows_count_apart_and_clients_reset_apart() {
    let mut f = Fixture::new();
    let aligned = LimitCall { offset_ms: None, ..shifted(0, 3) };
    assert!(f.one("c", T0 + 100, &[shifted(0, 3)])[0].allowed);
    // The same limit without an offset has its own count.
    assert_eq!(row(&f.one("c", T0 + 100, &[aligned])[0]), (true, 0, 900, 0));
    // Two clients with different offsets: each window ends at its own instant.
    assert_eq!(f.one("a", T0 + 100, &[shifted(250, 3)])[0].reset_ms, 650);
    assert_eq!(f.one("b", T0 + 100, &[shifted(800, 3)])[0].reset_ms, 100);
    assert!(!f.one("a", T0 + 749, &[shifted(250, 1)])[0].allowed);
    assert!(f.one("a", T0 + 750, &[shifted(250, 1)])[0].allowed);
    assert!(f.one("b", T0 + 200, &[shifted(800, 1)])[0].allowed);
}
