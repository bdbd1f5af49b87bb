//! A 64 MB store reply (webdis's body, a Redis bulk string) is a store
//! error that the rule's failure policy answers, and the module does not
//! copy it in: a VM's linear memory never shrinks, so every worker would
//! keep those 64 MB for the rest of its life.

use host_tests::wasm_host::Fault;

use crate::both_transports;
use crate::fixture::{both_policies, Kind, Servers};

both_transports!(a_64_mb_reply_is_a_store_error_and_is_not_copied_in);

const MB: usize = 1 << 20;

fn a_64_mb_reply_is_a_store_error_and_is_not_copied_in(kind: Kind) {
    let servers = Servers::start(kind);
    let reply = match kind {
        Kind::Webdis => vec![b'x'; 64 * MB],
        Kind::Redis => {
            let mut bulk = format!("${}\r\n", 64 * MB).into_bytes();
            bulk.resize(bulk.len() + 64 * MB, b'x');
            bulk.extend_from_slice(b"\r\n");
            bulk
        }
    };
    let (closed, open) = both_policies(&servers, 0, &Fault::Raw(reply));
    for host in [closed, open] {
        let memory = host.memory_bytes(0);
        assert!(memory < 16 * MB as u64, "the VM's memory grew to {memory} bytes: the reply was copied in");
    }
}
