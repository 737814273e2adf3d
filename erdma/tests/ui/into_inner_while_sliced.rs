// The slices of a request in a batch still borrow the region until posted;
// a region cannot be handed back while a slice of it is alive.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(vec![0u8; 64], erdma::AccessFlags::LOCAL_WRITE)?;
    let recv = erdma::RecvRequest::new([mr.all()]);
    let _buf = mr.into_inner();
    drop(recv);
    Ok(())
}
