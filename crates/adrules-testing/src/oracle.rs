//! Replay of oracle files: independent reference gradients in the JSONL format of
//! `oracles/README.md` in this package (the public `tensor-ad-oracles` database, and
//! `einsum.jsonl` computed for this project), shipped with the package.
//!
//! Each line is one [`OracleCase`]: named inputs, and probes holding a tangent direction per
//! input with the reference output tangent (JVP), and an output cotangent with the reference
//! input cotangents (VJP). Cotangents follow the convention of `rules-math.md`
//! (`z̄ = ∂L/∂re + i·∂L/∂im`). Tensors are row-major; a complex element is `[re, im]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use adrules_core::{Complex32, Complex64, DType, Error, HostData, HostTensor, Result};
use serde_json::Value;

pub use crate::tolerance::Tolerance;

/// One probe: a tangent direction per input with its reference JVP, and an output cotangent
/// with its reference VJP per input.
#[derive(Clone, Debug)]
pub struct OracleProbe {
    /// probe identifier
    pub id: String,
    /// tangent of each input, by input name
    pub direction: BTreeMap<String, HostTensor>,
    /// reference output tangent `J·direction` (PyTorch) of the output named `value`; for a
    /// case with several named outputs (decompositions), the first in name order (all are in
    /// [`jvps`](Self::jvps))
    pub jvp: HostTensor,
    /// output cotangent (of `value`, or the first named output, as for `jvp`)
    pub cotangent: HostTensor,
    /// reference tangent of every named output (`s`, `u`, `uvh`, `output_0`, …)
    pub jvps: BTreeMap<String, HostTensor>,
    /// cotangent of every named output
    pub cotangents: BTreeMap<String, HostTensor>,
    /// reference input cotangents `Jᴴ·cotangent` (PyTorch), by input name
    pub vjp: BTreeMap<String, HostTensor>,
    /// reference Hessian-vector products `H_φ·direction` of `φ = Re⟨cotangent, f(x)⟩`
    /// (PyTorch), by input name; empty when the file has none (f32, complex64)
    pub hvp: BTreeMap<String, HostTensor>,
    /// the same HVPs by central finite differences of the gradient, by input name; empty when
    /// the file has none
    pub fd_hvp: BTreeMap<String, HostTensor>,
}

/// One oracle case.
#[derive(Clone, Debug)]
pub struct OracleCase {
    /// case identifier
    pub id: String,
    /// operation (`"multi_dot"`, `"solve"`)
    pub op: String,
    /// element type of every tensor
    pub dtype: DType,
    /// inputs by name; names sort in call order (`a`, `b`, `c`, …)
    pub inputs: BTreeMap<String, HostTensor>,
    /// first-order comparison tolerances
    pub tolerance: Tolerance,
    /// second-order comparison tolerances (`comparison.second_order`), when the file has them
    pub second_order: Option<Tolerance>,
    /// the probes (none for a case that must be rejected)
    pub probes: Vec<OracleProbe>,
    /// the einsum string (`subscripts`, einsum cases only)
    pub subscripts: Option<String>,
    /// the reference primal value (`output`, einsum cases only)
    pub output: Option<HostTensor>,
    /// `true` when the inputs must be rejected (`expected_behavior: "error"`)
    pub expects_error: bool,
    /// the gauge-invariant function of the outputs the derivatives belong to
    /// (`observable.kind`: `"identity"`, `"svd_s"`, `"svd_u_abs"`, …; `"identity"` when
    /// absent)
    pub observable: String,
    /// the operation's keyword arguments (`op_kwargs`, e.g. `full_matrices`), JSON
    pub kwargs: Value,
}

impl OracleCase {
    /// The tolerance to compare first-order results with: the file's, tightened to our own
    /// per-dtype tolerance (the file's are loose), never tighter than `atol = 1e-5`,
    /// `rtol = 1e-4`.
    pub fn first_order_tolerance(&self) -> Tolerance {
        self.tolerance
            .min(Tolerance::for_dtype(self.dtype).max(Tolerance {
                atol: 1e-5,
                rtol: 1e-4,
            }))
    }

    /// The tolerance to compare second-order results (HVPs) with: the file's second-order
    /// tolerance tightened to our own per-dtype tolerance, never tighter than `atol = 1e-5`,
    /// `rtol = 1e-4`; our own alone when the file has none.
    pub fn second_order_tolerance(&self) -> Tolerance {
        let ours = Tolerance::for_dtype(self.dtype).max(Tolerance {
            atol: 1e-5,
            rtol: 1e-4,
        });
        match self.second_order {
            Some(t) => t.min(ours),
            None => ours,
        }
    }

    /// The error the core's one-call einsum ([`adrules_core::network::einsum`], on the naive
    /// [`ReferenceBackend`](crate::ReferenceBackend)) gives for this case's string and inputs,
    /// or `None` when it accepts them (or the case has no string): what every engine's einsum
    /// must answer for a case the oracle marks as an error.
    pub fn einsum_error(&self) -> Option<Error> {
        let subscripts = self.subscripts.as_deref()?;
        let xs: Vec<std::sync::Arc<HostTensor>> = self
            .inputs_in_order()
            .into_iter()
            .map(|h| std::sync::Arc::new(h.clone()))
            .collect();
        let refs: Vec<&std::sync::Arc<HostTensor>> = xs.iter().collect();
        adrules_core::network::einsum(&crate::ReferenceBackend, subscripts, &refs).err()
    }

    /// The inputs in call order.
    pub fn inputs_in_order(&self) -> Vec<&HostTensor> {
        self.inputs.values().collect()
    }
}

/// The folder of the oracle files: `oracles/` inside this package (`adrules-testing`), where
/// they ship with their licence and provenance (`oracles/README.md`). The path is this
/// package's own source folder, so it is found the same way from this repository, a git
/// checkout or a registry download of the crate, whatever the calling crate is.
pub fn oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oracles")
}

/// The path of the oracle file `file` (e.g. `"einsum.jsonl"`) in [`oracle_dir`].
pub fn oracle_path(file: &str) -> PathBuf {
    oracle_dir().join(file)
}

fn io(path: &str, reason: impl Into<String>) -> Error {
    Error::Io {
        path: path.into(),
        reason: reason.into(),
    }
}

fn dtype_of(s: &str, ctx: &str) -> Result<DType> {
    Ok(match s {
        "float32" => DType::F32,
        "float64" => DType::F64,
        "complex64" => DType::C32,
        "complex128" => DType::C64,
        other => return Err(io(ctx, format!("unknown dtype {other:?}"))),
    })
}

fn tensor(v: &Value, ctx: &str) -> Result<HostTensor> {
    let dtype = dtype_of(v["dtype"].as_str().unwrap_or(""), ctx)?;
    if let Some(order) = v["order"].as_str()
        && order != "row_major"
    {
        return Err(io(ctx, format!("unsupported order {order:?}")));
    }
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .ok_or_else(|| io(ctx, "tensor without shape"))?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<_>>()
        .ok_or_else(|| io(ctx, "non-integer dimension"))?;
    let data = v["data"]
        .as_array()
        .ok_or_else(|| io(ctx, "tensor without data"))?;
    let real = |x: &Value| x.as_f64().ok_or_else(|| io(ctx, "non-numeric element"));
    let cplx = |x: &Value| -> Result<Complex64> {
        match x.as_array().map(|p| p.as_slice()) {
            Some([re, im]) => Ok(Complex64::new(real(re)?, real(im)?)),
            _ => Err(io(ctx, "complex element is not [re, im]")),
        }
    };
    let data = match dtype {
        DType::F32 => HostData::F32(
            data.iter()
                .map(|x| real(x).map(|x| x as f32))
                .collect::<Result<_>>()?,
        ),
        DType::F64 => HostData::F64(data.iter().map(real).collect::<Result<_>>()?),
        DType::C32 => HostData::C32(
            data.iter()
                .map(|x| cplx(x).map(|z| Complex32::new(z.re as f32, z.im as f32)))
                .collect::<Result<_>>()?,
        ),
        DType::C64 => HostData::C64(data.iter().map(cplx).collect::<Result<_>>()?),
    };
    HostTensor::new(&shape, data).map_err(|e| io(ctx, e.to_string()))
}

fn tensor_map(v: &Value, ctx: &str) -> Result<BTreeMap<String, HostTensor>> {
    v.as_object()
        .ok_or_else(|| io(ctx, "expected an object of tensors"))?
        .iter()
        .map(|(k, t)| Ok((k.clone(), tensor(t, &format!("{ctx}.{k}"))?)))
        .collect()
}

/// A map of tensors that may be absent (`null`): empty then.
fn optional_map(v: &Value, ctx: &str) -> Result<BTreeMap<String, HostTensor>> {
    if v.is_null() {
        Ok(BTreeMap::new())
    } else {
        tensor_map(v, ctx)
    }
}

/// Asserts that `got` has `want`'s dtype and is within `tol` of it.
///
/// # Panics
/// On a dtype or value mismatch, with `what` and the worst element in the message.
pub fn assert_close(tol: Tolerance, got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    tol.check(
        &crate::Value::Tensor(got.clone()),
        &crate::Value::Tensor(want.clone()),
        what,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Parses one JSONL line.
///
/// # Errors
/// [`Error::Io`] naming `ctx` and the field at fault.
pub fn parse_case(line: &str, ctx: &str) -> Result<OracleCase> {
    let v: Value = serde_json::from_str(line).map_err(|e| io(ctx, e.to_string()))?;
    let id = v["case_id"].as_str().unwrap_or("?").to_string();
    let ctx = format!("{ctx} ({id})");
    let dtype = dtype_of(v["dtype"].as_str().unwrap_or(""), &ctx)?;
    let expects_error = v["expected_behavior"].as_str() == Some("error");
    let subscripts = v["subscripts"].as_str().map(str::to_string);
    let inputs = tensor_map(&v["inputs"], &format!("{ctx}.inputs"))?;
    let observable = v["observable"]["kind"]
        .as_str()
        .unwrap_or("identity")
        .to_string();
    let kwargs = v["op_kwargs"].clone();
    if expects_error {
        return Ok(OracleCase {
            id,
            op: v["op"].as_str().unwrap_or("").to_string(),
            dtype,
            inputs,
            tolerance: Tolerance::for_dtype(dtype),
            second_order: None,
            probes: Vec::new(),
            subscripts,
            output: None,
            expects_error,
            observable,
            kwargs,
        });
    }
    let tol = &v["comparison"]["first_order"];
    let tolerance = Tolerance {
        atol: tol["atol"]
            .as_f64()
            .ok_or_else(|| io(&ctx, "no first-order atol"))?,
        rtol: tol["rtol"]
            .as_f64()
            .ok_or_else(|| io(&ctx, "no first-order rtol"))?,
    };
    let probes = v["probes"]
        .as_array()
        .ok_or_else(|| io(&ctx, "no probes"))?
        .iter()
        .map(|p| {
            let jvps = tensor_map(&p["pytorch_ref"]["jvp"], &format!("{ctx}.jvp"))?;
            let cotangents = tensor_map(&p["cotangent"], &format!("{ctx}.cotangent"))?;
            let main = |m: &BTreeMap<String, HostTensor>, what: &str| {
                m.get("value")
                    .or_else(|| m.values().next())
                    .cloned()
                    .ok_or_else(|| io(&ctx, format!("no {what}")))
            };
            Ok(OracleProbe {
                id: p["probe_id"].as_str().unwrap_or("?").to_string(),
                direction: tensor_map(&p["direction"], &format!("{ctx}.direction"))?,
                jvp: main(&jvps, "jvp")?,
                cotangent: main(&cotangents, "cotangent")?,
                jvps,
                cotangents,
                vjp: tensor_map(&p["pytorch_ref"]["vjp"], &format!("{ctx}.vjp"))?,
                hvp: optional_map(&p["pytorch_ref"]["hvp"], &format!("{ctx}.hvp"))?,
                fd_hvp: optional_map(&p["fd_ref"]["hvp"], &format!("{ctx}.fd_hvp"))?,
            })
        })
        .collect::<Result<_>>()?;
    let output = if v["output"].is_object() {
        Some(tensor(&v["output"], &format!("{ctx}.output"))?)
    } else {
        None
    };
    let second = &v["comparison"]["second_order"];
    let second_order = match (second["atol"].as_f64(), second["rtol"].as_f64()) {
        (Some(atol), Some(rtol)) => Some(Tolerance { atol, rtol }),
        _ => None,
    };
    Ok(OracleCase {
        id,
        op: v["op"].as_str().unwrap_or("").to_string(),
        dtype,
        inputs,
        tolerance,
        second_order,
        probes,
        subscripts,
        output,
        expects_error,
        observable,
        kwargs,
    })
}

/// The cases of the oracle file `file` (in [`oracle_dir`]) whose dtype is one of `dtypes`.
///
/// # Errors
/// Those of [`load`] ([`Error::Io`] naming the path when the file is missing or a line does
/// not parse).
pub fn load_for(file: &str, dtypes: &[DType]) -> Result<Vec<OracleCase>> {
    let cases = load(&oracle_path(file))?;
    Ok(cases
        .into_iter()
        .filter(|c| dtypes.contains(&c.dtype))
        .collect())
}

/// Reads every case of a JSONL oracle file.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read or a line does not parse.
pub fn load(path: &Path) -> Result<Vec<OracleCase>> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| io(&p, e.to_string()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_case(l, &format!("{p}:{}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_oracle_files_parse_with_every_dtype() {
        for file in ["multi_dot.jsonl", "solve.jsonl", "einsum.jsonl"] {
            let cases = load(&oracle_path(file)).unwrap();
            assert!(!cases.is_empty());
            for dt in DType::ALL {
                assert!(cases.iter().any(|c| c.dtype == dt), "{file} lacks {dt}");
            }
            for c in cases.iter().filter(|c| !c.expects_error) {
                assert!(!c.probes.is_empty());
                for p in &c.probes {
                    assert_eq!(p.direction.len(), c.inputs.len());
                    assert_eq!(p.vjp.len(), c.inputs.len());
                    for (name, t) in &c.inputs {
                        assert_eq!(p.direction[name].dims(), t.dims());
                        assert_eq!(p.vjp[name].dims(), t.dims());
                        assert_eq!(t.dtype(), c.dtype);
                    }
                }
            }
        }
    }

    #[test]
    fn every_shipped_oracle_file_parses_and_has_its_provenance() {
        let readme = std::fs::read_to_string(oracle_dir().join("README.md")).unwrap();
        assert!(oracle_dir().join("LICENSE-MIT").is_file());
        let mut files = 0;
        for entry in std::fs::read_dir(oracle_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                assert!(
                    readme.contains(&format!("`{name}`")),
                    "{name} not in README.md"
                );
                assert!(!load(&path).unwrap().is_empty(), "{name} has no case");
                files += 1;
            }
        }
        assert_eq!(files, 17);
    }

    #[test]
    fn a_missing_oracle_file_is_an_io_error_naming_it() {
        match load_for("no_such_file.jsonl", &DType::ALL) {
            Err(Error::Io { path, .. }) => assert!(path.ends_with("no_such_file.jsonl")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(matches!(parse_case("{", "x"), Err(Error::Io { .. })));
        assert!(matches!(
            parse_case(r#"{"case_id":"c","dtype":"float64"}"#, "x"),
            Err(Error::Io { .. })
        ));
    }
}
