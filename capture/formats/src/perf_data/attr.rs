//! `struct perf_event_attr` and the attribute section (`perf_file_attr`).

use super::{Bytes, FormatError, Put};

/// The attr size we write: PERF_ATTR_SIZE_VER7, which perf 5.13 and later read.
pub const ATTR_SIZE: u32 = 128;
/// The smallest attr any perf wrote (PERF_ATTR_SIZE_VER0).
const ATTR_SIZE_VER0: u32 = 64;

/// The fields of `perf_event_attr` that ptscope reads or writes. Fields past
/// what the file's attr size covers read as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    pub kind: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    /// bp_addr / config1.
    pub config1: u64,
    /// bp_len / config2.
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub aux_sample_size: u32,
    /// What an overflow of the event does to its group's AUX event
    /// (Linux 6.13's aux-action bits, [`super::aux_action`]).
    pub aux_action: u32,
    pub sig_data: u64,
}

impl PerfEventAttr {
    /// Appends the attr as perf_event_open and perf.data lay it out.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u32(self.kind);
        out.put_u32(ATTR_SIZE);
        out.put_u64(self.config);
        out.put_u64(self.sample_period);
        out.put_u64(self.sample_type);
        out.put_u64(self.read_format);
        out.put_u64(self.flags);
        out.put_u32(self.wakeup_events);
        out.put_u32(self.bp_type);
        out.put_u64(self.config1);
        out.put_u64(self.config2);
        out.put_u64(self.branch_sample_type);
        out.put_u64(self.sample_regs_user);
        out.put_u32(self.sample_stack_user);
        out.put_u32(self.clockid as u32);
        out.put_u64(self.sample_regs_intr);
        out.put_u32(self.aux_watermark);
        out.put_u16(self.sample_max_stack);
        out.put_u16(0);
        out.put_u32(self.aux_sample_size);
        out.put_u32(self.aux_action);
        out.put_u64(self.sig_data);
        debug_assert_eq!(out.len() - start, ATTR_SIZE as usize);
    }

    /// Decodes an attr of `size` bytes (as the file says), zero-extending
    /// older, shorter layouts.
    pub(crate) fn decode(raw: &[u8], offset: u64) -> Result<PerfEventAttr, FormatError> {
        if raw.len() < ATTR_SIZE_VER0 as usize {
            return Err(FormatError::Invalid {
                what: "event attr",
                offset,
                problem: format!("attr size {} is below the minimum 64", raw.len()),
            });
        }
        let mut full = [0u8; ATTR_SIZE as usize];
        let n = raw.len().min(full.len());
        full[..n].copy_from_slice(&raw[..n]);
        let mut b = Bytes::new(&full, offset);
        let w = "event attr";
        let kind = b.u32(w)?;
        let _size = b.u32(w)?;
        Ok(PerfEventAttr {
            kind,
            config: b.u64(w)?,
            sample_period: b.u64(w)?,
            sample_type: b.u64(w)?,
            read_format: b.u64(w)?,
            flags: b.u64(w)?,
            wakeup_events: b.u32(w)?,
            bp_type: b.u32(w)?,
            config1: b.u64(w)?,
            config2: b.u64(w)?,
            branch_sample_type: b.u64(w)?,
            sample_regs_user: b.u64(w)?,
            sample_stack_user: b.u32(w)?,
            clockid: b.u32(w)? as i32,
            sample_regs_intr: b.u64(w)?,
            aux_watermark: b.u32(w)?,
            sample_max_stack: {
                let v = b.u16(w)?;
                b.u16(w)?;
                v
            },
            aux_sample_size: b.u32(w)?,
            aux_action: b.u32(w)?,
            sig_data: b.u64(w)?,
        })
    }
}

/// An event of the file: its attr, its name (from EVENT_DESC) and the
/// sample ids of its per-thread or per-CPU instances.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventAttr {
    pub attr: PerfEventAttr,
    pub name: String,
    pub ids: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_round_trips() {
        let attr = PerfEventAttr {
            kind: 8,
            config: 0x3002,
            sample_type: 0x10007,
            flags: 0x40021,
            clockid: -1,
            aux_watermark: 4096,
            aux_action: super::super::aux_action::START_PAUSED,
            sig_data: 7,
            ..Default::default()
        };
        let mut v = Vec::new();
        attr.encode(&mut v);
        assert_eq!(v.len(), 128);
        // The aux-action word is where the kernel reads it: after
        // aux_sample_size (112), at 116, before sig_data (120).
        assert_eq!(&v[116..120], &[1, 0, 0, 0]);
        assert_eq!(&v[120..128], &7u64.to_le_bytes());
        assert_eq!(PerfEventAttr::decode(&v, 0).unwrap(), attr);
        // An older, shorter attr zero-extends.
        let short = PerfEventAttr::decode(&v[..72], 0).unwrap();
        assert_eq!(short.config, 0x3002);
        assert_eq!(short.sig_data, 0);
        assert!(PerfEventAttr::decode(&v[..40], 0).is_err());
    }
}
