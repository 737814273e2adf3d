//! The one-process bootstrap: every collective is the identity.

use std::sync::Arc;

use super::Bootstrap;
use crate::nccltests::errors::{TestError, TestResult};

/// One process.
pub struct Single;

impl Bootstrap for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn name(&self) -> &'static str {
        "single"
    }
    fn allgather(&self, mine: &[u8]) -> TestResult<Vec<u8>> {
        Ok(mine.to_vec())
    }
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
        Ok(Arc::new(Single))
    }
    fn split(&self, _color: i32) -> TestResult<Arc<dyn Bootstrap>> {
        Ok(Arc::new(Single))
    }
    fn abort(&self, e: &TestError) -> ! {
        std::process::exit(e.exit_code())
    }
}
