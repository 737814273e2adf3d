// A work request's slice borrows the region: no writing to it meanwhile.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let mut mr = pd.register(vec![0u8; 64], erdma::AccessFlags::LOCAL_WRITE)?;
    let req = erdma::SendRequest::send([mr.slice(0..8)?]);
    mr.as_mut_slice()?[0] = 1;
    drop(req);
    Ok(())
}
