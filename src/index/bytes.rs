//! A bounds-checked little-endian cursor over encoded bytes (the graph image, the index
//! journal's records): every read checks the length against what is left and returns an error
//! naming the offset, never panics.

/// A cursor over `bytes`, at `at`.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub(crate) fn take(&mut self, length: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(length).filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("truncated: {length} bytes wanted at offset {}, {} held", self.at, self.bytes.len()));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// Fails unless `count` items of `each` bytes fit in what is left.
    pub(crate) fn ensure(&self, count: usize, each: usize) -> Result<(), String> {
        let left = self.bytes.len() - self.at;
        match count.checked_mul(each) {
            Some(needed) if needed <= left => Ok(()),
            _ => Err(format!("truncated: {count} items of {each} bytes announced at offset {}, {left} left", self.at)),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_le_bytes(self.array()?))
    }
}
