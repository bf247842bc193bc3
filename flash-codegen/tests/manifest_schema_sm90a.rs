//! Manifest layer, tests: the schema's `sm90a` section. Every sm_90a variant's entry
//! validates; a missing field or a wrong value in it does not; and its enums are the
//! values the section writes: the variants' fields, the parameter types and alignments,
//! the tensor maps' driver enums (cuda.h names and values) and limits.

use flash_codegen::abi::AbiTy;
use flash_codegen::kernels::sm90::fwd;
use flash_codegen::manifest::{self, sm90a};
use flash_codegen::{DType, Mask, Pass, Tuning};
use schema_support::{allowed, each_edit_fails_once, every_kernel, serialized, validate};
use serde_json::json;

mod schema_support;
#[allow(dead_code)] // its keyword lists are manifest_schema.rs's
mod schema_validator;

#[test]
fn every_sm90a_variants_entry_validates() {
    // every variant, not only the shipping ones (every_kernel's)
    let all = manifest::manifest_with_sm90a(&[], &fwd::Variant::all(), &Tuning::NONE).to_json();
    let errs = validate(&serde_json::from_str(&all).unwrap());
    assert!(errs.is_empty(), "{errs:#?}");
    let errs = validate(&every_kernel());
    assert!(errs.is_empty(), "{errs:#?}");
}

/// Each change makes the manifest invalid, with one error, at the place changed.
#[test]
fn a_missing_field_or_a_wrong_value_in_the_section_fails() {
    let missing = [
        ("/sm90a", ": missing required property `sm90a`"),
        (
            "/sm90a/kernels/0/tensor_maps/1/swizzle",
            "/sm90a/kernels/0/tensor_maps/1: missing required property `swizzle`",
        ),
        (
            "/sm90a/kernels/2/params/4/offset",
            "/sm90a/kernels/2/params/4: missing required property `offset`",
        ),
    ];
    let wrong = [
        (
            "/sm90a/kernels/0/tensor_maps/0/swizzle/value",
            json!(2),
            "/sm90a/kernels/0/tensor_maps/0/swizzle/value: 2 is not one",
        ),
        (
            "/sm90a/kernels/0/tensor_maps/2/data_type/name",
            json!("CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
            "/sm90a/kernels/0/tensor_maps/2/data_type/name: \"CU_TENSOR_MAP_DATA_TYPE_FLOAT32\"",
        ),
        (
            "/sm90a/kernels/1/variant/mask",
            json!("window"),
            "/sm90a/kernels/1/variant/mask: \"window\" is not one",
        ),
        (
            "/sm90a/kernels/1/target",
            json!("sm_80"),
            "/sm90a/kernels/1/target: \"sm_80\" is not one",
        ),
        (
            "/sm90a/kernels/0/params/0/align",
            json!(16),
            "/sm90a/kernels/0/params/0/align: 16 is not one",
        ),
        (
            "/sm90a/kernels/0/launch/extra",
            json!(1),
            "/sm90a/kernels/0/launch: unknown property `extra`",
        ),
    ];
    let good = every_kernel();
    each_edit_fails_once(&good, &missing, &wrong);
}

#[test]
fn the_sm90a_enums_are_what_the_section_writes() {
    use sm90a::maps;
    let var = "/$defs/sm90a_variant/properties";
    let vars = fwd::Variant::all();
    assert_eq!(allowed(&format!("{var}/pass")), serialized([Pass::Fwd]));
    assert_eq!(
        allowed(&format!("{var}/head_dim")),
        serialized(fwd::HEAD_DIMS)
    );
    assert_eq!(allowed(&format!("{var}/dtype")), serialized(DType::ALL));
    assert_eq!(allowed(&format!("{var}/mask")), serialized(Mask::ALL));
    assert_eq!(
        allowed(&format!("{var}/consumers")),
        serialized(vars.iter().map(|v| v.consumers))
    );
    let kernel = "/$defs/sm90a_kernel/properties";
    let target = flash_codegen::ptx::Target::Sm90a.name();
    assert_eq!(allowed(&format!("{kernel}/target")), serialized([target]));
    assert_eq!(
        allowed(&format!("{kernel}/arch")),
        serialized([sm90a::ARCH])
    );
    for cc in ["min", "max"] {
        let at = format!("{kernel}/{cc}_compute_capability");
        assert_eq!(allowed(&at), serialized([sm90a::COMPUTE_CAPABILITY]));
    }
    let entries: Vec<sm90a::Sm90aKernel> = vars.iter().map(sm90a::kernel).collect();
    let params = entries.iter().flat_map(|k| k.params.iter());
    let param = "/$defs/sm90a_param/properties";
    let tys = sm90a::PARAMS.map(|(_, ty, _)| ty);
    assert_eq!(
        allowed(&format!("{param}/type")),
        serialized(tys.map(AbiTy::name))
    );
    assert_eq!(
        allowed(&format!("{param}/numpy")),
        serialized(tys.map(AbiTy::numpy))
    );
    assert_eq!(
        allowed(&format!("{param}/size")),
        serialized(tys.map(AbiTy::size))
    );
    assert_eq!(
        allowed(&format!("{param}/align")),
        serialized(params.map(|p| p.align))
    );
    let map = "/$defs/tensor_map/properties";
    let maps = entries.iter().flat_map(|k| k.tensor_maps.iter());
    assert_eq!(
        allowed(&format!("{map}/tensor")),
        serialized(maps.clone().map(|m| &m.tensor))
    );
    assert_eq!(
        allowed(&format!("{map}/rank")),
        serialized(maps.clone().map(|m| m.rank))
    );
    assert_eq!(
        allowed(&format!("{map}/encode")),
        serialized([maps::ENCODER])
    );
    let limits = [
        ("global_address_align", maps::ADDRESS_ALIGN as u64),
        ("global_strides_multiple", maps::STRIDE_MULTIPLE as u64),
        ("global_strides_below", maps::STRIDE_LIMIT),
    ];
    for (field, v) in limits {
        assert_eq!(
            allowed(&format!("{map}/{field}")),
            serialized([v]),
            "{field}"
        );
    }
    let enums = [
        ("data_type", DType::ALL.map(maps::data_type).to_vec()),
        ("interleave", vec![maps::INTERLEAVE_NONE]),
        ("swizzle", vec![maps::SWIZZLE_128B]),
        ("l2_promotion", vec![maps::L2_PROMOTION_128B]),
        ("oob_fill", vec![maps::OOB_FILL_NONE]),
    ];
    for (def, values) in enums {
        let at = format!("/$defs/{def}/properties");
        let names = values.iter().map(|(n, _)| *n);
        assert_eq!(allowed(&format!("{at}/name")), serialized(names), "{def}");
        let nums = values.iter().map(|(_, v)| *v);
        assert_eq!(allowed(&format!("{at}/value")), serialized(nums), "{def}");
    }
}
