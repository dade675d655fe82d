//! [`BurnTensor`]: a burn float primitive with its logical shape.

use adrules_core::Dims;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use crate::convert::shape_of;

/// A burn float primitive with its logical shape: the
/// [`Backend::Tensor`](adrules_core::Backend::Tensor) of [`BurnBackend`](crate::BurnBackend).
/// burn writes a scalar as a tensor of shape `[1]` (its autodiff and several backends do not
/// take rank-0 tensors), so a logical scalar (dims `[]`) is stored with primitive shape `[1]`.
/// Cheap to clone (burn handles are reference counted).
#[derive(Clone, Debug)]
pub struct BurnTensor<B: Backend> {
    pub(crate) primitive: FloatTensor<B>,
    pub(crate) dims: Dims,
}

impl<B: Backend> BurnTensor<B> {
    /// The primitive with its own shape as logical shape.
    pub fn new(primitive: FloatTensor<B>) -> Self {
        Self::read(primitive, false)
    }

    /// The primitive read as a scalar when `scalar` and it has one element (burn's
    /// shape-`[1]` convention), with its own shape otherwise.
    pub fn read(primitive: FloatTensor<B>, scalar: bool) -> Self {
        let shape = primitive.shape();
        let scalar = scalar && shape.num_elements() == 1 && shape.num_dims() <= 1;
        let dims = if scalar {
            Dims::new()
        } else {
            shape.iter().copied().collect()
        };
        BurnTensor { primitive, dims }
    }

    /// The logical shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The primitive.
    pub fn primitive(&self) -> &FloatTensor<B> {
        &self.primitive
    }

    /// The primitive, reshaped to `shape` when it differs (a scalar's `[1]` / `[]`).
    pub fn into_primitive_shaped(self, shape: &[usize]) -> FloatTensor<B> {
        if self.primitive.shape().as_slice() == shape {
            self.primitive
        } else {
            B::float_reshape(self.primitive, shape_of(shape))
        }
    }

    /// The primitive.
    pub fn into_primitive(self) -> FloatTensor<B> {
        self.primitive
    }

    /// A primitive of shape `physical(dims)` holding a tensor of logical shape `dims`.
    pub(crate) fn logical(primitive: FloatTensor<B>, dims: &[usize]) -> Self {
        let dims = dims.into();
        BurnTensor { primitive, dims }
    }
}
