// A request cannot name a region that no longer exists.
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let qp = pd.create_rc_qp(&cq, &cq, &erdma::QpCapabilities::default())?;
    let req = {
        let mr = pd.register(vec![0u8; 64], erdma::AccessFlags::empty())?;
        erdma::SendRequest::send([mr.all()])
    };
    qp.post_send(req)?;
    Ok(())
}
