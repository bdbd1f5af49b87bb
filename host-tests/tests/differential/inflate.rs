//! `ratelimit::usage::Decoder` (gzip on `miniz_oxide`, its frame and
//! CRC-32 written here) against `flate2`'s write decoders, which the filter
//! ran before (`MultiGzDecoder`, `ZlibDecoder`, `DeflateDecoder`, flushed
//! after each chunk): on bodies whole, cut, with bytes flipped or added,
//! of several gzip members and every optional header field, fed in random
//! chunks, both refuse the body at the same chunk (or at its end, or
//! never), and hand on the same bytes after every chunk they accept.
//!
//! Where a chunk is refused, the bytes decoded in it before the fault may
//! differ (`flate2` hands them on in 32 KB runs of its own buffer, and
//! drops the run the fault is in): they are not compared.

use std::io::Write;

use flate2::write::{DeflateDecoder, DeflateEncoder, GzEncoder, MultiGzDecoder, ZlibDecoder, ZlibEncoder};
use flate2::{Compression, Crc, GzBuilder};
use proptest::prelude::*;
use ratelimit::usage::Decoder;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Gzip,
    Zlib,
    Raw,
}

/// What a decoder made of a body fed in chunks.
#[derive(Debug, PartialEq)]
struct Run {
    /// The bytes decoded after each chunk it accepted.
    after: Vec<Vec<u8>>,
    /// Where it refused the body: the chunk's index, or the number of
    /// chunks for the end; `None` if it never did.
    refused_at: Option<usize>,
}

fn ours(kind: Kind, chunks: &[&[u8]]) -> Run {
    let mut d = match kind {
        Kind::Gzip => Decoder::gzip(),
        Kind::Zlib => Decoder::deflate(true),
        Kind::Raw => Decoder::deflate(false),
    };
    let mut out = Vec::new();
    let mut after = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        if d.feed(chunk, &mut |p: &[u8]| {
            out.extend_from_slice(p);
            true
        })
        .is_err()
        {
            return Run { after, refused_at: Some(i) };
        }
        after.push(out.clone());
    }
    let end = d.finish(&mut |p: &[u8]| {
        out.extend_from_slice(p);
        true
    });
    after.push(out);
    Run { after, refused_at: end.is_err().then_some(chunks.len()) }
}

/// `flate2`'s decoders as the filter drove them: each chunk written whole
/// and flushed, the end `try_finish`.
trait Flate2: Write {
    fn decoded(&self) -> &Vec<u8>;
    fn end(&mut self) -> std::io::Result<()>;
}

macro_rules! flate2_decoder {
    ($t:ident) => {
        impl Flate2 for $t<Vec<u8>> {
            fn decoded(&self) -> &Vec<u8> {
                self.get_ref()
            }
            fn end(&mut self) -> std::io::Result<()> {
                self.try_finish()
            }
        }
    };
}
flate2_decoder!(MultiGzDecoder);
flate2_decoder!(ZlibDecoder);
flate2_decoder!(DeflateDecoder);

fn theirs(kind: Kind, chunks: &[&[u8]]) -> Run {
    let mut d: Box<dyn Flate2> = match kind {
        Kind::Gzip => Box::new(MultiGzDecoder::new(Vec::new())),
        Kind::Zlib => Box::new(ZlibDecoder::new(Vec::new())),
        Kind::Raw => Box::new(DeflateDecoder::new(Vec::new())),
    };
    let mut after = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        if d.write_all(chunk).and_then(|()| d.flush()).is_err() {
            return Run { after, refused_at: Some(i) };
        }
        after.push(d.decoded().clone());
    }
    let end = d.end();
    after.push(d.decoded().clone());
    Run { after, refused_at: end.is_err().then_some(chunks.len()) }
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = Crc::new();
    c.update(data);
    c.sum()
}

/// A gzip member with every optional header field `flags` asks for
/// (FHCRC's CRC-16 right unless `bad_hcrc`), written by hand: flate2 writes
/// no FHCRC.
fn gzip_member_by_hand(data: &[u8], flags: u8, bad_hcrc: bool) -> Vec<u8> {
    let mut m = vec![0x1f, 0x8b, 8, flags, 1, 2, 3, 4, 0, 3];
    if flags & 4 != 0 {
        m.extend_from_slice(&[5, 0, b'a', b'b', 0, b'c', b'd']);
    }
    if flags & 8 != 0 {
        m.extend_from_slice(b"name.json\0");
    }
    if flags & 16 != 0 {
        m.extend_from_slice(b"a comment\0");
    }
    if flags & 2 != 0 {
        let crc = crc32(&m) as u16 ^ u16::from(bad_hcrc);
        m.extend_from_slice(&crc.to_le_bytes());
    }
    m.extend_from_slice(&deflate(Kind::Raw, data, 6));
    m.extend_from_slice(&crc32(data).to_le_bytes());
    m.extend_from_slice(&(data.len() as u32).to_le_bytes());
    m
}

fn deflate(kind: Kind, data: &[u8], level: u32) -> Vec<u8> {
    let level = Compression::new(level);
    match kind {
        Kind::Gzip => {
            let mut e = GzEncoder::new(Vec::new(), level);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Kind::Zlib => {
            let mut e = ZlibEncoder::new(Vec::new(), level);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Kind::Raw => {
            let mut e = DeflateEncoder::new(Vec::new(), level);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    }
}

/// Data as a body holds it: JSON-like text that compresses, runs of one
/// byte, and noise that does not.
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z\":{},0-9 ]{0,600}".prop_map(String::into_bytes),
        (any::<u8>(), 0usize..70_000).prop_map(|(b, n)| vec![b; n]),
        proptest::collection::vec(any::<u8>(), 0..600),
    ]
}

/// A body of `kind`, well formed.
fn body() -> impl Strategy<Value = (Kind, Vec<u8>)> {
    let gzip_members = proptest::collection::vec((data(), 0u32..10), 1..4).prop_map(|members| {
        (Kind::Gzip, members.iter().flat_map(|(d, level)| deflate(Kind::Gzip, d, *level)).collect())
    });
    let gzip_header = (data(), 0u8..32, any::<bool>(), any::<bool>()).prop_map(|(d, flags, bad, named)| {
        let wire = if named {
            let mut e = GzBuilder::new()
                .filename("usage.json")
                .comment("c")
                .extra(vec![1, 2, 3])
                .mtime(7)
                .write(Vec::new(), Compression::fast());
            e.write_all(&d).unwrap();
            e.finish().unwrap()
        } else {
            gzip_member_by_hand(&d, flags & !1, bad)
        };
        (Kind::Gzip, wire)
    });
    let deflated = (prop_oneof![Just(Kind::Zlib), Just(Kind::Raw)], data(), 0u32..10)
        .prop_map(|(kind, d, level)| (kind, deflate(kind, &d, level)));
    prop_oneof![gzip_members, gzip_header, deflated]
}

/// What is done to a body on its way.
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// The byte at (this fraction of the length) XOR the mask.
    Flip(f64, u8),
    /// Only the first (fraction of the length) bytes.
    Cut(f64),
    /// Bytes added after it.
    Tail(Vec<u8>),
    /// A flag byte of the gzip header set (reserved bits included).
    Flags(u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => Just(Damage::None),
        2 => (0.0..1.0f64, 1u8..=255).prop_map(|(at, mask)| Damage::Flip(at, mask)),
        1 => (0.0..1.0f64).prop_map(Damage::Cut),
        1 => proptest::collection::vec(any::<u8>(), 1..12).prop_map(Damage::Tail),
        1 => any::<u8>().prop_map(Damage::Flags),
    ]
}

fn damaged(mut wire: Vec<u8>, damage: &Damage) -> Vec<u8> {
    let at = |f: f64, len: usize| ((f * len as f64) as usize).min(len.saturating_sub(1));
    match damage {
        Damage::None => {}
        Damage::Flip(f, mask) => {
            let i = at(*f, wire.len());
            if let Some(b) = wire.get_mut(i) {
                *b ^= mask;
            }
        }
        Damage::Cut(f) => wire.truncate(at(*f, wire.len())),
        Damage::Tail(tail) => wire.extend_from_slice(tail),
        Damage::Flags(flags) => {
            if let Some(b) = wire.get_mut(3) {
                *b = *flags;
            }
        }
    }
    wire
}

/// `wire` in chunks whose sizes cycle through `sizes`.
fn chunked<'a>(wire: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = wire;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, more) = rest.split_at((*size).min(rest.len()));
        chunks.push(chunk);
        rest = more;
    }
    chunks
}

fn check(kind: Kind, wire: &[u8], sizes: &[usize]) -> Result<(), TestCaseError> {
    let chunks = chunked(wire, sizes);
    let (a, b) = (ours(kind, &chunks), theirs(kind, &chunks));
    prop_assert_eq!(a.refused_at, b.refused_at, "{:?}, {} bytes in {} chunks", kind, wire.len(), chunks.len());
    prop_assert!(a.after == b.after, "{kind:?}: the bytes decoded differ");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn bodies_whole_cut_or_damaged_decode_as_flate2_decodes_them(
        (kind, wire) in body(),
        damage in damage(),
        sizes in proptest::collection::vec(prop_oneof![1usize..8, 8usize..4096, Just(100_000)], 1..6),
    ) {
        check(kind, &damaged(wire, &damage), &sizes)?;
    }
}

#[test]
fn an_empty_body_and_a_lone_header_are_refused_at_their_end_as_flate2_refuses_them() {
    for kind in [Kind::Gzip, Kind::Zlib, Kind::Raw] {
        let (a, b) = (ours(kind, &[]), theirs(kind, &[]));
        assert_eq!(a, b, "{kind:?}, empty");
        assert_eq!(a.refused_at, Some(0), "{kind:?}, empty");
    }
    let header = &gzip_member_by_hand(b"", 0, false)[..10];
    assert_eq!(ours(Kind::Gzip, &[header]), theirs(Kind::Gzip, &[header]));
}

#[test]
fn a_file_name_past_flate2s_bound_is_refused_where_flate2_refuses_it() {
    for len in [65_535, 65_536] {
        let mut wire = vec![0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 3];
        wire.extend(std::iter::repeat_n(b'n', len));
        wire.push(0);
        wire.extend_from_slice(&deflate(Kind::Raw, b"{}", 6));
        wire.extend_from_slice(&crc32(b"{}").to_le_bytes());
        wire.extend_from_slice(&2u32.to_le_bytes());
        let chunks = chunked(&wire, &[1000]);
        let (a, b) = (ours(Kind::Gzip, &chunks), theirs(Kind::Gzip, &chunks));
        assert_eq!(a, b, "a name of {len} bytes");
        assert_eq!(a.refused_at.is_some(), len > 65_535, "a name of {len} bytes");
    }
}
