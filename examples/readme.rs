//! List RDMA devices, open the first, print its ports and GIDs, register a buffer.
use erdma::{AccessFlags, Result};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}"); // one line: the verb, the errno and the fix
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let devices = erdma::devices();
    let Some(dev) = devices.iter().next() else {
        let why = devices.reason().map(|r| r.to_string()).unwrap_or_default();
        println!("{why}"); // no RDMA here: the reason says why
        return Ok(());
    };
    let ctx = dev.open()?;
    let (name, transport, is_erdma) = (ctx.name(), ctx.transport(), ctx.is_erdma());
    println!("{name} ({transport}), eRDMA: {is_erdma}");
    for port in ctx.ports()? {
        let (n, state, mtu) = (port.port(), port.state(), port.active_mtu());
        println!("port {n}: {state}, active MTU {mtu:?}");
        for g in ctx.gid_table(n)? {
            println!("  GID[{}] {} {} {:?}", g.index, g.gid, g.gid_type, g.netdev);
        }
    }
    let gid = ctx.select_gid(1, None)?; // the GID NCCL would pick
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(vec![0u8; 1 << 20], AccessFlags::ALL)?;
    println!("GID index {}: {} rkey {:#x}", gid.index, gid.gid, mr.rkey());
    Ok(())
}
