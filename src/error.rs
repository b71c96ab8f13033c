//! The error type of every fallible call.
use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call failed. Each variant maps to one stable C status code (see `ffi`).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A dimension or a combination of dimensions is not allowed (detail says which).
    InvalidShape(String),
    /// A dimension product overflows usize / i32 indexing.
    SizeOverflow(String),
    /// The requested layout/stride is not supported by this op.
    LayoutNotSupported(String),
    /// Offsets decrease, or the last offset / an offset lies past the grouped extent, or is negative.
    InvalidOffsets(String),
    /// Number of groups disagrees between arguments.
    GroupCountMismatch { expected: usize, got: usize },
    /// Format not usable by this op (e.g. FNUZ for MXFP8).
    UnsupportedFormat(String),
    /// An output buffer is shorter than the op writes.
    OutputTooSmall {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    /// An input buffer is shorter than the op reads.
    InputTooSmall {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    /// A pointer is not aligned as the op requires.
    Misaligned(String),
    /// A null pointer where data is required.
    NullPointer(&'static str),
    /// Host memory given to a GPU context or device memory to a CPU context.
    WrongLocation(String),
    /// An enum value (format, mode, ...) that is not defined.
    InvalidEnum(String),
    /// Requested backend/device is not available in this build or on this machine.
    BackendUnavailable(String),
    /// The GPU runtime returned an error (code and message).
    Device { code: i32, msg: String },
    /// The operation is not implemented on this backend.
    NotSupported(String),
    /// Two buffers of one call share memory where at least one of them is written.
    OverlappingBuffers(String),
    /// Memory the library needed (host scratch of the CPU backend, a device workspace) could
    /// not be allocated; nothing was written and the context stays usable.
    OutOfMemory(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidShape(s) => write!(f, "invalid shape: {s}"),
            Error::SizeOverflow(s) => write!(f, "size overflow: {s}"),
            Error::LayoutNotSupported(s) => write!(f, "layout not supported: {s}"),
            Error::InvalidOffsets(s) => write!(f, "invalid group offsets: {s}"),
            Error::GroupCountMismatch { expected, got } => {
                write!(f, "group count mismatch: expected {expected}, got {got}")
            }
            Error::UnsupportedFormat(s) => write!(f, "unsupported format: {s}"),
            Error::OutputTooSmall { what, needed, got } => {
                write!(
                    f,
                    "output `{what}` too small: needs {needed} elements, got {got}"
                )
            }
            Error::InputTooSmall { what, needed, got } => {
                write!(
                    f,
                    "input `{what}` too small: needs {needed} elements, got {got}"
                )
            }
            Error::Misaligned(s) => write!(f, "misaligned pointer: {s}"),
            Error::NullPointer(s) => write!(f, "null pointer: `{s}`"),
            Error::WrongLocation(s) => write!(f, "wrong memory location: {s}"),
            Error::InvalidEnum(s) => write!(f, "invalid enum value: {s}"),
            Error::BackendUnavailable(s) => write!(f, "backend unavailable: {s}"),
            Error::Device { code, msg } => write!(f, "device error {code}: {msg}"),
            Error::NotSupported(s) => write!(f, "not supported: {s}"),
            Error::OverlappingBuffers(s) => write!(f, "overlapping buffers: {s}"),
            Error::OutOfMemory(s) => write!(f, "out of memory: {s}"),
        }
    }
}

impl std::error::Error for Error {}
