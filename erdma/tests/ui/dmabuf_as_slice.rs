// A dma-buf region is device memory: never readable as a Rust slice.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    // SAFETY: compile-only test; never run.
    let mut mr = unsafe { pd.register_dmabuf(3, 0, 4096, 0, erdma::AccessFlags::LOCAL_WRITE)? };
    let _bytes = mr.as_slice()?;
    Ok(())
}
