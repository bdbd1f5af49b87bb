//! One lease as it sits in shared data: whose it is (a fingerprint of the
//! identity, its rules and their limits), until when it holds, how many
//! requests it still admits, and for each limit what the store said at the
//! grant, so a request it admits carries exact rate-limit fields.

/// The most limits a lease covers (a decision has at most 64).
pub const MAX_LEASED_LIMITS: usize = 64;

/// One limit of a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasedLimit {
    /// Units the store still held for the client outside the lease when
    /// it was granted.
    pub remaining_at_grant: u64,
    /// When the limit is fully available again (ms since the epoch), as
    /// the store said at the grant: spending leased units changes nothing
    /// in the store, so it stays exact.
    pub reset_at_ms: u64,
    /// Units one request takes from it (1, or the rule's cost).
    pub per_request: u64,
    /// The limit an operator's override had the store grant it under;
    /// 0: the configuration's.
    pub limit: u64,
}

/// A lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Whose: identity, rules and limits (see `pipeline`).
    pub fingerprint: u64,
    /// Until when it admits (ms since the epoch, exclusive): `max_age`
    /// after the grant, and no later than the end of the window of any
    /// windowed limit it covers.
    pub expires_at_ms: u64,
    /// Requests it still admits.
    pub requests_left: u64,
    /// Requests granted in all (grants of one lease add up).
    pub granted: u64,
    /// When it was first granted (ms since the epoch): with `granted`, how
    /// fast the client spends, for the next lease's size.
    pub granted_at_ms: u64,
    /// Its limits, in the decision's order.
    pub limits: Vec<LeasedLimit>,
}

impl LeaseRecord {
    /// The bytes in shared data: six little-endian u64 (fingerprint,
    /// expiry, requests left, granted, granted at, limit count), then four
    /// per limit.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + 32 * self.limits.len());
        let head = [
            self.fingerprint,
            self.expires_at_ms,
            self.requests_left,
            self.granted,
            self.granted_at_ms,
            self.limits.len() as u64,
        ];
        for v in head {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for l in &self.limits {
            for v in [l.remaining_at_grant, l.reset_at_ms, l.per_request, l.limit] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// A record from its bytes; `None` for anything that is not one
    /// (another version's layout, a torn or foreign value).
    pub fn decode(bytes: &[u8]) -> Option<LeaseRecord> {
        let words: Vec<u64> =
            bytes.chunks(8).map(|c| <[u8; 8]>::try_from(c).ok().map(u64::from_le_bytes)).collect::<Option<_>>()?;
        let (&[fingerprint, expires_at_ms, requests_left, granted, granted_at_ms, n], rest) =
            words.split_first_chunk::<6>()?;
        let n = usize::try_from(n).ok().filter(|n| (1..=MAX_LEASED_LIMITS).contains(n) && rest.len() == 4 * n)?;
        let limits = rest
            .chunks_exact(4)
            .take(n)
            .map(|l| LeasedLimit { remaining_at_grant: l[0], reset_at_ms: l[1], per_request: l[2], limit: l[3] })
            .collect();
        Some(LeaseRecord { fingerprint, expires_at_ms, requests_left, granted, granted_at_ms, limits })
    }
}

/// A request admitted from a lease, as its rate-limit fields show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasedRequest<'a> {
    /// Requests the lease holds after this one (other workers may have
    /// spent from the table since: never more than the store could have
    /// granted).
    pub requests_left: u64,
    /// The lease's limits, as the store said them at the grant.
    pub limits: &'a [LeasedLimit],
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn lease() -> LeaseRecord {
        LeaseRecord {
            fingerprint: 0xfeed,
            expires_at_ms: 1_700_000_060_000,
            requests_left: 7,
            granted: 9,
            granted_at_ms: 1_700_000_000_000,
            limits: vec![
                LeasedLimit { remaining_at_grant: 80, reset_at_ms: 1_700_000_060_000, per_request: 1, limit: 0 },
                LeasedLimit { remaining_at_grant: u64::MAX, reset_at_ms: 0, per_request: 25, limit: 40 },
            ],
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_lease_round_trips_through_its_bytes() {
        let bytes = lease().encode();
        assert_eq!(bytes.len(), 48 + 2 * 32);
        assert_eq!(LeaseRecord::decode(&bytes), Some(lease()));
    }

    #[test]
    #[wasm_bindgen_test]
    fn anything_else_is_no_lease() {
        let bytes = lease().encode();
        for cut in 0..bytes.len() {
            assert_eq!(LeaseRecord::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.extend_from_slice(&[0; 8]);
        assert_eq!(LeaseRecord::decode(&extra), None);
        let mut no_limits = bytes[..48].to_vec();
        no_limits[40..48].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(LeaseRecord::decode(&no_limits), None);
        let mut lying = bytes;
        lying[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(LeaseRecord::decode(&lying), None);
    }
}
