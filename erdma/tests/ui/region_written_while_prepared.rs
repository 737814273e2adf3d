// A prepared send keeps the regions it names borrowed while it is used: a
// post of inline data has the CPU copy them, so nothing may write them
// meanwhile (another thread could, with the region moved there). Rewriting
// a source between posts goes through Lane::prepare_send_mut.
use erdma::{Lane, MemoryRegion, RemoteBuffer, SendRequest};

fn rewrite(lane: &Lane, mut src: MemoryRegion, remote: RemoteBuffer) {
    let mut write = lane
        .prepare_send(SendRequest::write([src.all()], remote).inline())
        .unwrap();
    write.post().unwrap();
    let handle = std::thread::spawn(move || src.write_byte(0, 1));
    write.post().unwrap();
    handle.join().unwrap().unwrap();
}

fn main() {}
