// Vouching for raw memory is unsafe.
fn main() {
    let _raw = erdma::RawBuffer::new(0x1000 as *mut u8, 64);
}
