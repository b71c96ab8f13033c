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

/// The padding ops' m_cap rule: `m_cap >= m + 15*G` (every padded group fits whatever the
/// offsets), `m_cap <= i32::MAX` (the padded offsets are int32).
pub(crate) fn check_m_cap(m: usize, m_cap: usize, g: usize) -> Result<()> {
    let worst = checked_mul("15*g", 15, g)?
        .checked_add(m)
        .ok_or_else(|| Error::SizeOverflow("m + 15*g overflows".into()))?;
    if m_cap < worst {
        return Err(Error::InvalidShape(format!(
            "m_cap = {m_cap} < m + 15*G = {worst}: padded groups may not fit"
        )));
    }
    if m_cap > i32::MAX as usize {
        return Err(Error::SizeOverflow(format!(
            "m_cap = {m_cap} does not fit the int32 padded offsets"
        )));
    }
    Ok(())
}

/// The m_cap rule of the padded wgrad-operand layouts: [`check_m_cap`], and a multiple of 16
/// (the 2D x 2D GEMM's library path takes Mt % 16 == 0, docs/OPS.md; the output's token
/// extent is m_cap).
pub(crate) fn check_wgrad_cap(m: usize, m_cap: usize, g: usize) -> Result<()> {
    check_m_cap(m, m_cap, g)?;
    if m_cap % 16 != 0 {
        return Err(Error::InvalidShape(format!(
            "m_cap = {m_cap} is not a multiple of 16 (pass round_up(m + 15*G, 16) = {})",
            pad16_or_max(m, g)
        )));
    }
    Ok(())
}

/// `round_up(m + 15*g, 16)` for an error message (saturating).
fn pad16_or_max(m: usize, g: usize) -> usize {
    m.saturating_add(g.saturating_mul(15))
        .checked_next_multiple_of(16)
        .unwrap_or(usize::MAX)
}
