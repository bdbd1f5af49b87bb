//! The usage reader's memory does not grow with the body: 20 MB fed in
//! 16 KB chunks allocate nothing at all. This binary counts every heap
//! allocation, so it holds this one test (a second one, run in parallel,
//! would be counted too).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use ratelimit::usage::{BodyFormat, Usage, UsageFields, UsageReader};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MB20: usize = 20 << 20;

/// What the reader finds in `body` fed in 16 KB chunks, and how many heap
/// allocations feeding and finishing took.
fn read(fields: &UsageFields, format: BodyFormat, body: &[u8]) -> (Usage, u64) {
    let mut reader = UsageReader::new(fields, format, u64::MAX);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for chunk in body.chunks(16 * 1024) {
        reader.feed(chunk);
    }
    let usage = reader.finish();
    (usage, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

#[test]
fn twenty_megabytes_in_16_kb_chunks_allocate_nothing() {
    let fields = UsageFields::parse(&["usage.prompt_tokens", "usage.completion_tokens"]).unwrap();

    // A stream: 20 MB of content deltas with escapes, the usage at the end.
    let delta = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\
                 \"delta\":{\"content\":\"Jack is a dull boy. \\\"Quoted\\\", \\u00e9\\n\"},\"finish_reason\":null}],\
                 \"usage\":null}\n\n";
    let mut stream = delta.repeat(MB20 / delta.len());
    stream.push_str(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":345678}}\n\ndata: [DONE]\n\n",
    );
    assert!(stream.len() >= MB20 - delta.len());
    assert_eq!(read(&fields, BodyFormat::EventStream, stream.as_bytes()), (Usage::Found(346_878), 0));

    // One JSON document: a 20 MB string and 20 MB of nested arrays and objects.
    let text = "All work and no play. \\\"x\\\" \\u00e9 ".repeat(MB20 / 2 / 36);
    let structure = "{\"a\":[1,2.5,-3,true,null,{\"b\":\"c\"}],\"usage\":{\"x\":1}},".repeat(MB20 / 2 / 55);
    let json = format!(
        "{{\"content\":\"{text}\",\"items\":[{structure}{{}}],\"usage\":{{\"prompt_tokens\":7,\"completion_tokens\":8}}}}"
    );
    assert!(json.len() >= MB20 * 9 / 10, "{} bytes", json.len());
    assert_eq!(read(&fields, BodyFormat::Json, json.as_bytes()), (Usage::Found(15), 0));
}
