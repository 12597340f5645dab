//! A family's entries and totals as the flush script packs them: one MessagePack array of key
//! and amount pairs. A key is a string; an amount an unsigned integer below 2^53 (which the
//! script's Lua numbers hold exactly), or a string of digits for a larger one.
//!
//! What the script accepts is read: an array; keys as strings (or binaries); amounts as
//! non-negative integers in any of MessagePack's integer or float forms (a float only when it
//! holds an integer below 2^53, as the script requires), or as digits.

use std::fmt;

/// The first amount written as a string: 2^53.
const EXACT: u64 = 1 << 53;

/// Appends `entries` to `out`, packed.
pub(crate) fn pack<'a>(entries: impl ExactSizeIterator<Item = (&'a str, u64)>, out: &mut Vec<u8>) {
    array_header(2 * entries.len(), out);
    for (key, amount) in entries {
        string(key.as_bytes(), out);
        if amount < EXACT {
            unsigned(amount, out);
        } else {
            string(amount.to_string().as_bytes(), out);
        }
    }
}

/// The size of `entries` packed, at most.
pub(crate) fn packed_len<'a>(entries: impl Iterator<Item = (&'a str, u64)>) -> usize {
    // The array's header, then each key's header (3 bytes at most for 256 bytes) and bytes,
    // and each amount (9 bytes as a number, 21 as digits).
    5 + entries.map(|(key, _)| 3 + key.len() + 21).sum::<usize>()
}

fn array_header(len: usize, out: &mut Vec<u8>) {
    match len {
        0..=15 => out.push(0x90 | len as u8),
        16..=0xffff => {
            out.push(0xdc);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0xdd);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
}

fn string(bytes: &[u8], out: &mut Vec<u8>) {
    match bytes.len() {
        0..=31 => out.push(0xa0 | bytes.len() as u8),
        32..=0xff => out.extend_from_slice(&[0xd9, bytes.len() as u8]),
        0x100..=0xffff => {
            out.push(0xda);
            out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        }
        _ => {
            out.push(0xdb);
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        }
    }
    out.extend_from_slice(bytes);
}

fn unsigned(n: u64, out: &mut Vec<u8>) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0xcf);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Why packed bytes could not be read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Unreadable(&'static str);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The key and amount pairs packed in `bytes`, in order (a key may come more than once). A key
/// is returned as its bytes: the script does not check that it is UTF-8.
pub(crate) fn unpack(bytes: &[u8]) -> Result<Vec<(&[u8], u64)>, Unreadable> {
    let mut reader = Reader { bytes };
    let len = reader.array_header()?;
    if len % 2 != 0 {
        return Err(Unreadable(
            "an odd number of items, not key and amount pairs",
        ));
    }
    // Every pair takes two bytes at least, so a header cannot ask for more room than that.
    let mut pairs = Vec::with_capacity((len / 2).min(bytes.len() / 2));
    for _ in 0..len / 2 {
        let key = reader.string()?;
        let amount = reader.amount()?;
        pairs.push((key, amount));
    }
    if !reader.bytes.is_empty() {
        return Err(Unreadable("bytes after the array"));
    }
    Ok(pairs)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unreadable> {
        if self.bytes.len() < n {
            return Err(Unreadable("cut short"));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Unreadable> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, Unreadable> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn array_header(&mut self) -> Result<usize, Unreadable> {
        let len = match self.byte()? {
            b @ 0x90..=0x9f => u64::from(b & 0x0f),
            0xdc => self.be(2)?,
            0xdd => self.be(4)?,
            _ => return Err(Unreadable("not an array")),
        };
        usize::try_from(len).map_err(|_| Unreadable("an array too long"))
    }

    /// The length of a string (or binary) whose header starts with `first`, or `None` for
    /// another header.
    fn string_len(&mut self, first: u8) -> Result<Option<usize>, Unreadable> {
        let len = match first {
            b @ 0xa0..=0xbf => u64::from(b & 0x1f),
            0xd9 | 0xc4 => self.be(1)?,
            0xda | 0xc5 => self.be(2)?,
            0xdb | 0xc6 => self.be(4)?,
            _ => return Ok(None),
        };
        usize::try_from(len)
            .map(Some)
            .map_err(|_| Unreadable("a string too long"))
    }

    fn string(&mut self) -> Result<&'a [u8], Unreadable> {
        let first = self.byte()?;
        match self.string_len(first)? {
            Some(len) => self.take(len),
            None => Err(Unreadable("a key that is not a string")),
        }
    }

    fn amount(&mut self) -> Result<u64, Unreadable> {
        let first = self.byte()?;
        if let Some(len) = self.string_len(first)? {
            let digits = self.take(len)?;
            let plain = digits == b"0"
                || (digits.first().is_some_and(|d| (b'1'..=b'9').contains(d))
                    && digits.iter().all(u8::is_ascii_digit));
            return std::str::from_utf8(digits)
                .ok()
                .filter(|_| plain)
                .and_then(|s| s.parse::<u64>().ok())
                .filter(|n| *n <= i64::MAX as u64)
                .ok_or(Unreadable(
                    "an amount string that is not digits up to i64::MAX",
                ));
        }
        let signed = |n: u64, bits: u32| -> Result<u64, Unreadable> {
            // The sign bit of a `bits`-bit integer.
            if n >> (bits - 1) == 1 {
                Err(Unreadable("a negative amount"))
            } else {
                Ok(n)
            }
        };
        let float = |f: f64| -> Result<u64, Unreadable> {
            if (0.0..EXACT as f64).contains(&f) && f.fract() == 0.0 {
                Ok(f as u64)
            } else {
                Err(Unreadable(
                    "a float amount that is not an integer below 2^53",
                ))
            }
        };
        let n = match first {
            b @ 0x00..=0x7f => u64::from(b),
            0xcc => self.be(1)?,
            0xcd => self.be(2)?,
            0xce => self.be(4)?,
            0xcf => self.be(8)?,
            0xd0 => signed(self.be(1)?, 8)?,
            0xd1 => signed(self.be(2)?, 16)?,
            0xd2 => signed(self.be(4)?, 32)?,
            0xd3 => signed(self.be(8)?, 64)?,
            0xca => float(f64::from(f32::from_bits(self.be(4)? as u32)))?,
            0xcb => float(f64::from_bits(self.be(8)?))?,
            _ => return Err(Unreadable("an amount that is not a non-negative integer")),
        };
        if n > i64::MAX as u64 {
            return Err(Unreadable("an amount above i64::MAX"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(entries: &[(&str, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        pack(entries.iter().copied(), &mut out);
        assert!(out.len() <= packed_len(entries.iter().copied()));
        out
    }

    #[test]
    fn what_is_packed_comes_back_in_order() {
        let long = "k".repeat(256);
        let entries = [
            ("a", 0),
            ("b", 0x7f),
            ("c", 0x80),
            ("d", 0x1_0000),
            ("e", 0x1_0000_0000),
            ("f", EXACT - 1),
            ("g", EXACT),
            ("h", i64::MAX as u64),
            (&long[..32], 1),
            (&long, 2),
            ("a", 5),
        ];
        let bytes = |pairs: &[(&str, u64)]| -> Vec<(Vec<u8>, u64)> {
            pairs
                .iter()
                .map(|(k, a)| (k.as_bytes().to_vec(), *a))
                .collect()
        };
        let read = |packed: &[u8]| -> Vec<(Vec<u8>, u64)> {
            let pairs = unpack(packed).unwrap();
            pairs.into_iter().map(|(k, a)| (k.to_vec(), a)).collect()
        };
        assert_eq!(read(&packed(&entries)), bytes(&entries));
        let many: Vec<(String, u64)> = (0..40_000).map(|i| (i.to_string(), i)).collect();
        let many: Vec<(&str, u64)> = many.iter().map(|(k, a)| (k.as_str(), *a)).collect();
        assert_eq!(read(&packed(&many)), bytes(&many));
    }

    #[test]
    fn the_bytes_are_messagepack() {
        assert_eq!(packed(&[("ab", 5)]), [0x92, 0xa2, b'a', b'b', 0x05]);
        assert_eq!(
            packed(&[("a", EXACT)]),
            [
                [0x92, 0xa1, b'a', 0xb0].as_slice(),
                b"9007199254740992".as_slice()
            ]
            .concat()
        );
        // As the script's Lua packs: uint64, str8 and array16.
        let mut lua = vec![0xdc, 0x00, 0x02, 0xd9, 0x01, b'x'];
        lua.extend([0xcf, 0, 0, 0, 0, 0, 0, 0x01, 0x00]);
        assert_eq!(unpack(&lua).unwrap(), [(&b"x"[..], 256)]);
    }

    #[test]
    fn reads_every_form_the_script_accepts() {
        let pairs = |items: &[&[u8]]| -> Vec<u8> {
            let mut out = vec![0x90 | items.len() as u8];
            for item in items {
                out.extend_from_slice(item);
            }
            out
        };
        let five_f64 = [[0xcb].as_slice(), &5.0f64.to_be_bytes()].concat();
        let five_f32 = [[0xca].as_slice(), &5.0f32.to_be_bytes()].concat();
        let bytes = pairs(&[
            &[0xc4, 1, b'a'],
            &[0xd3, 0, 0, 0, 0, 0, 0, 0, 7],
            &[0xa1, b'b'],
            &five_f64,
            &[0xa1, b'c'],
            &five_f32,
            &[0xa2, 0xff, 0xfe],
            &[0xd0, 0x7f],
            &[0xa1, b'd'],
            &[0xc4, 2, b'1', b'2'],
        ]);
        assert_eq!(
            unpack(&bytes).unwrap(),
            [
                (&b"a"[..], 7),
                (b"b", 5),
                (b"c", 5),
                (&[0xff, 0xfe], 0x7f),
                (b"d", 12)
            ]
        );
        let half = [[0xcb].as_slice(), &0.5f64.to_be_bytes()].concat();
        let big = [[0xcb].as_slice(), &9007199254740992.0f64.to_be_bytes()].concat();
        for amount in [&[0xd0, 0xff][..], &[0xff], &half, &big] {
            assert!(
                unpack(&pairs(&[&[0xa1, b'a'], amount])).is_err(),
                "{amount:?}"
            );
        }
    }

    #[test]
    fn refuses_what_is_not_pairs_of_keys_and_amounts() {
        let refused: [&[u8]; 10] = [
            b"",
            &[0x80],
            &[0x91, 0xa1, b'a'],
            &[0x92, 0xa1, b'a'],
            &[0x92, 0x01, 0x01],
            &[0x92, 0xa1, b'a', 0xff],
            &[0x92, 0xa1, b'a', 0xcb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0],
            &[0x92, 0xa2, b'0', b'1', 0xa2, b'0', b'1'],
            &[0x92, 0xa1, b'a', 0x01, 0x01],
            &[0x92, 0xa1, b'a', 0xe0],
        ];
        for bytes in refused {
            assert!(unpack(bytes).is_err(), "{bytes:?}");
        }
        let too_big = [[0x92, 0xa1, b'a', 0xcf].as_slice(), &u64::MAX.to_be_bytes()].concat();
        assert!(unpack(&too_big).is_err());
        // A header that claims more than there is.
        assert!(unpack(&[0xdd, 0xff, 0xff, 0xff, 0xfe]).is_err());
    }
}
