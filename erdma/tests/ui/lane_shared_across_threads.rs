// A lane is used from one thread: its completion counters are not shared,
// so a reference to it cannot go to another thread.
use erdma::Lane;

fn share(lane: &Lane) {
    std::thread::scope(|s| {
        s.spawn(|| lane.send_credits());
    });
}

fn main() {}
