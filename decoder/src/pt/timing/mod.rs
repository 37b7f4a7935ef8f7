//! Timing: from a trace's timing packets to a time for every branch.
//!
//! - [`packets`]: the time a trace position stands for, decoded from its
//!   timing packets (TSC, MTC with TMA, CYC with CBR), by the SDM's rules;
//! - [`interpolation`]: only some branches get a time of their own, so
//!   the [`Clock`] spreads time between two such anchors by instruction
//!   count and releases everything it held, in order, once timed;
//! - [`ToNs`]: what those times become in the model, perf's nanoseconds
//!   (or instruction counts, kept as they are).

pub(crate) mod interpolation;
pub(crate) mod packets;

pub(crate) use interpolation::{Clock, ClockState, Stamp, Stamps};
pub(crate) use packets::Time;

use ptscope_formats::perf_data::TimeConv;
use ptscope_formats::pt_params::PtParams;

/// What a trace's times are converted by on their way into the model:
/// perf's TSC-to-time conversion, or none (times that count
/// instructions). A value rather than a closure: every event's time goes
/// through it, and a call through a pointer cost more than the arithmetic.
#[derive(Clone, Copy, Debug)]
pub struct ToNs {
    /// The identity is a conversion too (no shift, a multiplier of one),
    /// so that converting takes no branch.
    conv: TimeConv,
}

impl ToNs {
    /// Times kept as they are.
    pub const IDENTITY: ToNs = ToNs {
        conv: TimeConv {
            time_shift: 0,
            time_mult: 1,
            time_zero: 0,
            time_cycles: 0,
            time_mask: 0,
            cap_user_time_zero: false,
            cap_user_time_short: false,
        },
    };

    /// TSC to perf nanoseconds, by the trace's parameters.
    pub fn perf(params: &PtParams) -> ToNs {
        ToNs {
            conv: params.time_conv(),
        }
    }

    /// `tsc` converted.
    #[inline(always)]
    pub fn at(&self, tsc: u64) -> u64 {
        self.conv.tsc_to_perf_time(tsc)
    }
}

/// `a * b / c`, rounded down, in 64 bits when the product fits (almost
/// always: the operands are short spans of ticks, instructions and
/// cycles), since 128-bit division is a slow library call. `c` is not 0.
#[inline]
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(x) => x / c,
        None => (a as u128 * b as u128 / c as u128) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::{mul_div, ToNs};

    #[test]
    fn the_identity_keeps_every_time() {
        for t in [0, 1, 12345, 1 << 40, u64::MAX - 1, u64::MAX] {
            assert_eq!(ToNs::IDENTITY.at(t), t);
        }
    }

    /// The same as the division in 128 bits, whether or not the product
    /// fits in 64.
    #[test]
    fn mul_div_is_the_128_bit_quotient() {
        let values = [
            0,
            1,
            3,
            255,
            1 << 20,
            (1 << 32) - 1,
            1 << 32,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &a in &values {
            for &b in &values {
                for &c in values.iter().filter(|&&c| c != 0) {
                    let want = (a as u128 * b as u128 / c as u128) as u64;
                    assert_eq!(mul_div(a, b, c), want, "{a} * {b} / {c}");
                }
            }
        }
    }
}
