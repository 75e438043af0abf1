//! The framing rule both frame sets share (`length:u32 | type:u8 | body`): writing a frame with
//! its length patched in afterwards, and reading a header before the body is all there.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::WireError;
use crate::frame::HEADER_LEN;

/// Appends a frame of type `ty` whose body `body` writes, plus `trailing` bytes the caller
/// sends after it (a message section shared between copies; 0 for a whole frame). On error
/// `out` is left as it was.
pub(crate) fn encode_frame(
    out: &mut BytesMut,
    ty: u8,
    trailing: usize,
    body: impl FnOnce(&mut BytesMut) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = out.len();
    out.put_u32(0);
    out.put_u8(ty);
    let len = body(out).and_then(|()| {
        let len = (out.len() - start - 4).saturating_add(trailing);
        u32::try_from(len).map_err(|_| WireError::TooLong { field: "frame", len, max: u32::MAX as usize })
    });
    match len {
        Ok(len) => {
            out[start..start + 4].copy_from_slice(&len.to_be_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// Reads a frame header: `Ok(Some((type, length)))` once the whole frame is in `buf`,
/// `Ok(None)` while more bytes are needed. Size and type (`known`) are checked as soon as the
/// header is there, so an oversized or unknown frame fails before its body is buffered.
pub(crate) fn peek<T>(
    buf: &[u8],
    max_frame: usize,
    known: impl FnOnce(u8) -> Option<T>,
) -> Result<Option<(T, usize)>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 {
        return Err(WireError::EmptyFrame);
    }
    if len > max_frame {
        return Err(WireError::FrameTooLarge { len, max: max_frame });
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let ty = known(buf[4]).ok_or(WireError::UnknownFrameType(buf[4]))?;
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((ty, len)))
}

/// Splits the frame of `len` bytes (type byte and body) off the front of `buf` and returns its
/// body, without copying.
pub(crate) fn split_body(buf: &mut BytesMut, len: usize) -> Bytes {
    let mut frame = buf.split_to(4 + len);
    frame.advance(HEADER_LEN);
    frame.freeze()
}
