//! Deflate (RFC 1951), raw or in zlib's frame (RFC 1950), inflated as it
//! passes with `miniz_oxide`'s decompressor (what `flate2` runs), each
//! piece of output handed on as it comes. The decompressor writes into
//! deflate's 32 KB window; what it wrote there is the piece, so nothing is
//! copied twice.

use miniz_oxide::inflate::core::inflate_flags::{
    TINFL_FLAG_COMPUTE_ADLER32, TINFL_FLAG_HAS_MORE_INPUT, TINFL_FLAG_IGNORE_ADLER32, TINFL_FLAG_PARSE_ZLIB_HEADER,
};
use miniz_oxide::inflate::core::{decompress, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

/// Deflate's window: the farthest back a match reaches.
const WINDOW: usize = 32 * 1024;

/// The compressed data cannot be decoded (or has been cut short).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt;

/// Where a stream is after some input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// All the input was used, and the stream goes on.
    More,
    /// The stream ended after this many bytes of the input.
    End(usize),
    /// The taker of the output wanted no more.
    Stopped,
}

/// One deflate stream being inflated.
pub struct Inflater {
    core: DecompressorOxide,
    window: [u8; WINDOW],
    /// Where in `window` the next output goes.
    at: usize,
    flags: u32,
    ended: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater").field("at", &self.at).field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl Inflater {
    /// A stream in zlib's frame (header checked, Adler-32 verified), or raw.
    pub fn new(zlib: bool) -> Inflater {
        let flags =
            if zlib { TINFL_FLAG_PARSE_ZLIB_HEADER | TINFL_FLAG_COMPUTE_ADLER32 } else { TINFL_FLAG_IGNORE_ADLER32 };
        Inflater { core: DecompressorOxide::new(), window: [0; WINDOW], at: 0, flags, ended: false }
    }

    /// A fresh raw stream in the same memory (the next gzip member): its
    /// window zeroed, as a new decoder's would be.
    pub fn restart(&mut self) {
        self.core.init();
        self.window.fill(0);
        self.at = 0;
        self.ended = false;
    }

    /// Inflates `input`, handing each piece of output to `take`, which
    /// says whether it wants more. Input after the stream's end is left
    /// unused ([`Progress::End`] says where the end was).
    pub fn inflate(&mut self, input: &[u8], take: &mut impl FnMut(&[u8]) -> bool) -> Result<Progress, Corrupt> {
        if self.ended {
            return Ok(Progress::End(0));
        }
        self.run(input, self.flags | TINFL_FLAG_HAS_MORE_INPUT, take)
    }

    /// The end of the input: what the last bits decode to, handed to
    /// `take`; `Corrupt` unless the stream has ended.
    pub fn finish(&mut self, take: &mut impl FnMut(&[u8]) -> bool) -> Result<(), Corrupt> {
        if self.ended {
            return Ok(());
        }
        match self.run(&[], self.flags, take)? {
            Progress::End(_) | Progress::Stopped => Ok(()),
            Progress::More => Err(Corrupt),
        }
    }

    fn run(&mut self, input: &[u8], flags: u32, take: &mut impl FnMut(&[u8]) -> bool) -> Result<Progress, Corrupt> {
        let mut rest = input;
        loop {
            let (status, used, wrote) = decompress(&mut self.core, rest, &mut self.window, self.at, flags);
            if matches!(
                status,
                TINFLStatus::FailedCannotMakeProgress
                    | TINFLStatus::BadParam
                    | TINFLStatus::Adler32Mismatch
                    | TINFLStatus::Failed
            ) {
                // What this last call wrote is dropped, as flate2 drops it.
                return Err(Corrupt);
            }
            rest = rest.get(used..).unwrap_or_default();
            let piece = self.window.get(self.at..self.at + wrote).unwrap_or_default();
            self.at = (self.at + wrote) % WINDOW;
            let wants_more = piece.is_empty() || take(piece);
            if status == TINFLStatus::Done {
                self.ended = true;
                return Ok(Progress::End(input.len() - rest.len()));
            }
            if !wants_more {
                return Ok(Progress::Stopped);
            }
            if rest.is_empty() && status == TINFLStatus::NeedsMoreInput {
                return Ok(Progress::More);
            }
            if used == 0 && wrote == 0 {
                // No progress with input left: never loop on it.
                return Err(Corrupt);
            }
        }
    }
}
