//! A streaming perf.data writer. The data section is written as records
//! come; attrs and features go after it, and the header is patched last.
//! The layout is header | data | feature table | features | ids | attrs.

use std::io::{Seek, SeekFrom, Write};

use super::{attr::ATTR_SIZE, EventAttr, Features, Put, Record, HEADER_SIZE, MAGIC};

pub struct PerfDataWriter<W: Write + Seek> {
    out: W,
    pos: u64,
    sample_type: u64,
    buf: Vec<u8>,
    auxtrace_index: Vec<(u64, u64)>,
}

impl<W: Write + Seek> PerfDataWriter<W> {
    /// Starts a file whose events all use `sample_type` (it decides the
    /// layout of every record's sample-id trailer).
    pub fn new(mut out: W, sample_type: u64) -> std::io::Result<Self> {
        out.write_all(&[0u8; HEADER_SIZE as usize])?;
        Ok(PerfDataWriter {
            out,
            pos: HEADER_SIZE,
            sample_type,
            buf: Vec::with_capacity(4096),
            auxtrace_index: Vec::new(),
        })
    }

    pub fn write(&mut self, record: &Record) -> std::io::Result<()> {
        self.buf.clear();
        record.encode(self.sample_type, &mut self.buf);
        if let Record::Auxtrace { .. } = record {
            // perf's index names the record header; its size excludes the data.
            let header_size = u16::from_le_bytes([self.buf[6], self.buf[7]]);
            self.auxtrace_index.push((self.pos, header_size as u64));
        }
        self.out.write_all(&self.buf)?;
        self.pos += self.buf.len() as u64;
        Ok(())
    }

    /// Writes features, ids and attrs, patches the header and returns the
    /// sink. The AUXTRACE index feature is filled in from what was written.
    pub fn finish(mut self, attrs: &[EventAttr], mut features: Features) -> std::io::Result<W> {
        let data_size = self.pos - HEADER_SIZE;
        features.auxtrace_index = std::mem::take(&mut self.auxtrace_index);
        let sections = features.encode(attrs);

        let mut bitmap = [0u64; 4];
        let table_len = sections.len() as u64 * 16;
        let mut table = Vec::with_capacity(table_len as usize);
        let mut offset = self.pos + table_len;
        for (bit, bytes) in &sections {
            bitmap[*bit as usize / 64] |= 1 << (bit % 64);
            table.put_u64(offset);
            table.put_u64(bytes.len() as u64);
            offset += bytes.len() as u64;
        }
        self.out.write_all(&table)?;
        for (_, bytes) in &sections {
            self.out.write_all(bytes)?;
        }
        self.pos = offset;

        let mut id_sections = Vec::with_capacity(attrs.len());
        for a in attrs {
            let mut v = Vec::with_capacity(a.ids.len() * 8);
            for id in &a.ids {
                v.put_u64(*id);
            }
            id_sections.push((self.pos, v.len() as u64));
            self.out.write_all(&v)?;
            self.pos += v.len() as u64;
        }
        let attrs_offset = self.pos;
        let mut v = Vec::new();
        for (a, (ids_off, ids_len)) in attrs.iter().zip(&id_sections) {
            a.attr.encode(&mut v);
            v.put_u64(*ids_off);
            v.put_u64(*ids_len);
        }
        self.out.write_all(&v)?;

        let mut h = Vec::with_capacity(HEADER_SIZE as usize);
        h.put_u64(MAGIC);
        h.put_u64(HEADER_SIZE);
        h.put_u64(ATTR_SIZE as u64 + 16);
        h.put_u64(attrs_offset);
        h.put_u64(v.len() as u64);
        h.put_u64(HEADER_SIZE);
        h.put_u64(data_size);
        h.put_u64(0);
        h.put_u64(0);
        for w in bitmap {
            h.put_u64(w);
        }
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&h)?;
        self.out.flush()?;
        Ok(self.out)
    }
}
