//! A zero-copy, bounds-checked perf.data reader. Every offset and size from
//! the file is checked against the file's length before use.

use super::{
    attr::PerfEventAttr, Bytes, EventAttr, Features, FormatError, Record, HEADER_SIZE, MAGIC,
};

/// A parsed perf.data file, borrowing the file's bytes.
#[derive(Debug)]
pub struct PerfDataFile<'a> {
    bytes: &'a [u8],
    pub attrs: Vec<EventAttr>,
    pub features: Features,
    data_start: u64,
    data_end: u64,
    sample_type: u64,
}

fn section<'b>(
    bytes: &'b [u8],
    what: &'static str,
    offset: u64,
    size: u64,
) -> Result<&'b [u8], FormatError> {
    let end = offset.checked_add(size).ok_or(FormatError::Invalid {
        what,
        offset,
        problem: format!("size {size} overflows"),
    })?;
    if end > bytes.len() as u64 {
        return Err(FormatError::Truncated {
            what,
            start: offset,
            end,
            len: bytes.len() as u64,
        });
    }
    Ok(&bytes[offset as usize..end as usize])
}

impl<'a> PerfDataFile<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<PerfDataFile<'a>, FormatError> {
        if bytes.is_empty() {
            return Err(FormatError::Empty);
        }
        let mut h = Bytes::new(bytes, 0);
        let magic = h.u64("file header").map_err(|_| FormatError::BadMagic)?;
        if magic == u64::from_be_bytes(*b"PERFILE2") {
            return Err(FormatError::BigEndian);
        }
        if magic != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let header_size = h.u64("file header")?;
        if header_size == 16 {
            return Err(FormatError::Invalid {
                what: "file header",
                offset: 8,
                problem: "pipe-mode perf.data is not supported; record to a file".into(),
            });
        }
        if header_size < HEADER_SIZE {
            return Err(FormatError::Invalid {
                what: "file header",
                offset: 8,
                problem: format!("header size {header_size} is below {HEADER_SIZE}"),
            });
        }
        section(bytes, "file header", 0, HEADER_SIZE)?;
        let attr_size = h.u64("file header")?;
        let (attrs_off, attrs_size) = (h.u64("file header")?, h.u64("file header")?);
        let (data_off, data_size) = (h.u64("file header")?, h.u64("file header")?);
        let _event_types = (h.u64("file header")?, h.u64("file header")?);
        let mut bitmap = [0u64; 4];
        for w in &mut bitmap {
            *w = h.u64("file header")?;
        }
        if !(64 + 16..=4096).contains(&attr_size) {
            return Err(FormatError::Invalid {
                what: "file header",
                offset: 16,
                problem: format!("attr entry size {attr_size} is implausible"),
            });
        }
        if attrs_size % attr_size != 0 {
            return Err(FormatError::Invalid {
                what: "attr section",
                offset: attrs_off,
                problem: format!(
                    "size {attrs_size} is not a multiple of the attr size {attr_size}"
                ),
            });
        }
        let attr_bytes = section(bytes, "attr section", attrs_off, attrs_size)?;
        let mut attrs = Vec::new();
        for (i, entry) in attr_bytes.chunks_exact(attr_size as usize).enumerate() {
            let off = attrs_off + i as u64 * attr_size;
            let raw = &entry[..attr_size as usize - 16];
            let declared = u32::from_le_bytes(raw[4..8].try_into().unwrap()) as usize;
            let attr = PerfEventAttr::decode(&raw[..declared.clamp(64, raw.len())], off)?;
            let mut ids_b = Bytes::new(&entry[attr_size as usize - 16..], off + attr_size - 16);
            let (ids_off, ids_size) = (ids_b.u64("attr ids")?, ids_b.u64("attr ids")?);
            let ids_raw = section(bytes, "attr ids", ids_off, ids_size)?;
            let ids = ids_raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            attrs.push(EventAttr {
                attr,
                name: String::new(),
                ids,
            });
        }
        if attrs.is_empty() {
            return Err(FormatError::Invalid {
                what: "attr section",
                offset: attrs_off,
                problem: "the file has no events".into(),
            });
        }
        section(bytes, "data section", data_off, data_size)?;

        let mut features = Features::default();
        let table_off = data_off + data_size;
        let mut table = Bytes::new(
            &bytes[table_off.min(bytes.len() as u64) as usize..],
            table_off,
        );
        for bit in 0..256u32 {
            if bitmap[bit as usize / 64] & (1 << (bit % 64)) == 0 {
                continue;
            }
            let (off, size) = (table.u64("feature table")?, table.u64("feature table")?);
            let raw = section(bytes, "feature section", off, size)?;
            features.decode(bit, raw, off, &mut attrs)?;
        }
        let sample_type = attrs[0].attr.sample_type;
        Ok(PerfDataFile {
            bytes,
            attrs,
            features,
            data_start: data_off,
            data_end: data_off + data_size,
            sample_type,
        })
    }

    /// The records of the data section, in file order.
    pub fn records(&self) -> RecordIter<'a> {
        RecordIter {
            bytes: self.bytes,
            pos: self.data_start,
            end: self.data_end,
            sample_type: self.sample_type,
            failed: false,
        }
    }

    /// The attr whose ids include `id`, or the only attr.
    /// The sample-id layout of the file's records.
    pub fn sample_type(&self) -> u64 {
        self.sample_type
    }
}

pub struct RecordIter<'a> {
    bytes: &'a [u8],
    pos: u64,
    end: u64,
    sample_type: u64,
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    /// The record's file offset and the record.
    type Item = Result<(u64, Record<'a>), FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.end {
            return None;
        }
        let result = self.next_record();
        self.failed = result.is_err();
        Some(result)
    }
}

impl<'a> RecordIter<'a> {
    fn next_record(&mut self) -> Result<(u64, Record<'a>), FormatError> {
        let at = self.pos;
        let data = &self.bytes[..self.end as usize];
        let mut h = Bytes::new(&data[at as usize..], at);
        let kind = h.u32("record header")?;
        let misc = h.u16("record header")?;
        let size = h.u16("record header")? as u64;
        if size < 8 {
            return Err(FormatError::Invalid {
                what: "record header",
                offset: at,
                problem: format!("record size {size} is below 8"),
            });
        }
        let body = section(data, "record", at + 8, size - 8)?;
        let tail = &data[(at + size) as usize..];
        let (record, extra) = Record::decode(kind, misc, body, tail, self.sample_type, at)?;
        self.pos = at + size + extra as u64;
        Ok((at, record))
    }
}
