//! Incremental Server-Sent Events decoding: bytes in, whole events out, whatever the split.
//!
//! Follows the WHATWG event-stream rules that providers rely on: lines end in `\n`, `\r\n` or `\r`
//! (a `\r\n` may be split across reads); a blank line dispatches the event; `data` lines join with
//! `\n`; lines starting with `:` are comments; one space after the colon is dropped. An event with no
//! `data` is not dispatched. Unlike a browser, a last event not followed by a blank line is still
//! dispatched at the end of the stream: some servers close without one, and losing the final usage
//! report would be worse than accepting it.

use std::fmt;

/// Largest line or event Forge accepts from a provider (16 MiB); more is a malformed stream.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one.
    pub event: Option<String>,
    /// The joined `data:` lines.
    pub data: String,
}

/// Why a byte stream is not a valid event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line is not UTF-8.
    NotUtf8,
    /// A line or an event is larger than [`MAX_EVENT_BYTES`].
    TooLarge,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::NotUtf8 => f.write_str("an event-stream line is not UTF-8"),
            SseError::TooLarge => write!(f, "an event is larger than {MAX_EVENT_BYTES} bytes"),
        }
    }
}

impl std::error::Error for SseError {}

/// Decodes an event stream fed in arbitrary pieces.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The current, unterminated line.
    line: Vec<u8>,
    /// The previous piece ended in `\r`: a leading `\n` in the next one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next piece of the stream, appending every event it completes to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (head, tail) = bytes.split_at(end);
            self.extend_line(head)?;
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
            bytes = match tail {
                [b'\r', b'\n', rest @ ..] => rest,
                [b'\r'] => {
                    self.after_cr = true;
                    &[]
                }
                [_, rest @ ..] => rest,
                [] => &[],
            };
        }
        self.extend_line(bytes)
    }

    /// Ends the stream: a pending line and a pending event are dispatched.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // `id` and `retry` concern browser reconnection; providers' streams are not resumable.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for p in pieces {
            d.push(p, &mut out)?;
        }
        d.finish(&mut out)?;
        Ok(out)
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn every_line_ending_and_a_split_crlf_give_the_same_events() {
        let expected = vec![ev(Some("a"), "1\n2"), ev(None, "3")];
        for body in [
            "event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n",
            "event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n",
            "event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r",
        ] {
            assert_eq!(decode(&[body.as_bytes()]).unwrap(), expected, "{body:?}");
            let bytes = body.as_bytes();
            for cut in 0..bytes.len() {
                let (a, b) = bytes.split_at(cut);
                assert_eq!(decode(&[a, b]).unwrap(), expected, "{body:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn comments_and_events_without_data_are_skipped() {
        let out = decode(&[b": keep-alive\n\nevent: ping\n\ndata:x\n\n"]).unwrap();
        assert_eq!(out, vec![ev(None, "x")]);
    }

    #[test]
    fn a_final_event_without_a_blank_line_is_kept() {
        assert_eq!(decode(&[b"data: last"]).unwrap(), vec![ev(None, "last")]);
    }

    #[test]
    fn a_multibyte_character_split_across_pieces_survives() {
        let body = "data: 12 × 7\n\n".as_bytes();
        let cut = body.iter().position(|&b| b == 0xC3).unwrap() + 1;
        let (a, b) = body.split_at(cut);
        assert_eq!(decode(&[a, b]).unwrap(), vec![ev(None, "12 × 7")]);
    }

    #[test]
    fn invalid_utf8_and_oversized_lines_are_errors() {
        assert_eq!(decode(&[b"data: \xff\xfe\n\n"]), Err(SseError::NotUtf8));
        let mut d = SseDecoder::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert_eq!(d.push(&big, &mut Vec::new()), Err(SseError::TooLarge));
    }
}
