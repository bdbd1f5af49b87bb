//! proxy-wasm status codes (`WasmResult` in proxy-wasm ABI 0.2.1 and
//! proxy-wasm-cpp-host): what a hostcall returns to the module.

/// Success.
pub const OK: i32 = 0;
/// The key, header or buffer does not exist.
pub const NOT_FOUND: i32 = 1;
/// A bad argument: unknown cluster, unknown context, a map not available now.
pub const BAD_ARGUMENT: i32 = 2;
/// A value could not be serialized.
pub const SERIALIZATION_FAILURE: i32 = 3;
/// A value could not be parsed.
pub const PARSE_FAILURE: i32 = 4;
/// A bad expression (CEL).
pub const BAD_EXPRESSION: i32 = 5;
/// A pointer outside the module's memory, or allocation failed.
pub const INVALID_MEMORY_ACCESS: i32 = 6;
/// Nothing to return (an empty queue).
pub const EMPTY: i32 = 7;
/// Compare-and-swap lost: another worker wrote the shared-data key first.
pub const CAS_MISMATCH: i32 = 8;
/// A result of an unexpected type.
pub const RESULT_MISMATCH: i32 = 9;
/// The host failed (Higress: no healthy Redis host).
pub const INTERNAL_FAILURE: i32 = 10;
/// The connection broke.
pub const BROKEN_CONNECTION: i32 = 11;
/// The host does not implement the call.
pub const UNIMPLEMENTED: i32 = 12;

/// Every status the ABI defines, in order.
pub const ALL: [i32; 13] = [
    OK,
    NOT_FOUND,
    BAD_ARGUMENT,
    SERIALIZATION_FAILURE,
    PARSE_FAILURE,
    BAD_EXPRESSION,
    INVALID_MEMORY_ACCESS,
    EMPTY,
    CAS_MISMATCH,
    RESULT_MISMATCH,
    INTERNAL_FAILURE,
    BROKEN_CONNECTION,
    UNIMPLEMENTED,
];

/// The ABI's name of `status` (`"Unknown"` outside the ABI).
pub fn name(status: i32) -> &'static str {
    const NAMES: [&str; 13] = [
        "Ok",
        "NotFound",
        "BadArgument",
        "SerializationFailure",
        "ParseFailure",
        "BadExpression",
        "InvalidMemoryAccess",
        "Empty",
        "CasMismatch",
        "ResultMismatch",
        "InternalFailure",
        "BrokenConnection",
        "Unimplemented",
    ];
    usize::try_from(status).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("Unknown")
}
