//! Host-side argument checks shared by every op: size arithmetic that cannot overflow,
//! non-zero extents, view checks (null, location, length) and END-offset checks.

use crate::error::{Error, Result};
use crate::params::CastParams;
use crate::view::Loc;

/// `a * b` or a SizeOverflow naming the product.
pub fn checked_mul(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::SizeOverflow(format!("{what} = {a} * {b} overflows")))
}

pub fn require_nonzero(what: &str, v: usize) -> Result<()> {
    if v == 0 {
        Err(Error::InvalidShape(format!("{what} must be > 0")))
    } else {
        Ok(())
    }
}

/// The `*_scaled` ops take the caller's scale as is: power-of-two rounding, which applies to
/// a scale the op derives, is refused rather than silently ignored.
pub fn require_no_pow2(p: &CastParams) -> Result<()> {
    if p.pow2_scales {
        Err(Error::InvalidEnum(
            "pow2_scales does not apply to a given scale (round it before the call)".into(),
        ))
    } else {
        Ok(())
    }
}

pub(crate) fn check_view(
    ctx_loc: Loc,
    what: &'static str,
    ptr: *const u8,
    loc: Loc,
    len: usize,
    needed: usize,
    output: bool,
) -> Result<()> {
    if needed > 0 && ptr.is_null() {
        return Err(Error::NullPointer(what));
    }
    if loc != ctx_loc {
        return Err(Error::WrongLocation(format!(
            "`{what}` is {loc:?} memory but the context runs on {ctx_loc:?} memory"
        )));
    }
    if len < needed {
        return Err(if output {
            Error::OutputTooSmall {
                what,
                needed,
                got: len,
            }
        } else {
            Error::InputTooSmall {
                what,
                needed,
                got: len,
            }
        });
    }
    Ok(())
}

/// Validate int32 END offsets on the host: non-negative, non-decreasing, last <= extent.
/// (Offsets may end before `extent`: trailing rows/columns belong to no group and are not
/// written.) Used by every grouped op on the CPU backend; GPU kernels clamp instead, since
/// offsets live on the device and reading them back would synchronise.
pub fn validate_offsets(offs: &[i32], extent: usize) -> Result<()> {
    let mut prev: i64 = 0;
    for (g, &o) in offs.iter().enumerate() {
        if o < 0 {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} is negative"
            )));
        }
        if (o as i64) < prev {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} < offs[{}] = {prev}: offsets must be non-decreasing",
                g.saturating_sub(1)
            )));
        }
        if o as usize > extent {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} is past the extent {extent}"
            )));
        }
        prev = o as i64;
    }
    Ok(())
}
