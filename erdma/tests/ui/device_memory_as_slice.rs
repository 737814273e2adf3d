// Device memory (RawBuffer) is not readable as a Rust slice.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let raw = unsafe { erdma::RawBuffer::new(0x1000 as *mut u8, 64) };
    let mut mr = pd.register(raw, erdma::AccessFlags::LOCAL_WRITE)?;
    let _bytes = mr.as_slice()?;
    Ok(())
}
