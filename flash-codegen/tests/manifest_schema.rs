//! Manifest layer, tests: `manifest.schema.json` ([`manifest::SCHEMA`]) describes exactly
//! what the manifest writes. Every kernel's manifest validates against it; a missing field,
//! an unknown one or a wrong value does not; and each of its enums is the set of values
//! the Rust enums serialize to, so neither side can drift from the other. (The sm90a
//! section's values: manifest_schema_sm90a.rs.)
//! (The validator, for the subset of JSON Schema the schema uses: schema_validator/.)

use std::collections::BTreeSet;

use flash_codegen::abi::AbiTy;
use flash_codegen::manifest;
use flash_codegen::spec::{HEAD_DIMS, Sm80Tiles, parse_override};
use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Sm80Layout, TileConfig, Tiling, Tuning};
use schema_support::{
    allowed, each_edit_fails_once, edited, every_kernel, schema, serialized, validate,
};
use schema_validator::{ANNOTATIONS, ASSERTIONS};
use serde_json::{Value, json};

mod schema_support;
mod schema_validator;

/// Every subschema of `s` (itself, `$defs`, `properties`, `items`, `additionalProperties`).
fn subschemas(s: &Value, out: &mut Vec<Value>) {
    out.push(s.clone());
    let o = s.as_object().unwrap();
    for key in ["$defs", "properties"] {
        for sub in o
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
        {
            subschemas(sub, out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = o.get(key) {
            subschemas(sub, out);
        }
    }
}

#[test]
fn the_schema_is_draft_2020_12_in_the_validators_subset() {
    let s = schema();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(s["properties"]["format"]["const"], manifest::FORMAT);
    let mut all = Vec::new();
    subschemas(&s, &mut all);
    for sub in &all {
        for key in sub.as_object().unwrap().keys() {
            let k = key.as_str();
            assert!(
                ANNOTATIONS.contains(&k) || ASSERTIONS.contains(&k),
                "`{k}` is not in the validator's subset"
            );
        }
        // Every object is closed and every field it lists is required.
        if let Some(props) = sub.get("properties").and_then(Value::as_object) {
            assert_eq!(sub["additionalProperties"], false, "{sub}");
            let listed: BTreeSet<&str> = props.keys().map(String::as_str).collect();
            let required: BTreeSet<&str> = sub["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert_eq!(listed, required, "{sub}");
        }
    }
}

#[test]
fn every_kernels_manifest_validates() {
    let errs = validate(&every_kernel());
    assert!(errs.is_empty(), "{errs:#?}");
    // A tuned manifest too (its tiles are the override's).
    let row = parse_override("bwd:64=64,64,4,2,1,resident").unwrap();
    let tuning = Tuning::new(vec![row]).unwrap();
    let tuned = manifest::manifest_tuned(&KernelSpec::all(), &tuning).to_json();
    let errs = validate(&serde_json::from_str(&tuned).unwrap());
    assert!(errs.is_empty(), "{errs:#?}");
}

/// Each change makes the manifest invalid, with one error, at the place changed.
#[test]
fn a_missing_field_an_unknown_field_or_a_wrong_value_fails() {
    let missing = [
        (
            "/kernels/3/launch",
            "/kernels/3: missing required property `launch`",
        ),
        (
            "/kernels/0/spec/mask",
            "/kernels/0/spec: missing required property `mask`",
        ),
        (
            "/kernels/0/min_seqlen_q",
            "/kernels/0: missing required property `min_seqlen_q`",
        ),
        (
            "/notes/launch",
            "/notes: missing required property `launch`",
        ),
        (
            "/generator/version",
            "/generator: missing required property `version`",
        ),
        (
            "/kernels/0/launch/block/2",
            "/kernels/0/launch/block: 2 items, minItems is 3",
        ),
    ];
    let wrong = [
        ("/extra", json!(1), ": unknown property `extra`"),
        (
            "/kernels/0/spec/causal",
            json!(true),
            "/kernels/0/spec: unknown property `causal`",
        ),
        (
            "/kernels/1/tiles/resident",
            json!(true),
            "/kernels/1/tiles: unknown property",
        ),
        (
            "/kernels/0/spec/dtype",
            json!("f32"),
            "/kernels/0/spec/dtype: \"f32\" is not one of",
        ),
        (
            "/kernels/0/spec/pass",
            json!("bwdpre"),
            "/kernels/0/spec/pass: \"bwdpre\" is not one",
        ),
        (
            "/kernels/0/spec/head_dim",
            json!(100),
            "/kernels/0/spec/head_dim: 100 is not one",
        ),
        (
            "/kernels/0/tiles/layout",
            json!("swizzled"),
            "/kernels/0/tiles/layout: \"swizzled\"",
        ),
        (
            "/kernels/0/tiles/arch",
            json!("sm90"),
            "/kernels/0/tiles/arch: \"sm90\" is not one",
        ),
        (
            "/kernels/0/params/0/type",
            json!("u16"),
            "/kernels/0/params/0/type: \"u16\" is not",
        ),
        (
            "/kernels/0/params/0/numpy",
            json!("int64"),
            "/kernels/0/params/0/numpy: \"int64\"",
        ),
        ("/format", json!(2), "/format: 2 is not 3"),
        (
            "/generator/name",
            json!("other"),
            "/generator/name: \"other\" is not \"flash-ptx\"",
        ),
        (
            "/kernels/0/params/2/index",
            json!(-1),
            "/kernels/0/params/2/index: -1 is beyond",
        ),
        (
            "/kernels/0/tiles/warps",
            json!(0),
            "/kernels/0/tiles/warps: 0 is beyond the minimum",
        ),
        (
            "/kernels/0/min_seqlen_q",
            json!("8192"),
            "/kernels/0/min_seqlen_q: \"8192\" is not of",
        ),
        (
            "/kernels/0/launch/dynamic_smem_bytes",
            json!(1.5),
            "dynamic_smem_bytes: 1.5 is not of",
        ),
        (
            "/kernels/0/launch/needs_smem_opt_in",
            json!(0),
            "needs_smem_opt_in: 0 is not of type",
        ),
        (
            "/kernels/0/launch/grid",
            json!(["1", "1"]),
            "/kernels/0/launch/grid: 2 items",
        ),
        (
            "/notes/semantics/0",
            json!(7),
            "/notes/semantics/0: 7 is not of type",
        ),
    ];
    let good = every_kernel();
    each_edit_fails_once(&good, &missing, &wrong);
    // A null where the schema allows one.
    let errs = validate(&edited(
        &good,
        "/kernels/0/smem_optin_below",
        Some(Value::Null),
    ));
    assert!(errs.is_empty(), "{errs:#?}");
}

/// Every tiling. A new variant fails to compile here until it is listed (then the schema
/// needs it too, which the test below checks).
fn tilings() -> [Tiling; 5] {
    let all = [
        Tiling::Standard,
        Tiling::Long,
        Tiling::Compact,
        Tiling::Prefill,
        Tiling::Wide,
    ];
    for t in all {
        match t {
            Tiling::Standard | Tiling::Long | Tiling::Compact | Tiling::Prefill | Tiling::Wide => {}
        }
    }
    all
}

/// Every sm_80 layout (as [`tilings`]).
fn layouts() -> [Sm80Layout; 5] {
    use Sm80Layout::{Exchange, ExchangeLatePrefetch, KeySplit, Resident, Streamed};
    let all = [Streamed, Resident, Exchange, ExchangeLatePrefetch, KeySplit];
    for l in all {
        match l {
            Streamed | Resident | Exchange | ExchangeLatePrefetch | KeySplit => {}
        }
    }
    all
}

/// One tile row of each architecture (as [`tilings`]): the `arch` tag of each.
fn tile_archs() -> BTreeSet<String> {
    let sm80: Sm80Tiles = *"fa2_fwd_d64_f16_sm80"
        .parse::<KernelSpec>()
        .unwrap()
        .tiles()
        .sm80();
    [TileConfig::Sm80(sm80)]
        .iter()
        .map(|t| match t {
            TileConfig::Sm80(_) => serde_json::to_value(t).unwrap()["arch"].to_string(),
        })
        .collect()
}

#[test]
fn the_schemas_enums_are_what_the_rust_enums_serialize_to() {
    let spec = "/$defs/spec/properties";
    assert_eq!(allowed(&format!("{spec}/pass")), serialized(Pass::ALL));
    assert_eq!(allowed(&format!("{spec}/head_dim")), serialized(HEAD_DIMS));
    assert_eq!(allowed(&format!("{spec}/dtype")), serialized(DType::ALL));
    assert_eq!(allowed(&format!("{spec}/mask")), serialized(Mask::ALL));
    assert_eq!(allowed(&format!("{spec}/tiling")), serialized(tilings()));
    assert_eq!(allowed(&format!("{spec}/arch")), serialized(Arch::ALL));
    let tiles = "/$defs/tiles/properties";
    assert_eq!(allowed(&format!("{tiles}/layout")), serialized(layouts()));
    assert_eq!(allowed(&format!("{tiles}/arch")), tile_archs());
    let param = "/$defs/param/properties";
    assert_eq!(allowed(&format!("{param}/type")), serialized(AbiTy::ALL));
    assert_eq!(
        allowed(&format!("{param}/numpy")),
        serialized(AbiTy::ALL.map(AbiTy::numpy))
    );
    assert_eq!(
        allowed(&format!("{param}/size")),
        serialized(AbiTy::ALL.map(AbiTy::size))
    );
    let targets = Arch::ALL.map(|a| flash_codegen::kernels::target(a).name());
    assert_eq!(
        allowed("/$defs/kernel/properties/target"),
        serialized(targets)
    );
    assert_eq!(
        allowed("/properties/format"),
        serialized([manifest::FORMAT])
    );
}
