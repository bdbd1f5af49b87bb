//! A compressed response body, decoded as it passes, in bounded memory,
//! for the usage reader: `gzip` (and `x-gzip`) and `deflate` (the zlib
//! format RFC 9110 names, or raw deflate, which some servers send under
//! that name), with `miniz_oxide` (`inflate.rs`, `gzip.rs`). The body
//! itself passes on unchanged; only the reader sees the decoded bytes.
//!
//! A decoder holds about 43 KB (deflate's 32 KB window and its tables)
//! while its response streams; inflating stops as soon as the reader has
//! its answer (the body was too large or garbled), so a compression bomb
//! costs at most the reader's byte bound of work.

use super::gzip::Gzip;
use super::inflate::{Corrupt, Inflater, Progress};
use super::{Usage, UsageReader};

/// How the body is encoded, from the response's `content-encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Not encoded (absent, or `identity`).
    Identity,
    /// `gzip` or `x-gzip`.
    Gzip,
    /// `deflate`.
    Deflate,
}

impl Encoding {
    /// The encoding of a `content-encoding` value; `None` for anything the
    /// filter cannot decode (`br`, `zstd`, several encodings, garbage).
    pub fn from_header(value: Option<&[u8]>) -> Option<Encoding> {
        let Some(value) = value else { return Some(Encoding::Identity) };
        let v = crate::request::trim_ows(value);
        if v.is_empty() || v.eq_ignore_ascii_case(b"identity") {
            Some(Encoding::Identity)
        } else if v.eq_ignore_ascii_case(b"gzip") || v.eq_ignore_ascii_case(b"x-gzip") {
            Some(Encoding::Gzip)
        } else if v.eq_ignore_ascii_case(b"deflate") {
            Some(Encoding::Deflate)
        } else {
            None
        }
    }
}

/// A decoder of one compressed body, handing each piece of what it
/// decodes to a taker, which says whether it wants more.
#[derive(Debug)]
pub struct Decoder(Format);

#[derive(Debug)]
enum Format {
    /// Every member of a gzip body (RFC 1952 allows several, and `gzip`
    /// clients decode them all): a decoder that stopped after the first
    /// would read the usage of the last member as no usage at all.
    Gzip(Gzip),
    /// Deflate, in zlib's frame or raw; nothing may follow its end.
    Deflate(Inflater),
}

impl Decoder {
    /// A gzip body's decoder.
    pub fn gzip() -> Decoder {
        Decoder(Format::Gzip(Gzip::new()))
    }

    /// A deflate body's: zlib's frame (`zlib`) or raw deflate.
    pub fn deflate(zlib: bool) -> Decoder {
        Decoder(Format::Deflate(Inflater::new(zlib)))
    }

    /// Decodes the next chunk of the body.
    pub fn feed(&mut self, input: &[u8], take: &mut impl FnMut(&[u8]) -> bool) -> Result<(), Corrupt> {
        match &mut self.0 {
            Format::Gzip(g) => g.feed(input, take),
            Format::Deflate(d) => match d.inflate(input, take)? {
                Progress::End(used) if used < input.len() => Err(Corrupt),
                _ => Ok(()),
            },
        }
    }

    /// The end of the body: the last of what it decodes to; `Corrupt` if
    /// the body was cut short.
    pub fn finish(&mut self, take: &mut impl FnMut(&[u8]) -> bool) -> Result<(), Corrupt> {
        match &mut self.0 {
            Format::Gzip(g) => g.finish(take),
            Format::Deflate(d) => d.finish(take),
        }
    }
}

/// Feeds the reader; wants more until it has its answer.
fn into(reader: &mut UsageReader) -> impl FnMut(&[u8]) -> bool + '_ {
    |piece| {
        reader.feed(piece);
        !reader.is_done()
    }
}

#[derive(Debug)]
enum Stage {
    Plain(UsageReader),
    /// A compressed body: its decoder, and the reader of what it decodes to.
    Decoding(UsageReader, Box<Decoder>),
    /// `deflate` before its first two bytes tell zlib from raw deflate.
    Sniffing {
        reader: UsageReader,
        head: Vec<u8>,
    },
    /// The answer is known (the end, the reader's own answer, or a
    /// decoding error); the decoder's memory is freed.
    Done {
        usage: Usage,
        delivered: (u64, u64),
    },
    /// Transient, while a stage is replaced.
    Gone,
}

/// A usage reader behind the body's content decoding.
#[derive(Debug)]
pub struct DecodedReader {
    stage: Stage,
}

/// Whether two bytes start a zlib stream (RFC 1950: deflate, a window of
/// at most 32 KB, a header check that is a multiple of 31).
fn is_zlib(b0: u8, b1: u8) -> bool {
    b0 & 0x0F == 8 && b0 >> 4 <= 7 && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0
}

impl DecodedReader {
    /// A reader of a body encoded with `encoding`.
    pub fn new(reader: UsageReader, encoding: Encoding) -> DecodedReader {
        let stage = match encoding {
            Encoding::Identity => Stage::Plain(reader),
            Encoding::Gzip => Stage::Decoding(reader, Box::new(Decoder::gzip())),
            Encoding::Deflate => Stage::Sniffing { reader, head: Vec::with_capacity(2) },
        };
        DecodedReader { stage }
    }

    /// Whether it holds a decoder's memory.
    pub fn decodes(&self) -> bool {
        matches!(self.stage, Stage::Decoding(..) | Stage::Sniffing { .. })
    }

    /// Reads the next chunk of the body as sent.
    pub fn feed(&mut self, chunk: &[u8]) {
        let written = match &mut self.stage {
            Stage::Plain(r) => {
                r.feed(chunk);
                Ok(())
            }
            // What a chunk decodes to reaches the reader at once (a stream
            // cut after it still charges the usage it carried).
            Stage::Decoding(reader, d) => d.feed(chunk, &mut into(reader)),
            Stage::Sniffing { head, .. } => {
                let take = chunk.len().min(2 - head.len());
                head.extend_from_slice(&chunk[..take]);
                if head.len() == 2 {
                    self.start_deflate();
                    self.feed(&chunk[take..]);
                }
                Ok(())
            }
            Stage::Done { .. } | Stage::Gone => Ok(()),
        };
        if written.is_err() {
            self.end(Some("the compressed body is corrupt"));
        } else if self.reader().is_some_and(UsageReader::is_done) {
            // Too large or garbled: no more inflating.
            self.end(None);
        }
    }

    /// The end of the body: what it reported.
    pub fn finish(&mut self) -> Usage {
        let finished = match &mut self.stage {
            Stage::Decoding(reader, d) => d.finish(&mut into(reader)),
            Stage::Sniffing { head, .. } if !head.is_empty() => Err(Corrupt),
            _ => Ok(()),
        };
        self.end(finished.err().map(|_| "the compressed body is corrupt or cut short"))
    }

    /// The usage read so far and whether it is complete (see
    /// `UsageReader::so_far`), for a stream cut before its end.
    pub fn so_far(&self) -> Option<(u64, bool)> {
        self.reader().and_then(UsageReader::so_far)
    }

    /// Body bytes the reader saw (decoded), and events with JSON data.
    pub fn delivered(&self) -> (u64, u64) {
        match &self.stage {
            Stage::Done { delivered, .. } => *delivered,
            _ => self.reader().map_or((0, 0), |r| (r.scanned(), r.events())),
        }
    }

    /// The answer, once known, without ending the body.
    pub fn answer(&self) -> Option<Usage> {
        match &self.stage {
            Stage::Done { usage, .. } => Some(*usage),
            _ => None,
        }
    }

    fn reader(&self) -> Option<&UsageReader> {
        match &self.stage {
            Stage::Plain(r) | Stage::Decoding(r, _) | Stage::Sniffing { reader: r, .. } => Some(r),
            Stage::Done { .. } | Stage::Gone => None,
        }
    }

    fn reader_mut(&mut self) -> Option<&mut UsageReader> {
        match &mut self.stage {
            Stage::Plain(r) | Stage::Decoding(r, _) | Stage::Sniffing { reader: r, .. } => Some(r),
            Stage::Done { .. } | Stage::Gone => None,
        }
    }

    /// `deflate`: zlib or raw, by its first two bytes, which it then decodes.
    fn start_deflate(&mut self) {
        let Stage::Sniffing { reader, head } = std::mem::replace(&mut self.stage, Stage::Gone) else { return };
        let zlib = matches!(head.as_slice(), &[b0, b1] if is_zlib(b0, b1));
        self.stage = Stage::Decoding(reader, Box::new(Decoder::deflate(zlib)));
        self.feed(&head);
    }

    /// Settles the answer: the reader's own if it has one (too large,
    /// garbled), else `error` if decoding failed, else what the reader
    /// read; frees the decoder.
    fn end(&mut self, error: Option<&'static str>) -> Usage {
        if let Stage::Done { usage, .. } = self.stage {
            return usage;
        }
        let delivered = self.delivered();
        let usage = match (self.reader_mut(), error) {
            (Some(r), _) if r.is_done() => r.finish(),
            (_, Some(why)) => Usage::Garbled(why),
            (Some(r), None) => r.finish(),
            (None, None) => Usage::Missing,
        };
        self.stage = Stage::Done { usage, delivered };
        usage
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use flate2::Compression;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::usage::{BodyFormat, UsageFields};

    const BODY: &[u8] = br#"{"id":"c1","choices":[{"message":{"content":"hello"}}],"usage":{"total_tokens":150000}}"#;

    fn reader(encoding: Encoding, max_bytes: u64) -> DecodedReader {
        let fields = UsageFields::parse(&["usage.total_tokens"]).unwrap();
        DecodedReader::new(UsageReader::new(&fields, BodyFormat::Json, max_bytes), encoding)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn raw(data: &[u8]) -> Vec<u8> {
        let mut e = DeflateEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// The usage of `wire` fed in chunks of `chunk` bytes.
    fn read(encoding: Encoding, wire: &[u8], chunk: usize) -> Usage {
        let mut r = reader(encoding, 1 << 20);
        for part in wire.chunks(chunk) {
            r.feed(part);
        }
        r.finish()
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_encodings_it_decodes_and_those_it_cannot() {
        assert_eq!(Encoding::from_header(None), Some(Encoding::Identity));
        assert_eq!(Encoding::from_header(Some(b"identity")), Some(Encoding::Identity));
        assert_eq!(Encoding::from_header(Some(b" GZIP ")), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_header(Some(b"x-gzip")), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_header(Some(b"deflate")), Some(Encoding::Deflate));
        for other in [&b"br"[..], b"zstd", b"gzip, gzip", b"compress", b"\xff"] {
            assert_eq!(Encoding::from_header(Some(other)), None, "{other:?}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_gzip_body_of_several_members_is_read_to_its_last() {
        // The usage sits in the second member: `cat a.gz b.gz` is one
        // legal gzip body, and what a client's gzip decodes.
        let (head, tail) = BODY.split_at(30);
        let wire = [gzip(head), gzip(tail)].concat();
        let mut members = flate2::read::MultiGzDecoder::new(&wire[..]);
        let mut decoded = Vec::new();
        std::io::Read::read_to_end(&mut members, &mut decoded).unwrap();
        assert_eq!(decoded, BODY, "the crate's reader sees the whole body");
        for chunk in [1, 7, 4096] {
            assert_eq!(read(Encoding::Gzip, &wire, chunk), Usage::Found(150_000), "by {chunk}");
        }
        let three = [gzip(b""), gzip(head), gzip(tail)].concat();
        assert_eq!(read(Encoding::Gzip, &three, 5), Usage::Found(150_000), "an empty first member");
    }

    #[test]
    #[wasm_bindgen_test]
    fn gzip_zlib_and_raw_deflate_bodies_report_their_usage_whatever_the_chunking() {
        for chunk in [1, 7, 4096] {
            assert_eq!(read(Encoding::Identity, BODY, chunk), Usage::Found(150_000));
            assert_eq!(read(Encoding::Gzip, &gzip(BODY), chunk), Usage::Found(150_000), "gzip by {chunk}");
            assert_eq!(read(Encoding::Deflate, &zlib(BODY), chunk), Usage::Found(150_000), "zlib by {chunk}");
            assert_eq!(read(Encoding::Deflate, &raw(BODY), chunk), Usage::Found(150_000), "raw by {chunk}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_corrupt_or_cut_compressed_body_is_garbled() {
        let mut bad = gzip(BODY);
        bad[12] ^= 0xFF;
        assert!(matches!(read(Encoding::Gzip, &bad, 64), Usage::Garbled(_)));
        let whole = gzip(BODY);
        let cut = &whole[..whole.len() - 10];
        assert_eq!(read(Encoding::Gzip, cut, 64), Usage::Garbled("the compressed body is corrupt or cut short"));
        assert!(matches!(read(Encoding::Gzip, BODY, 64), Usage::Garbled(_)), "plain text called gzip");
        assert_eq!(read(Encoding::Deflate, b"x", 64), Usage::Garbled("the compressed body is corrupt or cut short"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_compression_bomb_stops_at_the_readers_bound_and_frees_its_decoder() {
        // 64 MB of spaces, about 64 KB compressed: read only up to 1 MB.
        let mut e = GzEncoder::new(Vec::new(), Compression::best());
        for _ in 0..1024 {
            e.write_all(&[b' '; 64 * 1024]).unwrap();
        }
        let bomb = e.finish().unwrap();
        let mut r = reader(Encoding::Gzip, 1 << 20);
        let mut fed = 0;
        for part in bomb.chunks(1024) {
            r.feed(part);
            fed += part.len();
            if !r.decodes() {
                break;
            }
        }
        assert!(fed < bomb.len() / 4, "stopped early: {fed} of {} bytes fed", bomb.len());
        assert_eq!(r.finish(), Usage::TooLarge);
        assert!(r.delivered().0 > 1 << 20);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_decoder_holds_the_window_and_tables_of_deflate_and_little_more() {
        // docs/token-budgets.md: about 43 KB per body while it streams.
        let size = std::mem::size_of::<Decoder>();
        assert!((32 * 1024..44 * 1024).contains(&size), "{size} bytes");
    }

    #[test]
    #[wasm_bindgen_test]
    fn what_was_read_before_a_cut_is_known() {
        let mut r = reader(Encoding::Gzip, 1 << 20);
        let wire = gzip(BODY);
        r.feed(&wire[..wire.len() / 2]);
        assert_eq!(r.so_far(), None);
        r.feed(&wire[wire.len() / 2..]);
        assert_eq!(r.so_far(), Some((150_000, true)), "read, though the body has not ended");
        assert_eq!(r.delivered(), (BODY.len() as u64, 0));
    }
}
