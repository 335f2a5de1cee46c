//! The CPU reference tile library that kernels' CPU versions call: whole
//! tiles as row-major arrays, with the GPU's element semantics (wrapping
//! integer arithmetic, half types computed in f32 and rounded, padding for
//! out-of-bounds loads, dropped out-of-bounds stores). Math functions are
//! the exact ones, so the GPU's approximations are measured against them.

use crate::host::HostTensor;
use crate::{Element, Error};
use std::any::Any;
use std::collections::HashMap;

pub mod ops;

/// A tile: a shape and its elements in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tile<T> {
    /// The size of each dimension.
    pub shape: Vec<usize>,
    /// The elements in row-major order, as many as the shape's product.
    pub data: Vec<T>,
}

fn strides(shape: &[usize]) -> Vec<usize> {
    crate::host::contiguous_strides(shape)
}

/// Calls `f` with each coordinate of `shape` in row-major order.
fn for_each_coord(shape: &[usize], mut f: impl FnMut(&[usize])) {
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        f(&idx);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// A tile of `shape` with every element `v` (`full`, `zeros`, and a scalar
/// broadcast into a tile).
pub fn splat<T: Copy>(shape: &[usize], v: T) -> Tile<T> {
    Tile {
        shape: shape.to_vec(),
        data: vec![v; shape.iter().product()],
    }
}

/// The tile `[0, 1, .., n - 1]` (`arange`).
pub fn arange(n: usize) -> Tile<i32> {
    Tile {
        shape: vec![n],
        data: (0..n as i32).collect(),
    }
}

/// The tile at tile-grid `index`, `pad` where out of bounds.
pub fn load<T: Element>(t: &HostTensor<T>, index: &[i32], shape: &[usize], pad: T) -> Tile<T> {
    let mut data = Vec::with_capacity(shape.iter().product());
    let mut g = vec![0i64; shape.len()];
    for_each_coord(shape, |c| {
        for d in 0..shape.len() {
            g[d] = index[d] as i64 * shape[d] as i64 + c[d] as i64;
        }
        data.push(t.checked(&g).unwrap_or(pad));
    });
    Tile {
        shape: shape.to_vec(),
        data,
    }
}

/// Writes the in-bounds elements of `tile` at tile-grid `index`.
pub fn store<T: Element>(t: &mut HostTensor<T>, index: &[i32], tile: &Tile<T>) {
    let mut g = vec![0i64; tile.shape.len()];
    let mut i = 0;
    for_each_coord(&tile.shape, |c| {
        for d in 0..c.len() {
            g[d] = index[d] as i64 * tile.shape[d] as i64 + c[d] as i64;
        }
        t.checked_set(&g, tile.data[i]);
        i += 1;
    });
}

/// Where data element `i` of a flagged tensor's row sits, and where the
/// flag of its 4-byte word starts: each word of `P` elements is followed
/// by its flag's `P` elements.
fn flagged_offsets<T: ops::Flagged>(i: i64) -> (i64, i64) {
    let p = T::PER_WORD as i64;
    let word = i.div_euclid(p) * 2 * p;
    (word + i.rem_euclid(p), word + p)
}

/// The tensor index of a flagged tensor's data at data coordinates `g`
/// (`None` out of bounds: the last dimension holds half as much data),
/// and of its word's flag.
fn flagged_index<T: ops::Flagged>(t: &HostTensor<T>, g: &[i64]) -> Option<(Vec<i64>, Vec<i64>)> {
    let last = g.len() - 1;
    let shape = t.shape();
    if shape.len() != g.len() || !(0..shape[last] as i64 / 2).contains(&g[last]) {
        return None;
    }
    let (data, flag) = flagged_offsets::<T>(g[last]);
    let (mut at, mut flag_at) = (g.to_vec(), g.to_vec());
    (at[last], flag_at[last]) = (data, flag);
    t.checked(&at).map(|_| (at, flag_at))
}

/// Writes the in-bounds elements of `tile` at tile-grid `index` of a
/// flagged tensor, each 4-byte word beside `flag` (`store_flagged`).
pub fn store_flagged<T: ops::Flagged>(t: &mut HostTensor<T>, index: &[i32], tile: &Tile<T>, flag: u32) {
    let mut g = vec![0i64; tile.shape.len()];
    let mut i = 0;
    for_each_coord(&tile.shape, |c| {
        for d in 0..c.len() {
            g[d] = index[d] as i64 * tile.shape[d] as i64 + c[d] as i64;
        }
        if let Some((at, mut flag_at)) = flagged_index(t, &g) {
            t.checked_set(&at, tile.data[i]);
            let last = flag_at.len() - 1;
            for k in 0..T::PER_WORD {
                t.checked_set(&flag_at, T::from_word_part(flag, k));
                flag_at[last] += 1;
            }
        }
        i += 1;
    });
}

/// The tile at tile-grid `index` of a flagged tensor whose in-bounds
/// words all carry `flag` (`load_flagged`), 0 out of bounds. On the CPU
/// blocks run one after another and nothing else writes a launch's
/// tensors, so a word without the flag never gets it: that is
/// [`Error::Deadlock`], not a hang.
pub fn load_flagged<T: ops::Flagged>(
    (kernel, param): (&'static str, &'static str),
    t: &HostTensor<T>,
    index: &[i32],
    shape: &[usize],
    flag: u32,
) -> crate::Result<Tile<T>> {
    let mut data = Vec::with_capacity(shape.iter().product());
    let mut g = vec![0i64; shape.len()];
    let mut missing = None;
    for_each_coord(shape, |c| {
        for d in 0..shape.len() {
            g[d] = index[d] as i64 * shape[d] as i64 + c[d] as i64;
        }
        data.push(match flagged_index(t, &g) {
            None => T::default(),
            Some((at, mut flag_at)) => {
                let last = flag_at.len() - 1;
                let mut seen = 0u32;
                for k in 0..T::PER_WORD {
                    let part = t.checked(&flag_at).unwrap_or_default();
                    seen |= part.word_part() << (32 / T::PER_WORD * k);
                    flag_at[last] += 1;
                }
                if seen != flag && missing.is_none() {
                    missing = Some((g.clone(), seen));
                }
                t.checked(&at).unwrap_or_default()
            }
        });
    });
    match missing {
        Some((g, seen)) => Err(Error::Deadlock {
            kernel,
            reason: format!(
                "a block waits for `{param}`'s element {g:?} to carry flag {flag}, and it carries {seen}: on the CPU blocks run one after another and nothing else writes a launch's tensors, so it never would"
            ),
        }),
        None => Ok(Tile {
            shape: shape.to_vec(),
            data,
        }),
    }
}

/// Element `e` is `t[index[0][e], index[1][e], ..]`, `pad` where out of bounds.
pub fn gather<T: Element>(t: &HostTensor<T>, index: &[&Tile<i32>], pad: T) -> Tile<T> {
    let n = index[0].data.len();
    let data = (0..n)
        .map(|e| {
            let g: Vec<i64> = index.iter().map(|i| i.data[e] as i64).collect();
            t.checked(&g).unwrap_or(pad)
        })
        .collect();
    Tile {
        shape: index[0].shape.clone(),
        data,
    }
}

/// Writes `value[e]` to `t[index[0][e], ..]` where in bounds, in element order.
pub fn scatter<T: Element>(t: &mut HostTensor<T>, index: &[&Tile<i32>], value: &Tile<T>) {
    for e in 0..value.data.len() {
        let g: Vec<i64> = index.iter().map(|i| i.data[e] as i64).collect();
        t.checked_set(&g, value.data[e]);
    }
}

/// Combines `value[e]` into `t[index[0][e], ..]` with `f` where in bounds,
/// in element order, and gives each element's value before (zero out of
/// bounds): a tile atomic (`atomic_add`, ..) run sequentially.
pub fn atomic<T: Element>(t: &mut HostTensor<T>, index: &[&Tile<i32>], value: &Tile<T>, f: fn(T, T) -> T) -> Tile<T> {
    update(t, index, &value.shape, |e, old| f(old, value.data[e]))
}

/// `atomic_cas` run sequentially: `value[e]` replaces the element where it
/// holds `compare[e]`'s bits, in element order; each element's value
/// before (zero out of bounds).
pub fn atomic_cas<T: Element + ops::SameBits>(
    t: &mut HostTensor<T>,
    index: &[&Tile<i32>],
    compare: &Tile<T>,
    value: &Tile<T>,
) -> Tile<T> {
    update(t, index, &value.shape, |e, old| {
        if old.same_bits(compare.data[e]) {
            value.data[e]
        } else {
            old
        }
    })
}

/// Replaces each element the index tiles (of `shape`) name, in element
/// order, with `f(e, old)` where in bounds; the old values (zero out of
/// bounds).
fn update<T: Element>(
    t: &mut HostTensor<T>,
    index: &[&Tile<i32>],
    shape: &[usize],
    mut f: impl FnMut(usize, T) -> T,
) -> Tile<T> {
    let data = (0..shape.iter().product())
        .map(|e| {
            let g: Vec<i64> = index.iter().map(|i| i.data[e] as i64).collect();
            let old = t.checked(&g)?;
            t.checked_set(&g, f(e, old));
            Some(old)
        })
        .map(Option::unwrap_or_default)
        .collect();
    Tile {
        shape: shape.to_vec(),
        data,
    }
}

/// Adds `v` to one element and gives its value before (zero, and nothing
/// added, when out of bounds): a block's `fetch_add`, blocks running one
/// after another.
pub fn fetch_add<T: Element + ops::Arith>(t: &mut HostTensor<T>, index: &[i32], v: T) -> T {
    let g: Vec<i64> = index.iter().map(|&i| i as i64).collect();
    match t.checked(&g) {
        Some(old) => {
            t.checked_set(&g, ops::add(old, v));
            old
        }
        None => T::default(),
    }
}

/// Sets one element to `v` (nothing when out of bounds): a block's `signal`.
pub fn signal<T: Element>(t: &mut HostTensor<T>, index: &[i32], v: T) {
    let g: Vec<i64> = index.iter().map(|&i| i as i64).collect();
    if t.checked(&g).is_some() {
        t.checked_set(&g, v);
    }
}

/// A block's `wait` for one element of `kernel`'s tensor `param` to reach
/// `v` (the difference, wrapped to i32, not negative; out of bounds, no
/// wait). On the CPU blocks run one after another and nothing else writes
/// a launch's tensors while it runs, so an element that has not reached
/// `v` never will: that is [`Error::Deadlock`], not a hang.
pub fn wait<T: Element + Into<i64>>(
    (kernel, param): (&'static str, &'static str),
    t: &HostTensor<T>,
    index: &[i32],
    v: T,
) -> crate::Result<()> {
    let g: Vec<i64> = index.iter().map(|&i| i as i64).collect();
    match t.checked(&g) {
        Some(e) if ((e.into() - v.into()) as u32 as i32) < 0 => Err(Error::Deadlock {
            kernel,
            reason: format!(
                "a block waits for `{param}`{index:?} to reach {}, and it holds {}: on the CPU blocks run one after another and nothing else writes a launch's tensors, so it never would",
                v.into(),
                e.into()
            ),
        }),
        _ => Ok(()),
    }
}

/// One element, zero when out of bounds.
pub fn get<T: Element>(t: &HostTensor<T>, index: &[i32]) -> T {
    let g: Vec<i64> = index.iter().map(|&i| i as i64).collect();
    t.checked(&g).unwrap_or_default()
}

/// What the blocks of a cluster hand to its first block
/// (`cluster_gather`) on the CPU, where the blocks run one after another:
/// each cluster's first block last ([`cluster_order`]), so every other
/// block's tile is here when it gathers.
#[derive(Default)]
pub struct Cluster {
    /// By (gather, the block's rank in its cluster): the tile's elements.
    tiles: HashMap<(usize, usize), Box<dyn Any>>,
}

/// The blocks along x, `x` of them in clusters of `blocks`: each
/// cluster's blocks from its last to its first, which gathers the others'
/// tiles. `x` is a multiple of `blocks` (the launch checks).
pub fn cluster_order(x: u32, blocks: usize) -> impl Iterator<Item = u32> {
    let n = blocks as u32;
    (0..x).map(move |i| i / n * n + (n - 1 - i % n))
}

/// `cluster_gather` number `gather` of block `block_x`: in the first block
/// of its cluster of `blocks`, the tiles of the cluster's blocks stacked
/// along axis 0 in block order; zeros in the others, which hand their
/// tile over. (A block that has not run hands over zeros, which
/// [`cluster_order`] never leaves.)
pub fn cluster_gather<T: Copy + Default + 'static>(
    cluster: &mut Cluster,
    gather: usize,
    tile: &Tile<T>,
    blocks: usize,
    block_x: i32,
) -> Tile<T> {
    let rank = block_x as usize % blocks;
    let mut shape = tile.shape.clone();
    shape[0] *= blocks;
    if rank != 0 {
        cluster.tiles.insert((gather, rank), Box::new(tile.data.clone()));
        return splat(&shape, T::default());
    }
    let mut data = tile.data.clone();
    for r in 1..blocks {
        let handed = cluster
            .tiles
            .remove(&(gather, r))
            .and_then(|t| t.downcast::<Vec<T>>().ok());
        data.extend(handed.map_or_else(|| vec![T::default(); tile.data.len()], |t| *t));
    }
    Tile { shape, data }
}

/// `f` applied to each element of `a`; the shape is kept.
pub fn map<T: Copy, U>(a: &Tile<T>, f: impl Fn(T) -> U) -> Tile<U> {
    Tile {
        shape: a.shape.clone(),
        data: a.data.iter().map(|&x| f(x)).collect(),
    }
}

/// Per-dimension strides of `a` seen as a tile of `shape` (0 where `a` is broadcast).
fn broadcast_steps<T>(a: &Tile<T>, shape: &[usize]) -> Vec<usize> {
    let src = strides(&a.shape);
    (0..shape.len())
        .map(|d| if a.shape[d] == 1 { 0 } else { src[d] })
        .collect()
}

/// Calls `f(offset_a, offset_b)` for every coordinate of `shape`, row-major,
/// where operand `i` steps by `steps[i]`.
fn walk2(shape: &[usize], sa: &[usize], sb: &[usize], oa: usize, ob: usize, f: &mut impl FnMut(usize, usize)) {
    match shape {
        [] => f(oa, ob),
        [n] => {
            for i in 0..*n {
                f(oa + i * sa[0], ob + i * sb[0]);
            }
        }
        [n, rest @ ..] => {
            for i in 0..*n {
                walk2(rest, &sa[1..], &sb[1..], oa + i * sa[0], ob + i * sb[0], f);
            }
        }
    }
}

/// `f` element by element over `shape`; `a` and `b` are broadcast to it
/// (same rank, each dimension equal or 1).
pub fn zip<T: Copy, U>(a: &Tile<T>, b: &Tile<T>, shape: &[usize], f: impl Fn(T, T) -> U) -> Tile<U> {
    let data = if a.shape == shape && b.shape == shape {
        a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect()
    } else {
        let mut data = Vec::with_capacity(shape.iter().product());
        let (sa, sb) = (broadcast_steps(a, shape), broadcast_steps(b, shape));
        walk2(shape, &sa, &sb, 0, 0, &mut |i, j| data.push(f(a.data[i], b.data[j])));
        data
    };
    Tile {
        shape: shape.to_vec(),
        data,
    }
}

/// `f(c, a, b)` element by element over `shape`, operands broadcast to it.
pub fn zip3<C: Copy, T: Copy>(
    c: &Tile<C>,
    a: &Tile<T>,
    b: &Tile<T>,
    shape: &[usize],
    f: impl Fn(C, T, T) -> T,
) -> Tile<T> {
    let c = broadcast(c, shape);
    let ab = zip(a, b, shape, |x, y| (x, y));
    Tile {
        shape: shape.to_vec(),
        data: c.data.iter().zip(&ab.data).map(|(&k, &(x, y))| f(k, x, y)).collect(),
    }
}

/// The same elements, in the same row-major order, seen with `shape` (of the
/// same number of elements).
pub fn reshape<T: Copy>(a: &Tile<T>, shape: &[usize]) -> Tile<T> {
    Tile {
        shape: shape.to_vec(),
        data: a.data.clone(),
    }
}

/// Repeats size-1 dimensions up to `shape` (same rank).
pub fn broadcast<T: Copy>(a: &Tile<T>, shape: &[usize]) -> Tile<T> {
    if a.shape == shape {
        return a.clone();
    }
    let src = strides(&a.shape);
    // Stride 0 along broadcast dimensions: walk the result, offsetting the source.
    let step: Vec<usize> = (0..shape.len())
        .map(|d| if a.shape[d] == 1 { 0 } else { src[d] })
        .collect();
    let mut data = Vec::with_capacity(shape.iter().product());
    gather_strided(&a.data, shape, &step, 0, &mut data);
    Tile {
        shape: shape.to_vec(),
        data,
    }
}

/// Appends `src[offset + sum(c[d] * step[d])]` for every coordinate `c` of `shape`, row-major.
fn gather_strided<T: Copy>(src: &[T], shape: &[usize], step: &[usize], offset: usize, out: &mut Vec<T>) {
    match shape {
        [] => out.push(src[offset]),
        [n] => out.extend((0..*n).map(|i| src[offset + i * step[0]])),
        [n, rest @ ..] => {
            for i in 0..*n {
                gather_strided(src, rest, &step[1..], offset + i * step[0], out);
            }
        }
    }
}

/// Dimension `i` of the result is dimension `perm[i]` of `a`.
pub fn permute<T: Copy>(a: &Tile<T>, perm: &[usize]) -> Tile<T> {
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    let src = strides(&a.shape);
    let step: Vec<usize> = perm.iter().map(|&p| src[p]).collect();
    let mut data = Vec::with_capacity(a.data.len());
    gather_strided(&a.data, &shape, &step, 0, &mut data);
    Tile { shape, data }
}

/// Which reduction [`reduce`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The sum, accumulated in f64.
    Sum,
    /// The largest element; NaN loses, as in [`ops::max`].
    Max,
    /// The smallest element; NaN loses, as in [`ops::min`].
    Min,
}

/// `acc + a @ b` for `a: [m, k]`, `b: [k, n]`, `acc: [m, n]`, products summed in f64.
pub fn mma<T: ops::Scalar>(a: &Tile<T>, b: &Tile<T>, acc: &Tile<f32>) -> Tile<f32> {
    let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
    let mut data = acc.data.clone();
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a.data[i * k + p].to_f64() * b.data[p * n + j].to_f64();
            }
            data[i * n + j] = (data[i * n + j] as f64 + s) as f32;
        }
    }
    Tile {
        shape: vec![m, n],
        data,
    }
}

/// Calls `f(base)` for each result element of a reduction along `axis`, in
/// row-major order; its elements are at `base + i * stride(axis)`. Returns
/// the result's shape (the axis kept with size 1).
fn lanes(shape: &[usize], axis: usize, mut f: impl FnMut(usize)) -> Vec<usize> {
    let len = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    for o in 0..outer {
        for i in 0..inner {
            f(o * len * inner + i);
        }
    }
    let mut out_shape = shape.to_vec();
    out_shape[axis] = 1;
    out_shape
}

/// Sum, max or min along `axis`, keeping it with size 1. Floats sum in f64.
pub fn reduce<T: ops::Scalar>(a: &Tile<T>, axis: usize, r: Reduction) -> Tile<T> {
    let mut data = Vec::with_capacity(a.data.len() / a.shape[axis].max(1));
    let (stride, len) = (strides(&a.shape)[axis], a.shape[axis]);
    let shape = lanes(&a.shape, axis, |base| {
        let at = |i: usize| a.data[base + i * stride];
        data.push(match r {
            Reduction::Sum => {
                let mut acc = 0.0f64;
                for i in 0..len {
                    acc += at(i).to_f64();
                }
                T::from_f64(acc)
            }
            Reduction::Max => (1..len).fold(at(0), |m, i| ops::max(m, at(i))),
            Reduction::Min => (1..len).fold(at(0), |m, i| ops::min(m, at(i))),
        });
    });
    Tile { shape, data }
}

/// The combining operation of a [`scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Running sums, accumulated in f64.
    Sum,
    /// Running products, accumulated in f64.
    Prod,
    /// Running maxima; NaN loses, as in [`ops::max`].
    Max,
    /// Running minima; NaN loses, as in [`ops::min`].
    Min,
}

/// The inclusive scan of `a` along `axis`: element `i` combines elements
/// `0..=i` (`i..` where `reverse`). Sums and products accumulate in f64,
/// each element rounded to `T` (integers wrap).
pub fn scan<T: ops::Scalar>(a: &Tile<T>, axis: usize, op: Scan, reverse: bool) -> Tile<T> {
    let mut data = a.data.clone();
    let (stride, len) = (strides(&a.shape)[axis], a.shape[axis]);
    lanes(&a.shape, axis, |base| {
        let order: Vec<usize> = if reverse {
            (0..len).rev().collect()
        } else {
            (0..len).collect()
        };
        let (mut acc, mut running) = (if op == Scan::Prod { 1.0 } else { 0.0 }, None);
        for i in order {
            let at = base + i * stride;
            let x = a.data[at];
            data[at] = match op {
                Scan::Sum => {
                    acc += x.to_f64();
                    T::from_f64(acc)
                }
                Scan::Prod => {
                    acc *= x.to_f64();
                    T::from_f64(acc)
                }
                Scan::Max => *running.insert(running.map_or(x, |m| ops::max(m, x))),
                Scan::Min => *running.insert(running.map_or(x, |m| ops::min(m, x))),
            };
        }
    });
    Tile {
        shape: a.shape.clone(),
        data,
    }
}

/// The positions along `axis` of each line of `a` in sorted order:
/// ascending, or `descending`; NaN is the largest value, and equal values
/// keep their order (the lower position first).
pub fn argsort<T: ops::Scalar>(a: &Tile<T>, axis: usize, descending: bool) -> Tile<i32> {
    let mut data = vec![0; a.data.len()];
    let (stride, len) = (strides(&a.shape)[axis], a.shape[axis]);
    lanes(&a.shape, axis, |base| {
        let key = |i: usize| {
            let v = a.data[base + i * stride].to_f64();
            // NaN above every number, as the GPU compares.
            if v.is_nan() { f64::INFINITY } else { v }
        };
        let rank = |i: usize| (a.data[base + i * stride].to_f64().is_nan(), key(i));
        let mut order: Vec<usize> = (0..len).collect();
        order.sort_by(|&i, &j| {
            let (x, y) = (rank(i), rank(j));
            let by_value = x.0.cmp(&y.0).then(x.1.partial_cmp(&y.1).expect("no NaN keys"));
            if descending { by_value.reverse() } else { by_value }
        });
        for (k, i) in order.into_iter().enumerate() {
            data[base + k * stride] = i as i32;
        }
    });
    Tile {
        shape: a.shape.clone(),
        data,
    }
}

/// Each line of `a` along `axis` sorted, as [`argsort`] orders it.
pub fn sort<T: ops::Scalar>(a: &Tile<T>, axis: usize, descending: bool) -> Tile<T> {
    let order = argsort(a, axis, descending);
    let (stride, len) = (strides(&a.shape)[axis], a.shape[axis]);
    let mut data = a.data.clone();
    lanes(&a.shape, axis, |base| {
        for k in 0..len {
            // As the GPU's keys give them back: `-0.0` as `0.0`, one NaN.
            let v = a.data[base + order.data[base + k * stride] as usize * stride];
            data[base + k * stride] = T::from_f64(v.to_f64() + 0.0);
        }
    });
    Tile {
        shape: a.shape.clone(),
        data,
    }
}

/// The first `len` positions along `axis` (all of `a` when `len` is its length).
pub fn head<T: Copy>(a: &Tile<T>, axis: usize, len: usize) -> Tile<T> {
    let mut shape = a.shape.clone();
    shape[axis] = len;
    let inner: usize = a.shape[axis + 1..].iter().product();
    let data = a
        .data
        .chunks(a.shape[axis] * inner)
        .flat_map(|outer| &outer[..len * inner])
        .copied()
        .collect();
    Tile { shape, data }
}

/// Index of the largest (`max`) or smallest element along `axis`; ties go to
/// the lowest index.
pub fn arg_reduce<T: ops::Scalar>(a: &Tile<T>, axis: usize, max: bool) -> Tile<i32> {
    let mut data = Vec::new();
    let (stride, len) = (strides(&a.shape)[axis], a.shape[axis]);
    let shape = lanes(&a.shape, axis, |base| {
        let at = |i: usize| a.data[base + i * stride].to_f64();
        let mut best = 0;
        for i in 1..len {
            if (max && at(i) > at(best)) || (!max && at(i) < at(best)) {
                best = i;
            }
        }
        data.push(best as i32);
    });
    Tile { shape, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[inline]
    fn load_pads_and_store_drops_out_of_bounds() {
        let t = HostTensor::from_vec((0..6).map(|x| x as f32).collect(), &[2, 3]).unwrap();
        let tile = load(&t, &[0, 1], &[2, 2], -1.0);
        assert_eq!(tile.data, vec![2.0, -1.0, 5.0, -1.0]);
        let mut out = HostTensor::<f32>::zeros(&[2, 3]);
        store(&mut out, &[0, 1], &splat(&[2, 2], 7.0));
        assert_eq!(out.to_vec(), vec![0.0, 0.0, 7.0, 0.0, 0.0, 7.0]);
    }

    #[test]
    #[inline]
    fn reductions_keep_the_axis() {
        let t = Tile {
            shape: vec![2, 3],
            data: vec![1.0f32, 5.0, 2.0, 4.0, 3.0, 6.0],
        };
        assert_eq!(reduce(&t, 1, Reduction::Sum).data, vec![8.0, 13.0]);
        assert_eq!(reduce(&t, 0, Reduction::Max).shape, vec![1, 3]);
        assert_eq!(reduce(&t, 0, Reduction::Max).data, vec![4.0, 5.0, 6.0]);
        assert_eq!(arg_reduce(&t, 1, true).data, vec![1, 2]);
    }

    #[test]
    #[inline]
    fn broadcast_and_permute() {
        let t = Tile {
            shape: vec![2, 1],
            data: vec![1, 2],
        };
        assert_eq!(broadcast(&t, &[2, 3]).data, vec![1, 1, 1, 2, 2, 2]);
        let m = Tile {
            shape: vec![2, 3],
            data: vec![0, 1, 2, 3, 4, 5],
        };
        assert_eq!(permute(&m, &[1, 0]).data, vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    #[inline]
    fn integer_semantics_match_the_gpu() {
        assert_eq!(ops::add(i32::MAX, 1), i32::MIN);
        assert_eq!(ops::div(7i32, 0), -1);
        assert_eq!(ops::shl(1i32, 40), 0);
        assert_eq!(ops::cast::<f32, i32>(f32::NAN), 0);
        assert_eq!(ops::cast::<f32, i32>(1e20), i32::MAX);
    }
}
