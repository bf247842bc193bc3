fn main() {
    let m = flash_codegen::kernels::probe::module(flash_codegen::DType::Bf16);
    print!("{}", flash_codegen::ptx::print::module(&m));
}
