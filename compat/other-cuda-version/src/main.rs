//! Builds and links flash-ptx's runtime against the application's cudarc selection
//! (CUDA 13.0 bindings, dynamic loading); runs without a GPU or driver.

use flash_ptx::runtime::{FlashAttention, FlashError, driver_present};

fn main() -> Result<(), FlashError> {
    // One cudarc in the graph: flash-runtime's re-export is this crate's `cudarc`.
    let ours: Option<std::sync::Arc<cudarc::driver::CudaContext>> = None;
    let _: Option<std::sync::Arc<flash_ptx::runtime::cudarc::driver::CudaContext>> = ours;
    println!("CUDA bindings: cudarc with cuda-13000, dynamic loading");
    if driver_present() {
        let rt = FlashAttention::on_device(0)?;
        let (major, minor) = rt.context().compute_capability()?;
        println!("driver present: device 0 is sm_{major}{minor}");
    } else {
        println!("no NVIDIA driver on this machine: built and linked, nothing launched");
    }
    Ok(())
}
