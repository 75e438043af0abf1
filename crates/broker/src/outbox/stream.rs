//! The writer of a stream connection (TCP): takes a batch from the outbox, encodes it, and
//! writes it with vectored writes until the connection closes. The vectored writing is shared
//! with the broker links' queues ([`write_chunks`]).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::encode::encode_batch;
use super::queue::{Item, MAX_BATCH};
use super::{Outbox, Turn};

/// I/O slices per vectored write (Linux allows 1024).
const SLICES_PER_WRITE: usize = 256;

/// Drains `outbox` into a stream until the connection closes. Owns the write half.
pub async fn write_stream<W: AsyncWrite + Unpin>(mut writer: W, outbox: Arc<Outbox>) {
    let mut batch = VecDeque::new();
    // Grows with the batches written; an idle subscriber holds none.
    let mut scratch = BytesMut::new();
    let mut chunks = VecDeque::new();
    loop {
        match outbox.next_batch(&mut batch).await {
            Turn::Write => {}
            Turn::Close(closing) => {
                if writer.write_all(&closing).await.is_ok() {
                    let _ = writer.flush().await;
                }
                break;
            }
            Turn::Stop => break,
        }
        let charged: usize = batch.iter().map(Item::charged).sum();
        let taken = batch.len();
        let (delivered, bytes) = encode_batch(&mut batch, &mut scratch, &mut chunks);
        // A connection cut (by the queue budget, or its peer gone) stops even mid-write: a
        // client that never reads would otherwise hold this batch forever.
        let written = tokio::select! {
            // TLS holds the last record until flushed; on plain TCP the flush costs nothing.
            result = async {
                write_chunks_with(&mut writer, &mut chunks, || outbox.drained.notify_waiters()).await?;
                writer.flush().await
            } => result.is_ok(),
            () = outbox.done.cancelled() => false,
        };
        outbox.batch_done(charged, written.then_some((delivered, bytes)));
        if !written {
            break;
        }
        if taken == MAX_BATCH {
            // More is queued: the tasks woken meanwhile on this worker go first.
            tokio::task::yield_now().await;
        }
    }
    let _ = writer.shutdown().await;
    outbox.writer_gone();
}

/// Writes every chunk with vectored writes, advancing past what each write took. Shared by
/// client outboxes and broker-link queues.
pub(crate) async fn write_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    write_chunks_with(writer, chunks, || ()).await
}

/// [`write_chunks`], calling `progress` after every write that took bytes: a client reading a
/// large batch slowly is still reading.
async fn write_chunks_with<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &mut VecDeque<Bytes>,
    mut progress: impl FnMut(),
) -> std::io::Result<()> {
    while !chunks.is_empty() {
        let n = {
            let slices: Vec<IoSlice<'_>> = chunks.iter().take(SLICES_PER_WRITE).map(|c| IoSlice::new(c)).collect();
            writer.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        progress();
        let mut left = n;
        while left > 0 {
            let Some(front) = chunks.front_mut() else { break };
            if front.len() <= left {
                left -= front.len();
                chunks.pop_front();
            } else {
                bytes::Buf::advance(front, left);
                left = 0;
            }
        }
    }
    Ok(())
}
