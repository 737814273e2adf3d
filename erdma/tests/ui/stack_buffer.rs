// Only memory that stays put may be registered: not a borrowed stack array.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let mut local = [0u8; 64];
    let _mr = pd.register(&mut local[..], erdma::AccessFlags::LOCAL_WRITE)?;
    Ok(())
}
