//! A gzip body (RFC 1952), every member of it, as it passes: each member's
//! header read and checked, its deflate data inflated, its CRC-32 and size
//! checked, as `flate2`'s `MultiGzDecoder` does (and with its verdicts:
//! a member's checksums are judged when the next member starts or the body
//! ends). The CRC-32 takes one 1 KB table, not `crc32fast`'s 16 KB: see
//! docs/BENCHMARKS.md ("Room in the module").

use super::inflate::{Corrupt, Inflater, Progress};

/// Header flags (RFC 1952 §2.3.1).
const FHCRC: u8 = 1 << 1;
const FEXTRA: u8 = 1 << 2;
const FNAME: u8 = 1 << 3;
const FCOMMENT: u8 = 1 << 4;
const FRESERVED: u8 = 0xE0;
/// The longest file name or comment a header may carry (`flate2`'s bound).
const MAX_FIELD: u32 = 65_535;

/// Where in a member the next byte is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// The fixed ten bytes of a header, `n` of them read.
    Fixed([u8; 10], u8),
    /// The length of the extra field, `n` of its two bytes read.
    ExtraLen([u8; 2], u8),
    /// The extra field, `left` bytes of it still to come.
    Extra(u16),
    /// The file name, `len` bytes of it read.
    Name(u32),
    /// The comment, `len` bytes of it read.
    Comment(u32),
    /// The header's own CRC-16, `n` of its two bytes read.
    HeaderCrc([u8; 2], u8),
    /// The deflate data.
    Data,
    /// The CRC-32 and size that end a member, `n` of their eight bytes read.
    Trailer([u8; 8], u8),
    /// A member ended; whether its CRC-32 and size matched what it
    /// decoded to.
    Ended(bool),
}

/// A gzip body being decoded.
#[derive(Debug)]
pub struct Gzip {
    inflater: Inflater,
    part: Part,
    flags: u8,
    /// CRC-32 of the header read so far (for `FHCRC`).
    header_crc: u32,
    /// CRC-32 and size (mod 2^32) of the member's decoded bytes.
    crc: u32,
    size: u32,
}

impl Gzip {
    pub fn new() -> Gzip {
        Gzip { inflater: Inflater::new(false), part: Part::Fixed([0; 10], 0), flags: 0, header_crc: 0, crc: 0, size: 0 }
    }

    /// Decodes `input`, handing each piece of output to `take`, which says
    /// whether it wants more.
    pub fn feed(&mut self, input: &[u8], take: &mut impl FnMut(&[u8]) -> bool) -> Result<(), Corrupt> {
        let mut rest = input;
        while let Some((&byte, after)) = rest.split_first() {
            match self.part {
                Part::Data => {
                    let (crc, size) = (&mut self.crc, &mut self.size);
                    let mut checked = |piece: &[u8]| {
                        *crc = crc32(*crc, piece);
                        *size = size.wrapping_add(piece.len() as u32);
                        take(piece)
                    };
                    match self.inflater.inflate(rest, &mut checked)? {
                        Progress::More | Progress::Stopped => return Ok(()),
                        Progress::End(used) => {
                            rest = rest.get(used..).unwrap_or_default();
                            self.part = Part::Trailer([0; 8], 0);
                        }
                    }
                }
                Part::Ended(intact) => {
                    // More after a member: the next member.
                    if !intact {
                        return Err(Corrupt);
                    }
                    self.inflater.restart();
                    (self.part, self.header_crc, self.crc, self.size) = (Part::Fixed([0; 10], 0), 0, 0, 0);
                }
                _ => {
                    self.byte(byte)?;
                    rest = after;
                }
            }
        }
        Ok(())
    }

    /// The end of the body: what the last bits decode to, handed to
    /// `take`; `Corrupt` unless it ended with a whole member whose
    /// checksums matched.
    pub fn finish(&mut self, take: &mut impl FnMut(&[u8]) -> bool) -> Result<(), Corrupt> {
        match self.part {
            Part::Ended(true) => Ok(()),
            Part::Data => {
                self.inflater.finish(take)?;
                Err(Corrupt)
            }
            _ => Err(Corrupt),
        }
    }

    /// One byte of a header or trailer.
    fn byte(&mut self, b: u8) -> Result<(), Corrupt> {
        if !matches!(self.part, Part::Trailer(..) | Part::HeaderCrc(..)) {
            self.header_crc = crc32(self.header_crc, &[b]);
        }
        self.part = match self.part {
            Part::Fixed(mut bytes, n) => {
                bytes[usize::from(n)] = b;
                if n < 9 {
                    Part::Fixed(bytes, n + 1)
                } else {
                    let [id1, id2, method, flags, ..] = bytes;
                    if id1 != 0x1f || id2 != 0x8b || method != 8 || flags & FRESERVED != 0 {
                        return Err(Corrupt);
                    }
                    self.flags = flags;
                    self.next_from(FEXTRA)
                }
            }
            Part::ExtraLen(_, 0) => Part::ExtraLen([b, 0], 1),
            Part::ExtraLen([low, _], _) => match u16::from_le_bytes([low, b]) {
                0 => self.next_from(FNAME),
                len => Part::Extra(len),
            },
            Part::Extra(1) => self.next_from(FNAME),
            Part::Extra(left) => Part::Extra(left - 1),
            Part::Name(_) if b == 0 => self.next_from(FCOMMENT),
            Part::Comment(_) if b == 0 => self.next_from(FHCRC),
            Part::Name(len) | Part::Comment(len) if len == MAX_FIELD => return Err(Corrupt),
            Part::Name(len) => Part::Name(len + 1),
            Part::Comment(len) => Part::Comment(len + 1),
            Part::HeaderCrc(_, 0) => Part::HeaderCrc([b, 0], 1),
            Part::HeaderCrc([low, _], _) => {
                if u16::from_le_bytes([low, b]) != self.header_crc as u16 {
                    return Err(Corrupt);
                }
                Part::Data
            }
            Part::Trailer(mut bytes, n) => {
                bytes[usize::from(n)] = b;
                if n < 7 {
                    Part::Trailer(bytes, n + 1)
                } else {
                    let [c0, c1, c2, c3, s0, s1, s2, s3] = bytes;
                    Part::Ended(
                        u32::from_le_bytes([c0, c1, c2, c3]) == self.crc
                            && u32::from_le_bytes([s0, s1, s2, s3]) == self.size,
                    )
                }
            }
            Part::Data | Part::Ended(_) => self.part,
        };
        Ok(())
    }

    /// The first optional header part from the one of flag `from` on
    /// that the flags announce, or the data if none is.
    fn next_from(&self, from: u8) -> Part {
        let order = [FEXTRA, FNAME, FCOMMENT, FHCRC];
        let next = order.iter().skip_while(|&&f| f != from).find(|&&f| self.flags & f != 0);
        match next {
            Some(&FEXTRA) => Part::ExtraLen([0; 2], 0),
            Some(&FNAME) => Part::Name(0),
            Some(&FCOMMENT) => Part::Comment(0),
            Some(_) => Part::HeaderCrc([0; 2], 0),
            None => Part::Data,
        }
    }
}

/// The CRC-32 of gzip (ISO-HDLC, reflected), one entry per byte value.
const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// The CRC-32 `crc` of some bytes, continued over `bytes`.
fn crc32(crc: u32, bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!crc, |c, &b| CRC_TABLE[usize::from(c as u8 ^ b)] ^ (c >> 8))
}
