//! A launch's arguments as both backends take them: tensors seen without
//! their element type ([`TensorView`]; on the CPU also as [`HostTensorArg`],
//! to take the typed tensor back), and [`Arg`], one per kernel parameter.

use crate::{Element, HostTensor};
use std::any::Any;
use tile_spec::DType;

/// A tensor of either backend seen without its element type: what generic
/// host code and the launch checks read.
pub trait TensorView {
    /// The element type.
    fn dtype(&self) -> DType;
    /// Elements along each dimension.
    fn shape(&self) -> &[usize];
    /// Elements between neighbours along each dimension.
    fn strides(&self) -> &[usize];
    /// Dimensions.
    fn rank(&self) -> usize {
        self.shape().len()
    }
    /// Number of elements.
    fn len(&self) -> usize {
        self.shape().iter().product()
    }
    /// Whether the tensor has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A host tensor argument with its element type erased: the CPU versions
/// take their typed tensor back from it (see [`crate::host_tensor`]).
pub trait HostTensorArg: TensorView {
    /// The tensor, to downcast to its `HostTensor<T>`.
    fn as_any(&self) -> &dyn Any;
    /// The tensor, writable, to downcast to its `HostTensor<T>`.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Element> TensorView for HostTensor<T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }
    fn shape(&self) -> &[usize] {
        HostTensor::shape(self)
    }
    fn strides(&self) -> &[usize] {
        HostTensor::strides(self)
    }
}

impl<T: Element> HostTensorArg for HostTensor<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// One argument of a launch, in the kernel's parameter order: a tensor of
/// the backend (as its [`Backend::Operand`](crate::Backend::Operand), `O`) or a scalar. The
/// generated launchers build these; a kernel's parameters say which each
/// must be.
pub enum Arg<'a, O: ?Sized> {
    /// A tensor the kernel only reads.
    Tensor(&'a O),
    /// A tensor the kernel writes.
    TensorMut(&'a mut O),
    /// An `f32` scalar.
    F32(f32),
    /// An `i32` scalar.
    I32(i32),
    /// A `u32` scalar.
    U32(u32),
}

/// An argument of a launch on the CPU.
pub type HostArg<'a> = Arg<'a, dyn HostTensorArg>;

impl<O: TensorView + ?Sized> Arg<'_, O> {
    /// The tensor, read-only or not; `None` for a scalar.
    pub(crate) fn tensor_view(&self) -> Option<&O> {
        match self {
            Arg::Tensor(t) => Some(*t),
            Arg::TensorMut(t) => Some(&**t),
            _ => None,
        }
    }
}
