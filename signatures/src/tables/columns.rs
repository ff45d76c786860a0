//! Arrow columns built by hand where the generic builders cost too much per row (the packets
//! table is built once per packet), and the small helpers every table shares.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, ArrowPrimitiveType, PrimitiveArray, StringArray};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};

pub(super) fn string_lists<'a>(items: impl Iterator<Item = Vec<&'a str>>) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new("item", DataType::Utf8, false)));
    for v in items {
        for s in v {
            b.values().append_value(s);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

pub(super) fn opt_str(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

// The packet batch is built once per packet, so its columns are filled without Arrow's
// per-element builders and `FromIterator<Option<_>>`, which branch and grow buffers on every value.

/// A string column with a null where `f` gives None (no validity buffer when nothing is null).
pub(super) fn str_column<'a>(n: usize, f: impl Fn(usize) -> Option<&'a str>) -> StringArray {
    let mut values: Vec<u8> = Vec::new();
    let offsets = OffsetBuffer::<i32>::from_lengths((0..n).map(|i| {
        let s = f(i).unwrap_or("");
        values.extend_from_slice(s.as_bytes());
        s.len()
    }));
    let valid = BooleanBuffer::collect_bool(n, |i| f(i).is_some());
    let nulls = (valid.count_set_bits() < n).then(|| NullBuffer::new(valid));
    StringArray::new(offsets, Buffer::from_vec(values), nulls)
}

/// Names up to this long are copied as one fixed-size block (see `names_column`).
const NAME_BLOCK: usize = 32;

/// Each name zero-padded to a `NAME_BLOCK`-byte block, or None if one is longer.
fn name_blocks<'a>(names: impl Iterator<Item = &'a str>) -> Option<Vec<[u8; NAME_BLOCK]>> {
    names
        .map(|s| {
            let mut b = [0u8; NAME_BLOCK];
            b.get_mut(..s.len())?.copy_from_slice(s.as_bytes());
            Some(b)
        })
        .collect()
}

/// A string column whose every value is one of a few `names`: `index(i)` is row i's, or None for
/// a null (no validity buffer when nothing is null). The same as `str_column`, but each value is
/// copied as one fixed-size block, overwritten in part by the next: a copy of a variable length
/// is a call to `memcpy` per row.
pub(super) fn names_column(n: usize, names: &[&str], index: impl Fn(usize) -> Option<usize>) -> StringArray {
    let Some(blocks) = name_blocks(names.iter().copied()) else {
        return str_column(n, |i| index(i).map(|k| names[k]));
    };
    let total: usize = (0..n).map(|i| index(i).map_or(0, |k| names[k].len())).sum();
    i32::try_from(total).expect("offset overflow");
    let mut values = vec![0u8; total + NAME_BLOCK];
    let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
    offsets.push(0);
    let mut end = 0;
    let mut null_count = 0;
    for i in 0..n {
        match index(i) {
            Some(k) => {
                values[end..end + NAME_BLOCK].copy_from_slice(&blocks[k]);
                end += names[k].len();
            }
            None => null_count += 1,
        }
        offsets.push(end as i32);
    }
    values.truncate(total);
    let nulls = (null_count > 0).then(|| NullBuffer::new(BooleanBuffer::collect_bool(n, |i| index(i).is_some())));
    StringArray::new(OffsetBuffer::new(ScalarBuffer::from(offsets)), Buffer::from_vec(values), nulls)
}

/// A bit-packed copy of `v`, the same buffer as `BooleanBuffer::collect_bool(v.len(), |i| v[i])`
/// (whole 64-bit words, cut to the bytes the bits need, zeros after the last bit) at a fraction
/// of the instructions: eight bools (bytes of 0 or 1) become one byte by one multiplication.
pub(super) fn pack_bools(v: &[bool]) -> BooleanBuffer {
    // Byte j of the product's top byte collects byte j of x as its bit j (no carries: each
    // partial product lands on its own bit).
    let byte = |c: &[bool]| -> u64 {
        let c: [bool; 8] = c.try_into().expect("eight bools");
        u64::from_le_bytes(c.map(u8::from)).wrapping_mul(0x0102_0408_1020_4080) >> 56
    };
    let mut words: Vec<u64> = Vec::with_capacity(v.len().div_ceil(64));
    let mut chunks = v.chunks_exact(64);
    for c in &mut chunks {
        let mut w = 0u64;
        for (j, b) in c.chunks_exact(8).enumerate() {
            w |= byte(b) << (8 * j);
        }
        words.push(w);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = 0u64;
        for (j, &b) in rest.iter().enumerate() {
            w |= u64::from(b) << j;
        }
        words.push(w);
    }
    let mut buffer = MutableBuffer::from(words);
    buffer.truncate(v.len().div_ceil(8));
    BooleanBuffer::new(buffer.into(), 0, v.len())
}

/// A nullable column being filled: values (the default in a null's slot, as Arrow's builders
/// do) and validity.
pub(super) struct OptColumn<T: ArrowPrimitiveType> {
    pub(super) values: Vec<T::Native>,
    pub(super) valid: Vec<bool>,
}

impl<T: ArrowPrimitiveType> OptColumn<T> {
    pub(super) fn new() -> Self {
        OptColumn { values: Vec::new(), valid: Vec::new() }
    }

    pub(super) fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
        self.valid.reserve(n);
    }

    pub(super) fn extend<R>(&mut self, rows: &[R], f: impl Fn(&R) -> Option<T::Native>) {
        self.values.extend(rows.iter().map(|r| f(r).unwrap_or_default()));
        self.valid.extend(rows.iter().map(|r| f(r).is_some()));
    }

    pub(super) fn finish(&mut self) -> PrimitiveArray<T> {
        let values = ScalarBuffer::from(std::mem::take(&mut self.values));
        let valid = std::mem::take(&mut self.valid);
        PrimitiveArray::new(values, Some(NullBuffer::new(pack_bools(&valid))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_bools_equal_collect_bool() {
        let mut x: u64 = 1;
        for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 1000, 65_536, 65_537] {
            for density in [0u64, 1, 50, 99, 100] {
                let v: Vec<bool> = (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (x >> 33) % 100 < density
                    })
                    .collect();
                let want = BooleanBuffer::collect_bool(n, |i| v[i]);
                let got = pack_bools(&v);
                assert_eq!(got.inner().as_slice(), want.inner().as_slice(), "{n} {density}");
                assert_eq!((got.len(), got.offset()), (want.len(), want.offset()));
            }
        }
    }
}
