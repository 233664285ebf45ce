//! Rows in PostgreSQL's binary `COPY` format, for appending many rows in one `COPY … FROM STDIN`
//! (<https://www.postgresql.org/docs/current/sql-copy.html>, "Binary Format").
//!
//! The format is a fixed header, then each row as its field count followed by each field as a big-endian
//! length (-1 for NULL) and the value in the type's binary form, then a trailer. Values must match their
//! column's type exactly (`int8` is 8 bytes, `int4` 4, `text` its UTF-8 bytes); PostgreSQL checks every
//! field and refuses the whole `COPY` on a mismatch, so nothing half-written is ever stored.

/// The signature, flags (no OIDs) and header extension length (none) that begin the data.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The field count that ends the data.
const TRAILER: i16 = -1;

/// A buffer of rows being encoded.
pub(super) struct BinaryRows {
    buffer: Vec<u8>,
    /// A field too long for the format's 32-bit length was met: the rows cannot be sent.
    too_long: bool,
}

impl BinaryRows {
    /// An empty set of rows, with room for about `bytes` of data.
    pub(super) fn with_capacity(bytes: usize) -> Self {
        let mut buffer = Vec::with_capacity(HEADER.len() + bytes + 2);
        buffer.extend_from_slice(HEADER);
        Self { buffer, too_long: false }
    }

    /// Starts a row of `fields` fields; exactly that many field calls must follow.
    pub(super) fn row(&mut self, fields: i16) {
        self.buffer.extend_from_slice(&fields.to_be_bytes());
    }

    pub(super) fn text(&mut self, value: &str) {
        match i32::try_from(value.len()) {
            Ok(length) => {
                self.buffer.extend_from_slice(&length.to_be_bytes());
                self.buffer.extend_from_slice(value.as_bytes());
            }
            Err(_) => self.too_long = true,
        }
    }

    pub(super) fn optional_text(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.text(value),
            None => self.null(),
        }
    }

    pub(super) fn int8(&mut self, value: i64) {
        self.buffer.extend_from_slice(&8i32.to_be_bytes());
        self.buffer.extend_from_slice(&value.to_be_bytes());
    }

    pub(super) fn optional_int8(&mut self, value: Option<i64>) {
        match value {
            Some(value) => self.int8(value),
            None => self.null(),
        }
    }

    pub(super) fn optional_int4(&mut self, value: Option<i32>) {
        match value {
            Some(value) => {
                self.buffer.extend_from_slice(&4i32.to_be_bytes());
                self.buffer.extend_from_slice(&value.to_be_bytes());
            }
            None => self.null(),
        }
    }

    fn null(&mut self) {
        self.buffer.extend_from_slice(&(-1i32).to_be_bytes());
    }

    /// The data to send, or `None` when a field was too long to encode.
    pub(super) fn finish(mut self) -> Option<Vec<u8>> {
        if self.too_long {
            return None;
        }
        self.buffer.extend_from_slice(&TRAILER.to_be_bytes());
        Some(self.buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_framed_as_the_format_defines() {
        let mut rows = BinaryRows::with_capacity(64);
        rows.row(4);
        rows.text("ab");
        rows.optional_text(None);
        rows.int8(-2);
        rows.optional_int4(Some(7));
        let data = rows.finish().expect("short fields");
        let mut expected = b"PGCOPY\n\xff\r\n\0".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[0, 4]);
        expected.extend_from_slice(&[0, 0, 0, 2, b'a', b'b']);
        expected.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        expected.extend_from_slice(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        expected.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 7]);
        expected.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(data, expected);
    }
}
