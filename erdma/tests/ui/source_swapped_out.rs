// A prepared send's source is lent between posts for writing, never as a
// `&mut MemoryRegion`: swapped for another region, the bound source would
// move out of the borrow, and another thread could write it while a post
// has the CPU copy it (inline data).
use erdma::{Lane, MemoryRegion, RemoteBuffer, SendRequest};

fn swap(lane: &Lane, mut src: MemoryRegion, mut other: MemoryRegion, remote: RemoteBuffer) {
    let mut write = lane
        .prepare_send_mut(&mut src, |m| {
            Ok(SendRequest::write([m.slice(..8)?], remote).inline())
        })
        .unwrap();
    std::mem::swap(&mut *write.source_mut(), &mut other);
    let handle = std::thread::spawn(move || other.write_byte(0, 1));
    write.post().unwrap();
    handle.join().unwrap().unwrap();
}

fn main() {}
