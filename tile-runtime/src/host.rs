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

/// `Error::Shape` unless a tensor of `shape` and `strides` can be seen
/// with shape `to`: contiguous, and with as many elements.
pub(crate) fn check_reshape(shape: &[usize], strides: &[usize], to: &[usize]) -> Result<()> {
    if elements(to)? != shape.iter().product::<usize>() || strides != contiguous_strides(shape) {
        return Err(Error::Shape(format!(
            "can't reshape {shape:?} (strides {strides:?}) to {to:?}"
        )));
    }
    Ok(())
}

/// The number of elements of `shape`, or `Error::Shape` where the product
/// overflows a `usize`.
pub fn elements(shape: &[usize]) -> Result<usize> {
    (shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)))
        .ok_or_else(|| Error::Shape(format!("shape {shape:?} has more elements than a usize counts")))
}

/// The largest element offset a (shape, strides) pair reaches, plus one
/// (0 for an empty shape), or `Error::Shape` where that overflows a
/// `usize`.
pub fn span(shape: &[usize], strides: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    (shape.iter().zip(strides))
        .try_fold(1usize, |end, (n, s)| {
            (n - 1).checked_mul(*s).and_then(|o| end.checked_add(o))
        })
        .ok_or_else(|| {
            Error::Shape(format!(
                "shape {shape:?} with strides {strides:?} reaches past what a usize counts"
            ))
        })
}

/// Whether two different indices of a (shape, strides) view can reach the
/// same element: a written view must not, or its blocks would race. Exact
/// for the layouts tensors have (each stride at least the extent of the
/// dimensions with smaller strides); other interleavings count as overlap.
pub fn overlaps(shape: &[usize], strides: &[usize]) -> bool {
    let mut dims: Vec<(usize, usize)> = (shape.iter().copied().zip(strides.iter().copied()))
        .filter(|&(n, _)| n > 1)
        .map(|(n, s)| (s, n))
        .collect();
    dims.sort_unstable();
    let mut extent = 1usize;
    for (stride, n) in dims {
        if stride < extent {
            return true;
        }
        extent = stride.saturating_mul(n - 1).saturating_add(extent);
    }
    false
}

impl<T: Element> HostTensor<T> {
    /// A contiguous tensor over `data`.
    pub fn from_vec(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        let n = elements(shape)?;
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
        elements(shape)?;
        let need = span(shape, strides)?;
        if need > data.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} with strides {strides:?} needs {need} elements of data, and the data has {}",
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
    ///
    /// # Panics
    ///
    /// Where the shape has more elements than a `usize` counts (as
    /// `vec![value; n]` does past its capacity); [`HostTensor::from_vec`]
    /// returns an error instead.
    pub fn full(shape: &[usize], value: T) -> Self {
        let n = elements(shape).unwrap_or_else(|e| panic!("{e}"));
        HostTensor {
            data: vec![value; n],
            strides: contiguous_strides(shape),
            shape: shape.to_vec(),
        }
    }

    /// A contiguous tensor of `shape` filled with zeros (`T::default()`).
    /// Panics as [`HostTensor::full`] does.
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

    /// The element at `index` if in bounds (negative coordinates are out;
    /// an index of another rank is `None`).
    pub fn checked(&self, index: &[i64]) -> Option<T> {
        self.checked_offset(index).map(|o| self.data[o])
    }

    /// Writes `value` at `index` if in bounds (of the tensor's rank);
    /// returns whether it did.
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
        if index.len() != self.rank() {
            return None;
        }
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
        self.reshape_in_place(shape)?;
        Ok(self)
    }

    /// [`HostTensor::reshape`] in place.
    pub fn reshape_in_place(&mut self, shape: &[usize]) -> Result<()> {
        check_reshape(&self.shape, &self.strides, shape)?;
        self.strides = contiguous_strides(shape);
        self.shape = shape.to_vec();
        Ok(())
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
