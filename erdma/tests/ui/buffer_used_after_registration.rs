// The region owns its buffer: the caller cannot keep writing to it.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let mut buf = vec![0u8; 4096];
    let _mr = pd.register(buf, erdma::AccessFlags::LOCAL_WRITE)?;
    buf[0] = 1;
    Ok(())
}
