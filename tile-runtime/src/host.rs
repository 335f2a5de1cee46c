//! Tensors in host memory: what the CPU reference versions of kernels read
//! and write, and what device tensors are uploaded from and downloaded to.

use crate::{Element, Error, Result};

/// An n-dimensional array in host memory with element strides.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor<T> {
    data: Vec<T>,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

/// Row-major (contiguous) strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The largest element offset a (shape, strides) pair reaches, plus one.
pub fn span(shape: &[usize], strides: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    1 + shape.iter().zip(strides).map(|(n, s)| (n - 1) * s).sum::<usize>()
}

impl<T: Element> HostTensor<T> {
    /// A contiguous tensor over `data`.
    pub fn from_vec(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} holds {n} elements but the data has {}",
                data.len()
            )));
        }
        Ok(HostTensor {
            data,
            strides: contiguous_strides(shape),
            shape: shape.to_vec(),
        })
    }

    /// A view of `data` with explicit element strides.
    pub fn from_vec_strided(data: Vec<T>, shape: &[usize], strides: &[usize]) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} and strides {strides:?} have different ranks"
            )));
        }
        let need = span(shape, strides);
        if need > data.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} with strides {strides:?} reaches element {} but the data has {}",
                need - 1,
                data.len()
            )));
        }
        Ok(HostTensor {
            data,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        })
    }

    /// A contiguous tensor of `shape` with every element `value`.
    pub fn full(shape: &[usize], value: T) -> Self {
        let n = shape.iter().product();
        HostTensor {
            data: vec![value; n],
            strides: contiguous_strides(shape),
            shape: shape.to_vec(),
        }
    }

    /// A contiguous tensor of `shape` filled with zeros (`T::default()`).
    pub fn zeros(shape: &[usize]) -> Self {
        Self::full(shape, T::default())
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The distance, in elements, between neighbours along each dimension.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements (the product of the shape).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (a dimension of size 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The backing storage (for strided views, including the gaps).
    pub fn storage(&self) -> &[T] {
        &self.data
    }

    fn offset(&self, index: &[usize]) -> usize {
        index.iter().zip(&self.strides).map(|(i, s)| i * s).sum()
    }

    /// The element at `index` (panics when out of bounds, like slice indexing).
    pub fn at(&self, index: &[usize]) -> T {
        assert!(
            index.len() == self.rank() && index.iter().zip(&self.shape).all(|(i, n)| i < n),
            "index {index:?} out of bounds for shape {:?}",
            self.shape
        );
        self.data[self.offset(index)]
    }

    /// Writes `value` at `index` (panics when out of bounds, like slice indexing).
    pub fn set(&mut self, index: &[usize], value: T) {
        assert!(
            index.len() == self.rank() && index.iter().zip(&self.shape).all(|(i, n)| i < n),
            "index {index:?} out of bounds for shape {:?}",
            self.shape
        );
        let o = self.offset(index);
        self.data[o] = value;
    }

    /// The element at `index` if in bounds (negative coordinates are out).
    pub fn checked(&self, index: &[i64]) -> Option<T> {
        self.checked_offset(index).map(|o| self.data[o])
    }

    /// Writes `value` at `index` if in bounds; returns whether it did.
    pub fn checked_set(&mut self, index: &[i64], value: T) -> bool {
        match self.checked_offset(index) {
            Some(o) => {
                self.data[o] = value;
                true
            }
            None => false,
        }
    }

    fn checked_offset(&self, index: &[i64]) -> Option<usize> {
        let mut o = 0;
        for ((&i, &n), &s) in index.iter().zip(&self.shape).zip(&self.strides) {
            if i < 0 || i as usize >= n {
                return None;
            }
            o += i as usize * s;
        }
        Some(o)
    }

    /// The same elements seen with another shape of equal size (contiguous tensors only).
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != self.len() || self.strides != contiguous_strides(&self.shape) {
            return Err(Error::Shape(format!(
                "can't reshape {:?} (strides {:?}) to {shape:?}",
                self.shape, self.strides
            )));
        }
        self.strides = contiguous_strides(shape);
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// All elements in row-major order.
    pub fn to_vec(&self) -> Vec<T> {
        if self.strides == contiguous_strides(&self.shape) {
            return self.data[..self.len()].to_vec();
        }
        let mut out = Vec::with_capacity(self.len());
        let mut idx = vec![0usize; self.rank()];
        for _ in 0..self.len() {
            out.push(self.data[self.offset(&idx)]);
            for d in (0..self.rank()).rev() {
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }
}
