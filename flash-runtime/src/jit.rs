//! The driver's JIT error log for a PTX it rejected. cudarc's `load_module` returns only
//! the error code, so a rejected PTX is loaded again with `cuModuleLoadDataEx` and
//! `CU_JIT_ERROR_LOG_BUFFER` (diagnostics only: the module, if any, is unloaded at once).

use cudarc::driver::sys;

/// The JIT error log of loading `ptx` in the current context (empty if the driver gave none).
/// Call with the context bound to this thread.
pub(crate) fn error_log(ptx: &str) -> String {
    let Ok(src) = std::ffi::CString::new(ptx) else {
        return "the PTX text contains a NUL byte".into();
    };
    let mut log = vec![0u8; 1 << 16];
    let mut opts = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals = [
        log.as_mut_ptr() as *mut std::ffi::c_void,
        log.len() as *mut std::ffi::c_void,
    ];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `src` is a NUL-terminated PTX image that outlives the call; `opts`/`vals` are
    // two matching option/value pairs; the log buffer and its size are valid and writable
    // for the call (the size is passed by value, as the driver API expects).
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            src.as_ptr() as *const std::ffi::c_void,
            opts.len() as u32,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        )
    };
    if rc == sys::CUresult::CUDA_SUCCESS && !module.is_null() {
        // SAFETY: `module` was just loaded by the call above and is not used elsewhere.
        unsafe { sys::cuModuleUnload(module) };
    }
    let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).into_owned()
}
