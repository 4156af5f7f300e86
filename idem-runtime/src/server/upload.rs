//! Request bodies handed to the handler as they arrive, for operations
//! that take a file (`application/octet-stream`, `format: binary`): an
//! upload never sits in memory whole.
//!
//! A route without a key passes the connection's body through, counted
//! against the cap as it is read. A keyed route must fingerprint the body
//! before it claims the key, so the body is first written to an unlinked
//! temporary file while its SHA-256 is taken, under the same cap; the
//! handler then reads the file. Either way a body over the cap is refused:
//! at once when its `Content-Length` says so, else when the cap is passed.
//!
//! A streamed upload's fingerprint covers the method, the stored path and
//! the SHA-256 of the body, where an in-memory body's covers the body
//! itself: the same operation always fingerprints one way.

use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

use super::error::IdempotencyError;

/// The size of each read from a spooled upload.
const CHUNK: usize = 64 * 1024;

/// An uploaded body, read chunk by chunk under its cap.
///
/// ```no_run
/// # async fn handle(mut upload: idem_runtime::server::support::Upload) -> Result<(), idem_runtime::server::support::UploadError> {
/// let mut digest = 0u64;
/// while let Some(chunk) = upload.chunk().await? {
///     digest += chunk.len() as u64; // write it somewhere instead
/// }
/// # Ok(()) }
/// ```
pub struct Upload {
    source: Source,
    limit: usize,
    received: u64,
}

enum Source {
    /// The connection's body, not yet read.
    Body(Body),
    /// A temporary file holding the whole body, and what is left of it.
    File(tokio::fs::File, u64),
    Done,
}

/// Why an upload could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The body passed the route's cap.
    #[error("the upload passes the cap of {limit} bytes")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The connection or the temporary file failed.
    #[error("the upload could not be read: {0}")]
    Read(String),
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Body(_) => "connection",
            Source::File(..) => "spooled",
            Source::Done => "done",
        };
        f.debug_struct("Upload")
            .field("source", &source)
            .field("received", &self.received)
            .field("limit", &self.limit)
            .finish()
    }
}

impl Upload {
    /// The connection's body, read as the handler asks, up to `limit` bytes.
    pub(crate) fn streamed(body: Body, limit: usize) -> Self {
        Upload {
            source: Source::Body(body),
            limit,
            received: 0,
        }
    }

    /// No body.
    pub fn empty() -> Self {
        Upload {
            source: Source::Done,
            limit: 0,
            received: 0,
        }
    }

    /// Whether a body is still to come (`false` for a request without
    /// one, or once it is read).
    pub fn is_pending(&self) -> bool {
        match &self.source {
            Source::Body(body) => !axum::body::HttpBody::is_end_stream(body),
            Source::File(_, left) => *left > 0,
            Source::Done => false,
        }
    }

    /// The bytes read so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The whole length, when known before reading (a keyed route's
    /// upload, which was spooled to be fingerprinted).
    pub fn len_hint(&self) -> Option<u64> {
        match &self.source {
            Source::File(_, left) => Some(self.received + left),
            Source::Done => Some(self.received),
            Source::Body(_) => None,
        }
    }

    /// The next chunk; `None` at the end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, UploadError> {
        let chunk = match &mut self.source {
            Source::Done => return Ok(None),
            Source::File(file, left) => {
                if *left == 0 {
                    self.source = Source::Done;
                    return Ok(None);
                }
                let want = CHUNK.min(usize::try_from(*left).unwrap_or(CHUNK));
                let mut buf = vec![0; want];
                let n = file
                    .read(&mut buf)
                    .await
                    .map_err(|e| UploadError::Read(e.to_string()))?;
                if n == 0 {
                    return Err(UploadError::Read("the spooled upload ended early".into()));
                }
                buf.truncate(n);
                *left -= n as u64;
                Bytes::from(buf)
            }
            Source::Body(body) => loop {
                match body.frame().await {
                    None => {
                        self.source = Source::Done;
                        return Ok(None);
                    }
                    Some(Err(e)) => return Err(UploadError::Read(e.to_string())),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data()
                            && !data.is_empty()
                        {
                            break data;
                        }
                    }
                }
            },
        };
        self.received += chunk.len() as u64;
        if self.received > self.limit as u64 {
            self.source = Source::Done;
            return Err(UploadError::TooLarge { limit: self.limit });
        }
        Ok(Some(chunk))
    }

    /// The rest of the body in memory, for a small upload; still bounded by
    /// the cap.
    pub async fn bytes(mut self) -> Result<Bytes, UploadError> {
        let mut out = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(out))
    }
}

impl Upload {
    /// An upload spooled to `file` ([`spool`]), `len` bytes under `limit`.
    pub(crate) fn spooled(file: tokio::fs::File, len: u64, limit: usize) -> Self {
        Upload {
            source: Source::File(file, len),
            limit,
            received: 0,
        }
    }
}

/// `body` written to an unlinked temporary file, up to `limit` bytes: the
/// file (rewound), the length and the SHA-256 of the bytes.
pub(crate) async fn spool(
    mut body: Body,
    limit: usize,
) -> Result<(tokio::fs::File, u64, [u8; 32]), IdempotencyError> {
    let unreadable = |_| IdempotencyError::BodyUnreadable;
    let file = tempfile::tempfile().map_err(|e| {
        tracing::error!(error = %e, "no temporary file for an upload");
        IdempotencyError::BodyUnreadable
    })?;
    let mut file = tokio::io::BufWriter::with_capacity(CHUNK, tokio::fs::File::from_std(file));
    let mut hasher = Sha256::new();
    let mut len: u64 = 0;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame
            .map_err(|_| IdempotencyError::BodyUnreadable)?
            .into_data()
        else {
            continue;
        };
        len += data.len() as u64;
        if len > limit as u64 {
            return Err(IdempotencyError::BodyTooLarge { limit });
        }
        hasher.update(&data);
        file.write_all(&data).await.map_err(unreadable)?;
    }
    file.flush().await.map_err(unreadable)?;
    let mut file = file.into_inner();
    file.rewind().await.map_err(unreadable)?;
    Ok((file, len, hasher.finalize().into()))
}
