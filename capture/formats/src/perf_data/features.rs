//! Header features: the optional sections after the data section, one per
//! bit set in the header's feature bitmap, found through a table of
//! (offset, size) pairs that sits right after the data.

use super::{cstr, kind, misc, padded_len, Bytes, EventAttr, FormatError, Put};

pub(super) const HEADER_BUILD_ID: u32 = 2;
pub(super) const HEADER_HOSTNAME: u32 = 3;
pub(super) const HEADER_OSRELEASE: u32 = 4;
pub(super) const HEADER_VERSION: u32 = 5;
pub(super) const HEADER_ARCH: u32 = 6;
pub(super) const HEADER_NRCPUS: u32 = 7;
pub(super) const HEADER_CPUDESC: u32 = 8;
pub(super) const HEADER_CPUID: u32 = 9;
pub(super) const HEADER_TOTAL_MEM: u32 = 10;
pub(super) const HEADER_CMDLINE: u32 = 11;
pub(super) const HEADER_EVENT_DESC: u32 = 12;
pub(super) const HEADER_AUXTRACE: u32 = 18;

/// Strings in features are padded to this.
const NAME_ALIGN: usize = 64;

/// A build id of a binary the trace maps (the BUILD_ID feature).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdEntry {
    pub pid: i32,
    pub build_id: Vec<u8>,
    pub filename: String,
    /// PERF_RECORD_MISC_USER or _KERNEL.
    pub cpumode: u16,
}

/// The features ptscope writes and reads. Unknown features are skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    /// (available, online).
    pub nrcpus: Option<(u32, u32)>,
    pub cpudesc: Option<String>,
    /// perf's CPUID string, e.g. `GenuineIntel,6,85,4`.
    pub cpuid: Option<String>,
    pub total_mem_kib: Option<u64>,
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    /// File offsets and sizes of the AUXTRACE records (the AUXTRACE feature).
    pub auxtrace_index: Vec<(u64, u64)>,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let len = padded_len(s.len() + 1, NAME_ALIGN);
    out.put_u32(len as u32);
    out.put_padded_str(s, NAME_ALIGN);
}

fn get_string<'a>(b: &mut Bytes<'a>, what: &'static str) -> Result<&'a str, FormatError> {
    let len = b.u32(what)? as usize;
    b.padded_str(len, what)
}

impl Features {
    /// Encodes the features this value holds, in feature-bit order, with
    /// the EVENT_DESC feature built from `attrs`. Returns (bit, bytes) pairs.
    pub(crate) fn encode(&self, attrs: &[EventAttr]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let string = |bit, s: &Option<String>, out: &mut Vec<(u32, Vec<u8>)>| {
            if let Some(s) = s {
                let mut v = Vec::new();
                put_string(&mut v, s);
                out.push((bit, v));
            }
        };
        if !self.build_ids.is_empty() {
            let mut v = Vec::new();
            for b in &self.build_ids {
                let start = v.len();
                v.put_u32(kind::HEADER_BUILD_ID);
                v.put_u16(b.cpumode | misc::BUILD_ID_SIZE);
                v.put_u16(0);
                v.put_u32(b.pid as u32);
                let n = b.build_id.len().min(20);
                let mut id = [0u8; 24];
                id[..n].copy_from_slice(&b.build_id[..n]);
                id[20] = n as u8;
                v.extend_from_slice(&id);
                v.put_padded_str(&b.filename, NAME_ALIGN);
                let size = (v.len() - start) as u16;
                v[start + 6..start + 8].copy_from_slice(&size.to_le_bytes());
            }
            out.push((HEADER_BUILD_ID, v));
        }
        string(HEADER_HOSTNAME, &self.hostname, &mut out);
        string(HEADER_OSRELEASE, &self.osrelease, &mut out);
        string(HEADER_VERSION, &self.version, &mut out);
        string(HEADER_ARCH, &self.arch, &mut out);
        if let Some((avail, online)) = self.nrcpus {
            let mut v = Vec::new();
            v.put_u32(avail);
            v.put_u32(online);
            out.push((HEADER_NRCPUS, v));
        }
        string(HEADER_CPUDESC, &self.cpudesc, &mut out);
        string(HEADER_CPUID, &self.cpuid, &mut out);
        if let Some(mem) = self.total_mem_kib {
            let mut v = Vec::new();
            v.put_u64(mem);
            out.push((HEADER_TOTAL_MEM, v));
        }
        if let Some(args) = &self.cmdline {
            let mut v = Vec::new();
            v.put_u32(args.len() as u32);
            for a in args {
                put_string(&mut v, a);
            }
            out.push((HEADER_CMDLINE, v));
        }
        if !attrs.is_empty() {
            let mut v = Vec::new();
            v.put_u32(attrs.len() as u32);
            v.put_u32(super::attr::ATTR_SIZE);
            for a in attrs {
                a.attr.encode(&mut v);
                v.put_u32(a.ids.len() as u32);
                put_string(&mut v, &a.name);
                for id in &a.ids {
                    v.put_u64(*id);
                }
            }
            out.push((HEADER_EVENT_DESC, v));
        }
        if !self.auxtrace_index.is_empty() {
            // perf reads the index in blocks of 256 entries: a count, then
            // 256 (offset, size) slots.
            let mut v = Vec::new();
            for chunk in self.auxtrace_index.chunks(256) {
                v.put_u64(chunk.len() as u64);
                for (off, size) in chunk {
                    v.put_u64(*off);
                    v.put_u64(*size);
                }
                v.resize(v.len() + (256 - chunk.len()) * 16, 0);
            }
            out.push((HEADER_AUXTRACE, v));
        }
        out
    }

    /// Decodes one feature section into `self`. Event names from EVENT_DESC
    /// go into `attrs`, matched by position.
    pub(crate) fn decode(
        &mut self,
        bit: u32,
        raw: &[u8],
        offset: u64,
        attrs: &mut [EventAttr],
    ) -> Result<(), FormatError> {
        let mut b = Bytes::new(raw, offset);
        match bit {
            HEADER_HOSTNAME => self.hostname = Some(get_string(&mut b, "HOSTNAME feature")?.into()),
            HEADER_OSRELEASE => {
                self.osrelease = Some(get_string(&mut b, "OSRELEASE feature")?.into())
            }
            HEADER_VERSION => self.version = Some(get_string(&mut b, "VERSION feature")?.into()),
            HEADER_ARCH => self.arch = Some(get_string(&mut b, "ARCH feature")?.into()),
            HEADER_CPUDESC => self.cpudesc = Some(get_string(&mut b, "CPUDESC feature")?.into()),
            HEADER_CPUID => self.cpuid = Some(get_string(&mut b, "CPUID feature")?.into()),
            HEADER_NRCPUS => {
                let w = "NRCPUS feature";
                self.nrcpus = Some((b.u32(w)?, b.u32(w)?));
            }
            HEADER_TOTAL_MEM => self.total_mem_kib = Some(b.u64("TOTAL_MEM feature")?),
            HEADER_CMDLINE => {
                let w = "CMDLINE feature";
                let n = b.u32(w)?;
                let mut args = Vec::new();
                for _ in 0..n {
                    if b.remaining() == 0 {
                        break;
                    }
                    args.push(get_string(&mut b, w)?.to_string());
                }
                self.cmdline = Some(args);
            }
            HEADER_BUILD_ID => {
                let w = "BUILD_ID feature";
                while b.remaining() >= 8 {
                    let at = b.offset();
                    let _kind = b.u32(w)?;
                    let misc_ = b.u16(w)?;
                    let size = b.u16(w)? as usize;
                    if size < 8 + 4 + 24 {
                        return Err(FormatError::Invalid {
                            what: w,
                            offset: at,
                            problem: format!("entry size {size} is too small"),
                        });
                    }
                    let mut e = Bytes::new(b.take(size - 8, w)?, at + 8);
                    let pid = e.u32(w)? as i32;
                    let id = e.take(24, w)?;
                    let n = if misc_ & misc::BUILD_ID_SIZE != 0 {
                        (id[20] as usize).min(20)
                    } else {
                        20
                    };
                    let name_at = e.offset();
                    let filename = cstr(e.take(e.remaining(), w)?, w, name_at)?.to_string();
                    self.build_ids.push(BuildIdEntry {
                        pid,
                        build_id: id[..n].to_vec(),
                        filename,
                        cpumode: misc_ & misc::CPUMODE_MASK,
                    });
                }
            }
            HEADER_EVENT_DESC => {
                let w = "EVENT_DESC feature";
                let nr = b.u32(w)?;
                let attr_size = b.u32(w)? as usize;
                for i in 0..nr as usize {
                    b.take(attr_size, w)?;
                    let nr_ids = b.u32(w)? as usize;
                    let name = get_string(&mut b, w)?;
                    if nr_ids > b.remaining() / 8 {
                        return Err(FormatError::Invalid {
                            what: w,
                            offset: b.offset(),
                            problem: format!("{nr_ids} ids do not fit"),
                        });
                    }
                    b.take(nr_ids * 8, w)?;
                    if let Some(a) = attrs.get_mut(i) {
                        a.name = name.to_string();
                    }
                }
            }
            HEADER_AUXTRACE => {
                let w = "AUXTRACE feature";
                while b.remaining() >= 8 {
                    let n = b.u64(w)?;
                    if n > 256 {
                        return Err(FormatError::Invalid {
                            what: w,
                            offset: b.offset(),
                            problem: format!("index block of {n} entries (most is 256)"),
                        });
                    }
                    for i in 0..256 {
                        if b.remaining() < 16 {
                            break;
                        }
                        let (off, size) = (b.u64(w)?, b.u64(w)?);
                        if i < n {
                            self.auxtrace_index.push((off, size));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_round_trip() {
        let f = Features {
            hostname: Some("box".into()),
            osrelease: Some("6.1.0".into()),
            arch: Some("x86_64".into()),
            nrcpus: Some((2, 2)),
            cpuid: Some("GenuineIntel,6,85,4".into()),
            cmdline: Some(vec!["ptscope".into(), "record".into()]),
            build_ids: vec![BuildIdEntry {
                pid: -1,
                build_id: vec![0xab; 20],
                filename: "/usr/bin/true".into(),
                cpumode: misc::USER,
            }],
            auxtrace_index: vec![(100, 200), (300, 400)],
            ..Default::default()
        };
        let mut back = Features::default();
        for (bit, raw) in f.encode(&[]) {
            back.decode(bit, &raw, 0, &mut []).unwrap();
        }
        assert_eq!(back, f);
    }
}
