//! Status codes, the thread-local last-error message, and the panic guard every entry point
//! runs under.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::Error;

c_enum! {
    /// Result of every fallible call. The values are part of the ABI and never change; new
    /// codes are only appended.
    // `value`: the static description of a status (hipfp8_status_string).
    hipfp8_status => &'static std::ffi::CStr {
        HIPFP8_STATUS_SUCCESS = 0 => c"success",
        /// The context is NULL, already destroyed, or not a context at all.
        HIPFP8_STATUS_INVALID_HANDLE = 1 => c"invalid context handle (NULL or destroyed)",
        /// A required pointer (buffer, descriptor, out-parameter) is NULL.
        HIPFP8_STATUS_NULL_POINTER = 2 => c"required pointer is NULL",
        /// A descriptor's `size` field is not the size of a descriptor version this library knows.
        HIPFP8_STATUS_INVALID_DESCRIPTOR = 3 => c"descriptor size field does not match",
        /// An enum value (format, dtype, backend, mode) or flag bit that is not defined.
        HIPFP8_STATUS_INVALID_ENUM = 4 => c"unknown enum value or flag",
        /// A dimension or combination of dimensions is not allowed (e.g. a reduced dim of 0).
        HIPFP8_STATUS_INVALID_SHAPE = 5 => c"invalid shape",
        /// A product of dimensions (or a byte count) does not fit the address space / indices.
        HIPFP8_STATUS_SIZE_OVERFLOW = 6 => c"size overflow",
        /// The requested layout is not supported by this op.
        HIPFP8_STATUS_LAYOUT_NOT_SUPPORTED = 7 => c"layout not supported",
        /// Group offsets are negative, decreasing, or past the grouped extent.
        HIPFP8_STATUS_INVALID_OFFSETS = 8 => c"invalid group offsets",
        /// Two arguments disagree on the number of groups.
        HIPFP8_STATUS_GROUP_COUNT_MISMATCH = 9 => c"group count mismatch",
        /// The format is valid but not usable by this op (e.g. FNUZ for MXFP8).
        HIPFP8_STATUS_UNSUPPORTED_FORMAT = 10 => c"format not supported by this op",
        /// An output buffer holds fewer elements than the op writes.
        HIPFP8_STATUS_OUTPUT_TOO_SMALL = 11 => c"output buffer too small",
        /// An input buffer holds fewer elements than the op reads.
        HIPFP8_STATUS_INPUT_TOO_SMALL = 12 => c"input buffer too small",
        /// A pointer is not aligned to its element type.
        HIPFP8_STATUS_MISALIGNED = 13 => c"misaligned pointer",
        /// Host memory given to a GPU context, or device memory to a CPU context.
        HIPFP8_STATUS_WRONG_LOCATION = 14 => c"memory on the wrong device (host vs GPU)",
        /// The requested backend or device is not available in this build or on this machine.
        HIPFP8_STATUS_BACKEND_UNAVAILABLE = 15 => c"backend or device unavailable",
        /// The GPU runtime reported an error (the message has its code and text).
        HIPFP8_STATUS_DEVICE_ERROR = 16 => c"GPU runtime error",
        /// The op is not implemented on this backend, or a GPU launcher cannot take the arguments
        /// (the one such limit: more than 2^31 - 1 groups; any smaller group count works on every
        /// backend, docs/OPS.md).
        HIPFP8_STATUS_NOT_SUPPORTED = 17 => c"not supported on this backend",
        /// A bug in hipfp8 (a caught panic); the message says where.
        HIPFP8_STATUS_INTERNAL_ERROR = 18 => c"internal error in hipfp8",
        /// Two buffers of the call overlap and at least one of them is an output (inputs may
        /// share memory with each other).
        HIPFP8_STATUS_OVERLAPPING_BUFFERS = 19 => c"buffers of the call overlap",
        /// Memory the library allocates for the call (CPU scratch, a GPU workspace) could not be
        /// had; nothing was written and the context stays usable.
        HIPFP8_STATUS_OUT_OF_MEMORY = 20 => c"out of memory",
    }
}

use hipfp8_status as S;

/// The number of statuses.
const COUNT: usize = 21;

/// The statuses, in value order (checked: the values are 0..COUNT).
const fn statuses() -> [hipfp8_status; COUNT] {
    let mut all = [S::HIPFP8_STATUS_SUCCESS; COUNT];
    let mut i = 0;
    while i < COUNT {
        all[i] = match hipfp8_status::from_u32(i as u32) {
            Some(s) => s,
            None => panic!("status values are 0..COUNT"),
        };
        i += 1;
    }
    assert!(
        hipfp8_status::from_u32(COUNT as u32).is_none(),
        "COUNT statuses"
    );
    all
}

impl hipfp8_status {
    /// Every status, in value order (tests check values and strings against this).
    pub const ALL: [hipfp8_status; COUNT] = statuses();
}

/// Why an entry point failed: an op's [`Error`] or a failure only the C boundary has.
#[derive(Debug)]
pub enum FfiError {
    Op(Error),
    InvalidHandle(String),
    InvalidDescriptor {
        what: &'static str,
        expected: usize,
        got: usize,
    },
}

impl From<Error> for FfiError {
    fn from(e: Error) -> Self {
        FfiError::Op(e)
    }
}

/// The error of a conversion that cannot fail (an op's parameters that are its descriptor's).
impl From<std::convert::Infallible> for FfiError {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

impl fmt::Display for FfiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FfiError::Op(e) => e.fmt(f),
            FfiError::InvalidHandle(s) => write!(f, "invalid context handle: {s}"),
            FfiError::InvalidDescriptor {
                what,
                expected,
                got,
            } => write!(
                f,
                "descriptor `{what}` has size field {got}, expected {expected} (sizeof the \
                 descriptor in the header this library was built with)"
            ),
        }
    }
}

/// The status of each error. Exhaustive on purpose: a new [`Error`] variant does not compile
/// until it has a status.
pub fn status_of(e: &FfiError) -> hipfp8_status {
    match e {
        FfiError::InvalidHandle(_) => S::HIPFP8_STATUS_INVALID_HANDLE,
        FfiError::InvalidDescriptor { .. } => S::HIPFP8_STATUS_INVALID_DESCRIPTOR,
        FfiError::Op(e) => match e {
            Error::InvalidShape(_) => S::HIPFP8_STATUS_INVALID_SHAPE,
            Error::SizeOverflow(_) => S::HIPFP8_STATUS_SIZE_OVERFLOW,
            Error::LayoutNotSupported(_) => S::HIPFP8_STATUS_LAYOUT_NOT_SUPPORTED,
            Error::InvalidOffsets(_) => S::HIPFP8_STATUS_INVALID_OFFSETS,
            Error::GroupCountMismatch { .. } => S::HIPFP8_STATUS_GROUP_COUNT_MISMATCH,
            Error::UnsupportedFormat(_) => S::HIPFP8_STATUS_UNSUPPORTED_FORMAT,
            Error::OutputTooSmall { .. } => S::HIPFP8_STATUS_OUTPUT_TOO_SMALL,
            Error::InputTooSmall { .. } => S::HIPFP8_STATUS_INPUT_TOO_SMALL,
            Error::Misaligned(_) => S::HIPFP8_STATUS_MISALIGNED,
            Error::NullPointer(_) => S::HIPFP8_STATUS_NULL_POINTER,
            Error::WrongLocation(_) => S::HIPFP8_STATUS_WRONG_LOCATION,
            Error::InvalidEnum(_) => S::HIPFP8_STATUS_INVALID_ENUM,
            Error::BackendUnavailable(_) => S::HIPFP8_STATUS_BACKEND_UNAVAILABLE,
            Error::Device { .. } => S::HIPFP8_STATUS_DEVICE_ERROR,
            Error::NotSupported(_) => S::HIPFP8_STATUS_NOT_SUPPORTED,
            Error::OverlappingBuffers(_) => S::HIPFP8_STATUS_OVERLAPPING_BUFFERS,
            Error::OutOfMemory(_) => S::HIPFP8_STATUS_OUT_OF_MEMORY,
        },
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: String) {
    // A message never contains NUL in practice; strip any so CString::new cannot fail.
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; losing the message is fine.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            *s = c;
        }
    });
}

/// Make the last-error message "" after a successful call, without allocating when it is
/// already "" (the common case: the previous call succeeded too).
fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            if !s.as_bytes().is_empty() {
                *s = CString::default();
            }
        }
    });
}

/// Run an entry point's body: catch panics, map errors to statuses, record the message.
/// Every exported function that returns a status goes through here. A success allocates
/// nothing (the message is built only for a failure).
pub(crate) fn guard(
    func: &'static str,
    body: impl FnOnce() -> Result<(), FfiError>,
) -> hipfp8_status {
    let (status, msg) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            clear_last_error();
            return S::HIPFP8_STATUS_SUCCESS;
        }
        Ok(Err(e)) => (status_of(&e), format!("{func}: {e}")),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            (
                S::HIPFP8_STATUS_INTERNAL_ERROR,
                format!("{func}: internal error (panic: {what})"),
            )
        }
    };
    set_last_error(msg);
    status
}

/// A static, NUL-terminated English description of a status value (never NULL; unknown
/// values give "unknown hipfp8_status"). Does not touch the last-error message.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_status_string(status: u32) -> *const c_char {
    hipfp8_status::value(status)
        .unwrap_or(c"unknown hipfp8_status")
        .as_ptr()
}

/// Detail of the last failed call on the calling thread: which function, which argument and
/// why (e.g. "hipfp8_rowwise_2d: output `scales` too small: needs 64 elements, got 63").
/// "" after a successful call. Never NULL. The pointer stays valid until the next hipfp8
/// call on the same thread; copy the text to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_last_error_message() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            // The CString's heap buffer is stable until the slot is next assigned, which
            // only happens inside a later hipfp8 call on this thread.
            Ok(s) => s.as_ptr(),
            Err(_) => c"".as_ptr(),
        })
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: hipfp8_last_error_message never returns NULL and points to a NUL-terminated
        // string that lives until the next hipfp8 call on this thread.
        unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn values_are_stable_and_strings_distinct() {
        for (i, s) in hipfp8_status::ALL.iter().enumerate() {
            assert_eq!(*s as u32, i as u32);
        }
        let mut seen = std::collections::HashSet::new();
        for s in hipfp8_status::ALL {
            // SAFETY: hipfp8_status_string returns a static NUL-terminated string.
            let t = unsafe { CStr::from_ptr(hipfp8_status_string(s as u32)) };
            assert!(seen.insert(t.to_owned()), "duplicate string for {s:?}");
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(hipfp8_status_string(12345)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown hipfp8_status");
    }

    #[test]
    fn guard_catches_panics_and_records_messages() {
        let st = guard("hipfp8_test", || panic!("boom {}", 42));
        assert_eq!(st, S::HIPFP8_STATUS_INTERNAL_ERROR);
        assert_eq!(last(), "hipfp8_test: internal error (panic: boom 42)");
        let st = guard("hipfp8_test", || panic!("static"));
        assert_eq!(st, S::HIPFP8_STATUS_INTERNAL_ERROR);
        assert!(last().contains("static"));

        let st = guard("hipfp8_test", || Err(Error::NullPointer("x").into()));
        assert_eq!(st, S::HIPFP8_STATUS_NULL_POINTER);
        assert_eq!(last(), "hipfp8_test: null pointer: `x`");

        assert_eq!(guard("hipfp8_test", || Ok(())), S::HIPFP8_STATUS_SUCCESS);
        assert_eq!(last(), "");
    }

    #[test]
    fn every_error_has_its_own_status() {
        let errs = [
            Error::InvalidShape(String::new()),
            Error::SizeOverflow(String::new()),
            Error::LayoutNotSupported(String::new()),
            Error::InvalidOffsets(String::new()),
            Error::GroupCountMismatch {
                expected: 1,
                got: 2,
            },
            Error::UnsupportedFormat(String::new()),
            Error::OutputTooSmall {
                what: "o",
                needed: 1,
                got: 0,
            },
            Error::InputTooSmall {
                what: "i",
                needed: 1,
                got: 0,
            },
            Error::Misaligned(String::new()),
            Error::NullPointer("p"),
            Error::WrongLocation(String::new()),
            Error::InvalidEnum(String::new()),
            Error::BackendUnavailable(String::new()),
            Error::Device {
                code: 1,
                msg: String::new(),
            },
            Error::NotSupported(String::new()),
            Error::OverlappingBuffers(String::new()),
            Error::OutOfMemory(String::new()),
        ];
        let mut seen = std::collections::HashSet::new();
        for e in errs {
            let s = status_of(&FfiError::Op(e.clone()));
            assert_ne!(s, S::HIPFP8_STATUS_SUCCESS);
            assert!(seen.insert(s as u32), "{e:?} shares status {s:?}");
        }
    }
}
