//! HPACK decoding (RFC 7541) of the header blocks a client sends: integers,
//! strings (Huffman via `httlib-huffman`), the static table and the dynamic
//! table with its size limit. Every read is bounds-checked: a malformed
//! block is an error, never a panic (the shim is built with panic = "abort",
//! and the HPACK crates tried first either rebuilt their Huffman tables per
//! string, 156 µs a request, or indexed past the end of short input).

use std::collections::VecDeque;

/// Why a header block could not be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("block ends inside a field")]
    Truncated,
    #[error("integer too large")]
    Overflow,
    #[error("index {0} is in neither table")]
    Index(usize),
    #[error("dynamic table size {0} over the limit {1}")]
    TableSize(usize, usize),
    #[error("dynamic table size update after a field")]
    LateSizeUpdate,
    #[error("invalid Huffman string")]
    Huffman,
}

/// RFC 7541 Appendix A.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// RFC 7541 §4.1: an entry's size is its name and value plus 32.
const ENTRY_OVERHEAD: usize = 32;

/// The decoding side of one connection's HPACK context.
pub struct Decoder {
    /// Newest first, as indexed.
    dynamic: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
    /// What the peer may raise `max_size` to (our SETTINGS_HEADER_TABLE_SIZE).
    limit: usize,
}

impl Decoder {
    pub fn new(limit: usize) -> Self {
        Self {
            dynamic: VecDeque::new(),
            size: 0,
            max_size: limit,
            limit,
        }
    }

    /// Decodes one whole header block, calling `field` for each field in
    /// order.
    pub fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut fields_seen = false;
        while let Some(&first) = block.first() {
            let used = if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let (index, used) = integer(block, 7)?;
                let (name, value) = self.get(index)?;
                field(name, value);
                used
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing (§6.2.1).
                let (name, value, used) = self.literal(block, 6)?;
                field(&name, &value);
                self.insert(name, value);
                used
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the fields.
                if fields_seen {
                    return Err(HpackError::LateSizeUpdate);
                }
                let (size, used) = integer(block, 5)?;
                if size > self.limit {
                    return Err(HpackError::TableSize(size, self.limit));
                }
                self.max_size = size;
                self.evict();
                block = &block[used..];
                continue;
            } else {
                // Literal without indexing or never indexed (§6.2.2, §6.2.3).
                let (name, value, used) = self.literal(block, 4)?;
                field(&name, &value);
                used
            };
            fields_seen = true;
            block = &block[used..];
        }
        Ok(())
    }

    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index(0)),
            i if i <= STATIC.len() => Ok(STATIC[i - 1]),
            i => self
                .dynamic
                .get(i - STATIC.len() - 1)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError::Index(i)),
        }
    }

    /// A literal field: name by index or as a string, then the value.
    fn literal(&self, block: &[u8], prefix: u8) -> Result<(Vec<u8>, Vec<u8>, usize), HpackError> {
        let (index, mut used) = integer(block, prefix)?;
        let name = if index == 0 {
            let (name, n) = string(&block[used..])?;
            used += n;
            name
        } else {
            self.get(index)?.0.to_vec()
        };
        let (value, n) = string(&block[used..])?;
        Ok((name, value, used + n))
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // §4.4: an entry larger than the table empties it.
            self.dynamic.clear();
            self.size = 0;
            return;
        }
        self.dynamic.push_front((name, value));
        self.size += size;
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max_size {
            let Some((n, v)) = self.dynamic.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

/// An integer with an N-bit prefix (§5.1): its value and the bytes it took.
/// Values past 2^32 are refused (no field or table is that large).
fn integer(buf: &[u8], prefix: u8) -> Result<(usize, usize), HpackError> {
    let first = *buf.first().ok_or(HpackError::Truncated)?;
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok((value, 1));
    }
    for (i, &b) in buf[1..].iter().enumerate() {
        let shift = 7 * i;
        if shift > 28 {
            return Err(HpackError::Overflow);
        }
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((value, i + 2));
        }
    }
    Err(HpackError::Truncated)
}

/// A string literal (§5.2): its bytes and the bytes it took.
fn string(buf: &[u8]) -> Result<(Vec<u8>, usize), HpackError> {
    let huffman = buf.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, used) = integer(buf, 7)?;
    let end = used.checked_add(len).ok_or(HpackError::Overflow)?;
    let data = buf.get(used..end).ok_or(HpackError::Truncated)?;
    if !huffman {
        return Ok((data.to_vec(), end));
    }
    // The shortest code is 5 bits: at most 8/5 bytes out per byte in.
    let mut out = Vec::with_capacity(len + len / 2 + 1);
    httlib_huffman::decode(data, &mut out, httlib_huffman::DecoderSpeed::FourBits)
        .map_err(|_| HpackError::Huffman)?;
    Ok((out, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn fields(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })
        .expect("decode");
        out
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 (plain) and C.4 (Huffman): three requests on one
    /// connection, the later ones indexing the dynamic table.
    #[test]
    fn rfc_7541_request_examples() {
        for blocks in [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ] {
            let mut d = Decoder::new(4096);
            let base = [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ];
            assert_eq!(fields(&mut d, &hex(blocks[0])), pairs(&base));
            let mut second = base.to_vec();
            second.push(("cache-control", "no-cache"));
            assert_eq!(fields(&mut d, &hex(blocks[1])), pairs(&second));
            assert_eq!(
                fields(&mut d, &hex(blocks[2])),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    (":authority", "www.example.com"),
                    ("custom-key", "custom-value"),
                ])
            );
            // §C.3.3 / C.4.3: 164 bytes in the table, three entries.
            assert_eq!((d.size, d.dynamic.len()), (164, 3));
        }
    }

    #[test]
    fn the_table_evicts_oldest_first_and_obeys_size_updates() {
        let mut d = Decoder::new(100);
        // Two 32 + 2 byte entries fit in 100; the third evicts the first.
        for block in ["4001 6101 31", "4001 6201 32", "4001 6301 33"] {
            d.decode(&hex(block), |_, _| {}).expect("decode");
        }
        assert_eq!(d.dynamic.len(), 2);
        assert_eq!(d.get(62), Ok((&b"c"[..], &b"3"[..])));
        assert_eq!(d.get(63), Ok((&b"b"[..], &b"2"[..])));
        assert_eq!(d.get(64), Err(HpackError::Index(64)));
        // Size update to 40 (one entry), then past the limit.
        d.decode(&hex("3f09 82"), |_, _| {}).expect("shrink");
        assert_eq!(d.dynamic.len(), 1);
        assert_eq!(
            d.decode(&hex("3f46"), |_, _| {}),
            Err(HpackError::TableSize(101, 100))
        );
        assert_eq!(
            d.decode(&hex("82 20"), |_, _| {}),
            Err(HpackError::LateSizeUpdate)
        );
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let mut d = Decoder::new(4096);
        for (block, want) in [
            ("80", HpackError::Index(0)),
            ("ff 80 01", HpackError::Index(255)),
            ("1f", HpackError::Truncated),
            ("ff ff ff ff ff ff ff", HpackError::Overflow),
            ("40 05 61", HpackError::Truncated),
            ("00 01 61 81 ff", HpackError::Huffman),
        ] {
            assert_eq!(d.decode(&hex(block), |_, _| {}), Err(want), "{block}");
        }
    }
}
