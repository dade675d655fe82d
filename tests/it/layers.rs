//! The trainable layers of burn and candle start from the same parameters, to the bit: both
//! draw them from `adrules::layers` with the same seed and round them to the layer's dtype.

use adrules::burn::burn_tensor::{DType as BurnDType, Device as BurnDevice, Tensor};
use adrules::burn::nn as burn_nn;
use adrules::candle::candle_core::{DType as CandleDType, Device, Tensor as CandleTensor};
use adrules::candle::nn as candle_nn;
use adrules::candle::nn::candle_nn::{VarBuilder, VarMap};

/// A tensor's values as f64 bit patterns (exact for f32 and f64 values).
fn burn_bits<const D: usize>(t: Tensor<D>) -> Vec<u64> {
    t.into_data().iter::<f64>().map(f64::to_bits).collect()
}

fn candle_bits(t: &CandleTensor) -> Vec<u64> {
    let v = t.to_dtype(CandleDType::F64).unwrap().flatten_all().unwrap();
    v.to_vec1::<f64>()
        .unwrap()
        .into_iter()
        .map(f64::to_bits)
        .collect()
}

#[test]
fn burn_and_candle_layers_start_from_the_same_parameters() {
    let device = BurnDevice::flex();
    for (bd, cd) in [
        (BurnDType::F32, CandleDType::F32),
        (BurnDType::F64, CandleDType::F64),
    ] {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, cd, &Device::Cpu);

        let core = adrules::layers::DeqConfig::new(5)
            .with_input_features(3)
            .with_seed(11);
        let c = candle_nn::Deq::new(&core, vb.pp("deq")).unwrap();
        let burn_deq = |seed| {
            burn_nn::DeqConfig::new(5)
                .with_input_features(Some(3))
                .with_seed(seed)
                .with_dtype(Some(bd))
                .init(&device)
                .unwrap()
        };
        let b = burn_deq(11);
        assert_eq!(burn_bits(b.w.val()), candle_bits(c.w()), "{bd:?} W");
        let (bu, cu) = (b.u.as_ref().unwrap().val(), c.u().unwrap());
        assert_eq!(burn_bits(bu), candle_bits(cu), "{bd:?} U");
        let (bb, cb) = (b.b.as_ref().unwrap().val(), c.b().unwrap());
        assert_eq!(burn_bits(bb), candle_bits(cb), "{bd:?} b");
        // a different seed gives different parameters (the comparison can fail)
        let other = burn_deq(12);
        assert_ne!(burn_bits(other.w.val()), candle_bits(c.w()));

        let shapes = vec![vec![4, 3], vec![3, 2]];
        let core = adrules::layers::EinsumConfig::new("bi,ij,jk->bk", shapes.clone()).with_seed(5);
        let c = candle_nn::Einsum::new(&core, vb.pp("einsum")).unwrap();
        let b = burn_nn::EinsumConfig::new("bi,ij,jk->bk".into(), shapes)
            .with_seed(5)
            .with_dtype(Some(bd))
            .init(&device)
            .unwrap();
        assert_eq!(b.weights.len(), 2);
        for (k, (bw, cw)) in b.weights.iter().zip(c.weights()).enumerate() {
            let bw: Tensor<2> = bw.value().unwrap();
            assert_eq!(burn_bits(bw), candle_bits(cw), "{bd:?} einsum weight {k}");
        }
    }
}
