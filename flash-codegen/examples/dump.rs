//! Prints the PTX of one kernel (by name) or of the mma probe (`probe_f16`, `probe_bf16`).
fn main() {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fa2_fwd_d64_f16_sm80".into());
    let text = match name.as_str() {
        "probe_f16" => flash_codegen::ptx::print::module(
            &flash_codegen::kernels::sm80::probe::module(flash_codegen::DType::F16),
        ),
        "probe_bf16" => flash_codegen::ptx::print::module(
            &flash_codegen::kernels::sm80::probe::module(flash_codegen::DType::Bf16),
        ),
        n => flash_codegen::generate(&n.parse().expect("kernel name")),
    };
    print!("{text}");
}
