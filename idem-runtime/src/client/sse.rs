//! Server-sent events: the WHATWG `text/event-stream` rules, fed chunk by
//! chunk, with bounded memory.
//!
//! Lines end with CRLF, LF or CR, and a CRLF split between two chunks is one
//! line end. A line starting with `:` is a comment. `field: value` sets a
//! field (one leading space of the value dropped); a line without a colon
//! is a field with an empty value. An empty line dispatches the event when
//! it has data. `data` lines are joined with `\n`; `id` (without NUL) sets
//! the last event id, which later events keep; `retry` (ASCII digits only)
//! sets the reconnection delay. A leading byte-order mark is skipped.
//! Unknown fields are ignored.
//!
//! A hostile stream cannot make the decoder allocate without bound: a line
//! longer than [`Limits::max_line`] or an event whose data outgrows
//! [`Limits::max_event`] is an error, reported before the bytes are kept.

use std::time::Duration;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event` field, or `message` when none was given.
    pub event: String,
    /// The `data` lines, joined with `\n`.
    pub data: String,
    /// The last event id seen on the stream, if any.
    pub id: Option<String>,
    /// The reconnection delay the server asked for, if this event set one.
    pub retry: Option<Duration>,
}

/// Bounds on what the decoder keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest line, in bytes (default 1 MiB).
    pub max_line: usize,
    /// The most data one event may carry, in bytes (default 8 MiB).
    pub max_event: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 1 << 20,
            max_event: 8 << 20,
        }
    }
}

/// A stream that broke a bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line grew past the limit without ending.
    #[error("an event-stream line is longer than {limit} bytes")]
    LineTooLong {
        /// The bound.
        limit: usize,
    },
    /// An event's data grew past the limit before it was dispatched.
    #[error("an event's data is longer than {limit} bytes")]
    EventTooLarge {
        /// The bound.
        limit: usize,
    },
}

/// The incremental decoder.
#[derive(Debug, Default)]
pub struct Decoder {
    limits: Limits,
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a leading LF is part of that end.
    after_cr: bool,
    /// Nothing decoded yet: a byte-order mark may come.
    at_start: bool,
    event: Option<String>,
    data: String,
    /// Whether a `data` field was seen since the last dispatch.
    has_data: bool,
    last_id: Option<String>,
    retry: Option<Duration>,
}

impl Decoder {
    /// A decoder with `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            at_start: true,
            ..Decoder::default()
        }
    }

    /// The last event id seen, to send as `Last-Event-ID` on a reconnect.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Decodes `chunk`, appending every event it completes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&chunk[..end])?;
            let mut next = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            chunk = &chunk[next..];
        }
        self.extend_line(chunk)
    }

    /// The stream ended. An event without its closing empty line is not
    /// dispatched, as the rules say.
    pub fn finish(&mut self) {
        self.line.clear();
        self.reset_event();
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.limits.max_line {
            return Err(SseError::LineTooLong {
                limit: self.limits.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn reset_event(&mut self) {
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.retry = None;
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        let mut line = line;
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = line.strip_prefix("\u{feff}".as_bytes()) {
                line = rest;
            }
        }
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push(Event {
                    event: self.event.take().unwrap_or_else(|| "message".to_owned()),
                    data,
                    id: self.last_id.clone(),
                    retry: self.retry,
                });
            }
            self.reset_event();
            return Ok(());
        }
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event = Some(value.into_owned()),
            b"data" => {
                if self.data.len() + value.len() + 1 > self.limits.max_event {
                    return Err(SseError::EventTooLarge {
                        limit: self.limits.max_event,
                    });
                }
                self.data.push_str(&value);
                self.data.push('\n');
                self.has_data = true;
            }
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<Event> {
        let mut decoder = Decoder::new(Limits::default());
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk, &mut out).unwrap();
        }
        decoder.finish();
        out
    }

    fn data(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn comments_multi_line_data_and_mixed_line_ends() {
        let events =
            decode(&[b"\xef\xbb\xbf: hello\r\ndata: one\rdata:two\n\nevent: done\r\ndata\r\n\r\n"]);
        assert_eq!(data(&events), ["one\ntwo", ""]);
        assert_eq!(events[0].event, "message");
        assert_eq!(events[1].event, "done");
    }

    #[test]
    fn events_split_anywhere_decode_the_same() {
        let stream: &[u8] =
            b"id: 7\r\nretry: 1500\r\ndata: {\"a\": \"\xc3\xa9\"}\r\n\r\ndata: [DONE]\r\r";
        let whole = decode(&[stream]);
        assert_eq!(data(&whole), ["{\"a\": \"é\"}", "[DONE]"]);
        assert_eq!(whole[0].id.as_deref(), Some("7"));
        assert_eq!(whole[0].retry, Some(Duration::from_millis(1500)));
        // The id is kept by later events; retry is per event.
        assert_eq!(whole[1].id.as_deref(), Some("7"));
        assert_eq!(whole[1].retry, None);
        for cut in 0..stream.len() {
            assert_eq!(
                decode(&[&stream[..cut], &stream[cut..]]),
                whole,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(decode(&bytes), whole);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched_and_bad_fields_are_ignored() {
        let events = decode(&[b"retry: 1x\nid: a\0b\nfoo: bar\ndata: x\n\ndata: tail"]);
        assert_eq!(data(&events), ["x"]);
        assert_eq!(events[0].retry, None);
        assert_eq!(events[0].id, None);
    }

    #[test]
    fn oversized_lines_and_events_are_refused_before_they_are_kept() {
        let limits = Limits {
            max_line: 64,
            max_event: 100,
        };
        let mut decoder = Decoder::new(limits);
        let mut out = Vec::new();
        let long = vec![b'a'; 65];
        assert_eq!(
            decoder.feed(&long, &mut out),
            Err(SseError::LineTooLong { limit: 64 })
        );
        let mut decoder = Decoder::new(limits);
        let line = format!("data: {}\n", "b".repeat(50));
        decoder.feed(line.as_bytes(), &mut out).unwrap();
        assert_eq!(
            decoder.feed(line.as_bytes(), &mut out),
            Err(SseError::EventTooLarge { limit: 100 })
        );
        assert!(out.is_empty());
    }
}
