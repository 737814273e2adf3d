//! List the RDMA devices, open the first, print its ports and GIDs, register a buffer.
fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> erdma::Result<()> {
    let devices = erdma::devices();
    let Some(dev) = devices.iter().next() else {
        println!(
            "{}",
            devices.reason().map(|r| r.to_string()).unwrap_or_default()
        );
        return Ok(());
    };
    let ctx = dev.open()?;
    let a = ctx.attributes();
    println!(
        "{}: {}, vendor {:#x} part {}, eRDMA: {}",
        ctx.name(),
        ctx.transport(),
        a.vendor_id(),
        a.vendor_part_id(),
        ctx.is_erdma()
    );
    for port in ctx.ports()? {
        let mtu = port.active_mtu().map_or(0, |m| m.bytes());
        println!(
            "  port {}: {} {} active_mtu {mtu}",
            port.port(),
            port.state(),
            port.link_layer()
        );
        for g in ctx.gid_table(port.port())? {
            println!(
                "    GID[{}] {} {} {}",
                g.index,
                g.gid,
                g.gid_type,
                g.netdev.as_deref().unwrap_or("-")
            );
        }
    }
    println!("  NCCL-style GID index: {}", ctx.select_gid(1, None)?.index);
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(vec![0u8; 1 << 20], erdma::AccessFlags::ALL)?;
    println!(
        "  registered {} bytes: lkey {:#x} rkey {:#x}",
        mr.len(),
        mr.lkey(),
        mr.rkey()
    );
    Ok(())
}
