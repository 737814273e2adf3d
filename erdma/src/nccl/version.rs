//! NCCL version numbers as `ncclGetVersion` reports them.

use std::fmt;
use std::str::FromStr;

/// An NCCL release, e.g. 2.28.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// The oldest NCCL this crate works with (user buffer registration, `ncclMemAlloc`,
    /// `ncclCommGetAsyncError`, nonblocking communicators and PreMulSum are all there).
    pub const MIN_SUPPORTED: Version = Version::new(2, 19, 0);
    /// The first release with fp8 data types (`ncclFloat8e4m3`, `ncclFloat8e5m2`).
    pub const FP8: Version = Version::new(2, 24, 0);
    /// The first release with `ncclCommWindowRegister`.
    pub const WINDOW_REGISTER: Version = Version::new(2, 27, 0);
    /// The first release with native `ncclAlltoAll`, `ncclGather` and `ncclScatter`.
    pub const NATIVE_ALLTOALL: Version = Version::new(2, 28, 0);

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Decodes `NCCL_VERSION_CODE`: `X*1000 + Y*100 + Z` up to 2.8, `X*10000 + Y*100 + Z`
    /// after. `None` for negative codes.
    pub fn from_code(code: i32) -> Option<Version> {
        let code = u32::try_from(code).ok()?;
        if code >= 10_000 {
            Some(Version::new(
                code / 10_000,
                (code % 10_000) / 100,
                code % 100,
            ))
        } else {
            Some(Version::new(code / 1000, (code % 1000) / 100, code % 100))
        }
    }

    /// `NCCL_VERSION(major, minor, patch)`, as nccl-tests prints `nccl-library=%d`.
    pub fn code(&self) -> i32 {
        let (x, y, z) = (self.major as i32, self.minor as i32, self.patch as i32);
        if x <= 2 && y <= 8 {
            x * 1000 + y * 100 + z
        } else {
            x * 10_000 + y * 100 + z
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Error parsing a version string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseVersionError(String);

impl fmt::Display for ParseVersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid NCCL version '{}': expected MAJOR.MINOR.PATCH, e.g. 2.19.3",
            self.0
        )
    }
}

impl std::error::Error for ParseVersionError {}

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Parses `2.28.3` (also `2.28.3-1`, a package revision, and `2.28`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseVersionError(s.to_string());
        let core = s.trim().split(['-', '+']).next().unwrap_or("");
        let mut parts = core.split('.');
        let mut next = |required: bool| -> Result<u32, ParseVersionError> {
            match parts.next() {
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    p.parse().map_err(|_| err())
                }
                None if !required => Ok(0),
                _ => Err(err()),
            }
        };
        let v = Version::new(next(true)?, next(true)?, next(false)?);
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_codes_of_both_eras() {
        assert_eq!(Version::from_code(22803), Some(Version::new(2, 28, 3)));
        assert_eq!(Version::from_code(21903), Some(Version::new(2, 19, 3)));
        assert_eq!(Version::from_code(2708), Some(Version::new(2, 7, 8)));
        assert_eq!(Version::from_code(30000), Some(Version::new(3, 0, 0)));
        assert_eq!(Version::from_code(-1), None);
    }

    #[test]
    fn encodes_like_nccl_version_macro() {
        for code in [22803, 22809, 21903, 2708, 2804, 30102] {
            assert_eq!(Version::from_code(code).unwrap().code(), code);
        }
        assert_eq!(Version::MIN_SUPPORTED.code(), 21900);
    }

    #[test]
    fn orders_numerically() {
        assert!(Version::new(2, 9, 0) < Version::new(2, 19, 0));
        assert!(Version::new(2, 18, 6) < Version::MIN_SUPPORTED);
        assert!(Version::new(2, 28, 3) >= Version::NATIVE_ALLTOALL);
    }

    #[test]
    fn parses_strings() {
        assert_eq!("2.28.3".parse(), Ok(Version::new(2, 28, 3)));
        assert_eq!("2.21.5-1".parse(), Ok(Version::new(2, 21, 5)));
        assert_eq!(" 2.19 ".parse(), Ok(Version::new(2, 19, 0)));
        for bad in ["", "2", "two.19.3", "2.19.3.4", "2..3", "-2.19.3", "2.19.x"] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(Version::new(2, 28, 3).to_string(), "2.28.3");
    }
}
