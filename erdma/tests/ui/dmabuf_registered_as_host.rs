// A dma-buf region's descriptor, handed back by into_inner, is not host
// memory the value owns: it cannot be registered again with `register`
// (which would call ibv_reg_mr on the dma-buf's I/O address).
fn main() -> erdma::Result<()> {
    let ctx = erdma::Context::open("rxe0")?;
    let pd = ctx.alloc_pd()?;
    // SAFETY: compile-only test; never run.
    let mr = unsafe { pd.register_dmabuf(3, 0, 4096, 0, erdma::AccessFlags::LOCAL_WRITE)? };
    let dmabuf = mr.into_inner().map_err(|(_, e)| e)?;
    let again = pd.register(dmabuf, erdma::AccessFlags::ALL)?;
    drop(again);
    Ok(())
}
