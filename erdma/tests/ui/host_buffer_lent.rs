// A host region's buffer is not lent by reference: a peer (REMOTE_WRITE) or
// a posted receive may be writing it. Read it with as_slice (checked) or by
// copies; only device-memory handles (OpaqueMemory) are lent by buffer().
use erdma::MemoryRegion;

fn peek(region: &MemoryRegion<Vec<u8>>) -> &[u8] {
    region.buffer()
}

fn main() {}
