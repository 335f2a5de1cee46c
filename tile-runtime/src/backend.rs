//! One host API for the GPU and the CPU. A [`Backend`] is where kernels
//! run and tensors live: a GPU [`Stream`] (tensors in GPU memory,
//! [`Tensor`]) or [`Cpu`] (the kernels' CPU reference versions, tensors in
//! host memory, [`HostTensor`]). Every generated `launch` and `launch_with`
//! takes one, so host code (a library wrapper, a model) is written once,
//! generic over the backend.
//!
//! Both backends check a launch's arguments the same way before running
//! anything ([`Arg`]s against the kernel's parameters: kinds, element
//! types, ranks, and the grid); the GPU then checks what only it needs
//! (32-bit offsets, the tensors' context).

use crate::arg::{Arg, HostArg, HostTensorArg, TensorView};
use crate::spec::{KernelSpec, ParamSpec};
use crate::{Element, Error, Graph, Grid, HostTensor, Landing, Result, Stream, Tensor, TensorArg};
use tile_spec::DType;

/// Where kernels run and tensors live: a GPU [`Stream`] or the [`Cpu`].
///
/// Generated launchers take `on: &B` for any backend `B`, and tensors of
/// its [`Backend::Tensor`] type, so a function generic over `B` runs on
/// either (the guide's chapter 9, "Backends", shows one, run on both).
/// `launch_with` and `launch` call [`Backend::launch_kernel`].
pub trait Backend {
    /// A tensor with elements of type `T` on this backend (shareable
    /// across threads: a model split over ranks runs each on its own).
    type Tensor<T: Element>: TensorView + Send + Sync;

    /// How a launch passes this backend's tensors: element type erased.
    type Operand: TensorView + ?Sized;

    /// Work recorded for replay ([`Graph`] on a GPU; the CPU has none).
    type Graph: Send + Sync;

    /// Host memory [`Backend::download_later`] copies into: a page-locked
    /// [`Landing`] on a GPU, a `Vec` on the CPU.
    type Landing<T: Element>: Send + Sync;

    /// Copies a host tensor to the backend, keeping its strides.
    fn upload<T: Element>(&self, host: &HostTensor<T>) -> Result<Self::Tensor<T>>;

    /// Copies `data` (row-major) to a new contiguous tensor of `shape`;
    /// `Error::Shape` if the lengths differ.
    fn upload_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Self::Tensor<T>>;

    /// A new contiguous tensor of zeros.
    fn zeros<T: Element>(&self, shape: &[usize]) -> Result<Self::Tensor<T>>;

    /// The tensor in host memory (on a GPU, waits for the stream first).
    fn download<T: Element>(&self, t: &Self::Tensor<T>) -> Result<HostTensor<T>>;

    /// Host memory for `len` elements, for [`Backend::download_later`].
    fn landing<T: Element>(&self, len: usize) -> Result<Self::Landing<T>>;

    /// Queues a copy of the contiguous `t` into `into` (of its length) and
    /// returns without waiting for it ([`Stream::download_later`]; on
    /// the CPU, copies).
    fn download_later<T: Element>(&self, t: &Self::Tensor<T>, into: &mut Self::Landing<T>) -> Result<()>;

    /// The elements the last copy queued into `into` brought, once it is
    /// done (on a GPU, waits for it).
    fn landed<'l, T: Element>(&self, into: &'l Self::Landing<T>) -> Result<&'l [T]>;

    /// Copies `data` (row-major) into the contiguous tensor `t`, in place
    /// (its buffer keeps its address: what a recorded [`Graph`] reads);
    /// `Error::Shape` if the lengths differ.
    fn write<T: Element>(&self, t: &mut Self::Tensor<T>, data: &[T]) -> Result<()>;

    /// Records what `work` queues into a graph, without running it
    /// ([`Stream::capture`]); `None` on a backend without graphs, where
    /// `work` is not called (run it instead).
    fn capture<E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<Self::Graph>, E>;

    /// Queues a graph's work ([`Stream::replay`]).
    fn replay(&self, graph: &Self::Graph) -> Result<()>;

    /// The same elements seen with another shape of equal size
    /// (contiguous tensors only; `Error::Shape` otherwise).
    fn reshape<T: Element>(&self, mut t: Self::Tensor<T>, shape: &[usize]) -> Result<Self::Tensor<T>> {
        self.reshape_in_place(&mut t, shape)?;
        Ok(t)
    }

    /// [`Backend::reshape`] of a tensor held elsewhere (a buffer kept
    /// across steps), in place.
    fn reshape_in_place<T: Element>(&self, t: &mut Self::Tensor<T>, shape: &[usize]) -> Result<()>;

    /// The GPU stream kernels run on, `None` on the CPU: what code that
    /// adapts to the device asks (its target, its size, timing events).
    fn stream(&self) -> Option<&Stream>;

    /// A tensor as a launch passes it (read-only).
    fn operand<T: Element>(t: &Self::Tensor<T>) -> &Self::Operand;

    /// A tensor as a launch passes it (written).
    fn operand_mut<T: Element>(t: &mut Self::Tensor<T>) -> &mut Self::Operand;

    /// Runs the specialization `types`, `consts` of `kernel` over `grid`
    /// on `args`, after checking them against the kernel's parameters
    /// (typed errors, nothing run). What the generated `launch_with`
    /// calls; use that instead, which fixes the argument types.
    fn launch_kernel(
        &self,
        kernel: &'static KernelSpec,
        types: &[DType],
        consts: &[i64],
        grid: Grid,
        args: &mut [Arg<'_, Self::Operand>],
    ) -> Result<()>;
}

impl Backend for Stream {
    type Tensor<T: Element> = Tensor<T>;
    type Operand = dyn TensorArg;
    type Graph = Graph;
    type Landing<T: Element> = Landing<T>;

    fn upload<T: Element>(&self, host: &HostTensor<T>) -> Result<Tensor<T>> {
        Stream::upload(self, host)
    }
    fn upload_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Tensor<T>> {
        Stream::upload_slice(self, data, shape)
    }
    fn zeros<T: Element>(&self, shape: &[usize]) -> Result<Tensor<T>> {
        Stream::zeros(self, shape)
    }
    fn download<T: Element>(&self, t: &Tensor<T>) -> Result<HostTensor<T>> {
        Stream::download(self, t)
    }
    fn landing<T: Element>(&self, len: usize) -> Result<Landing<T>> {
        Stream::landing(self, len)
    }
    fn download_later<T: Element>(&self, t: &Tensor<T>, into: &mut Landing<T>) -> Result<()> {
        Stream::download_later(self, t, into)
    }
    fn landed<'l, T: Element>(&self, into: &'l Landing<T>) -> Result<&'l [T]> {
        into.wait()
    }
    fn write<T: Element>(&self, t: &mut Tensor<T>, data: &[T]) -> Result<()> {
        Stream::write(self, t, data)
    }
    fn capture<E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<Graph>, E> {
        Stream::capture(self, work).map(Some)
    }
    fn replay(&self, graph: &Graph) -> Result<()> {
        Stream::replay(self, graph)
    }
    fn reshape_in_place<T: Element>(&self, t: &mut Tensor<T>, shape: &[usize]) -> Result<()> {
        t.reshape_in_place(shape)
    }
    fn stream(&self) -> Option<&Stream> {
        Some(self)
    }
    fn operand<T: Element>(t: &Tensor<T>) -> &Self::Operand {
        t
    }
    fn operand_mut<T: Element>(t: &mut Tensor<T>) -> &mut Self::Operand {
        t
    }
    fn launch_kernel(
        &self,
        kernel: &'static KernelSpec,
        types: &[DType],
        consts: &[i64],
        grid: Grid,
        args: &mut [Arg<'_, dyn TensorArg>],
    ) -> Result<()> {
        check_args(kernel, types, consts, grid, args)?;
        if grid.is_empty() {
            return Ok(());
        }
        crate::launch::launch(kernel, types, consts, self, grid, args)
    }
}

/// The CPU: kernels run their reference versions (Rust generated from the
/// same IR as the PTX), block after block, and tensors are
/// [`HostTensor`]s. Runs anywhere; what the GPU versions are tested
/// against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpu;

impl Backend for Cpu {
    type Tensor<T: Element> = HostTensor<T>;
    type Operand = dyn HostTensorArg;
    type Graph = std::convert::Infallible;
    type Landing<T: Element> = Vec<T>;

    fn upload<T: Element>(&self, host: &HostTensor<T>) -> Result<HostTensor<T>> {
        Ok(host.clone())
    }
    fn upload_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<HostTensor<T>> {
        HostTensor::from_vec(data.to_vec(), shape)
    }
    fn zeros<T: Element>(&self, shape: &[usize]) -> Result<HostTensor<T>> {
        Ok(HostTensor::zeros(shape))
    }
    fn download<T: Element>(&self, t: &HostTensor<T>) -> Result<HostTensor<T>> {
        Ok(t.clone())
    }
    fn landing<T: Element>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::default(); len])
    }
    fn download_later<T: Element>(&self, t: &HostTensor<T>, into: &mut Vec<T>) -> Result<()> {
        if t.len() != into.len() {
            return Err(Error::Shape(format!(
                "can't download a tensor of shape {:?} into a landing of {} elements",
                t.shape(),
                into.len()
            )));
        }
        into.copy_from_slice(&t.to_vec());
        Ok(())
    }
    fn landed<'l, T: Element>(&self, into: &'l Vec<T>) -> Result<&'l [T]> {
        Ok(into)
    }
    fn write<T: Element>(&self, t: &mut HostTensor<T>, data: &[T]) -> Result<()> {
        *t = HostTensor::from_vec(data.to_vec(), t.shape())?;
        Ok(())
    }
    fn capture<E: From<Error>>(
        &self,
        _work: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<std::convert::Infallible>, E> {
        Ok(None)
    }
    fn replay(&self, graph: &std::convert::Infallible) -> Result<()> {
        match *graph {}
    }
    fn reshape_in_place<T: Element>(&self, t: &mut HostTensor<T>, shape: &[usize]) -> Result<()> {
        t.reshape_in_place(shape)
    }
    fn stream(&self) -> Option<&Stream> {
        None
    }
    fn operand<T: Element>(t: &HostTensor<T>) -> &Self::Operand {
        t
    }
    fn operand_mut<T: Element>(t: &mut HostTensor<T>) -> &mut Self::Operand {
        t
    }
    fn launch_kernel(
        &self,
        kernel: &'static KernelSpec,
        types: &[DType],
        consts: &[i64],
        grid: Grid,
        args: &mut [HostArg<'_>],
    ) -> Result<()> {
        check_args(kernel, types, consts, grid, args)?;
        if grid.is_empty() {
            return Ok(());
        }
        (kernel.cpu)(types, consts, grid, args)
    }
}

/// Checks a launch's grid (`Error::Grid`; one without blocks passes: its
/// launch does nothing) and its arguments ([`check_params`]), on either
/// backend.
fn check_args<O: TensorView + ?Sized>(
    kernel: &KernelSpec,
    types: &[DType],
    consts: &[i64],
    grid: Grid,
    args: &[Arg<'_, O>],
) -> Result<()> {
    check_grid(kernel.name, grid)?;
    check_clusters(kernel, types, consts, grid)?;
    check_params(kernel, types, consts, args)
}

/// A kernel that gathers across clusters (`cluster_gather`) runs whole
/// clusters: the grid's x is a multiple of the cluster's blocks.
fn check_clusters(kernel: &KernelSpec, types: &[DType], consts: &[i64], grid: Grid) -> Result<()> {
    let gathering = (kernel.variants.iter())
        .find(|v| v.gathers && *v.types == *types && *v.consts == *consts)
        .map(|v| v.cluster);
    match gathering {
        Some(blocks) if !grid.x.is_multiple_of(blocks) => Err(Error::Grid {
            kernel: kernel.name,
            reason: format!(
                "it gathers across clusters of {blocks} blocks along x (`cluster_gather`), so x must be a multiple of {blocks}, not {}",
                grid.x
            ),
        }),
        _ => Ok(()),
    }
}

/// Checks arguments against `kernel`'s parameters: per parameter the kind
/// of argument (tensor read or written, scalar type), a tensor's element
/// type (`types` gives the type parameters') and rank, and that no
/// written tensor reaches an element twice, then the declared shapes
/// (`consts` gives the const parameters' values; with none given, the
/// dimensions declared with them are not checked). `Error::Rank`,
/// `Error::ShapeContract`, or `Error::Argument` for the rest.
pub(crate) fn check_params<O: TensorView + ?Sized>(
    kernel: &KernelSpec,
    types: &[DType],
    consts: &[i64],
    args: &[Arg<'_, O>],
) -> Result<()> {
    if args.len() != kernel.params.len() {
        return Err(argument(
            kernel,
            format!("takes {} arguments, got {}", kernel.params.len(), args.len()),
        ));
    }
    for (p, a) in kernel.params.iter().zip(args) {
        let fits = match (p, a) {
            (ParamSpec::Tensor { mutable: false, .. }, Arg::Tensor(_))
            | (ParamSpec::Tensor { mutable: true, .. }, Arg::TensorMut(_)) => true,
            (ParamSpec::Scalar { dtype, .. }, a) => matches!(
                (dtype, a),
                (DType::F32, Arg::F32(_)) | (DType::I32, Arg::I32(_)) | (DType::U32, Arg::U32(_))
            ),
            _ => false,
        };
        if !fits {
            return Err(argument(
                kernel,
                format!("argument `{}` is not {}", p.name(), wanted(p)),
            ));
        }
        let (ParamSpec::Tensor { name, elem, rank, .. }, Some(t)) = (p, a.tensor_view()) else {
            continue;
        };
        let dtype = match kernel.types.iter().position(|n| n == elem) {
            Some(i) => types.get(i).copied(),
            None => DType::from_name(elem),
        };
        if dtype != Some(t.dtype()) {
            let expected = dtype.map_or_else(|| format!("{elem}, which has no type given"), |d| d.to_string());
            return Err(argument(
                kernel,
                format!("tensor `{name}` holds {} where the kernel reads {expected}", t.dtype()),
            ));
        }
        if t.rank() != *rank {
            return Err(Error::Rank {
                kernel: kernel.name,
                param: name,
                expected: *rank,
                found: t.rank(),
            });
        }
        if matches!(a, Arg::TensorMut(_)) && crate::host::overlaps(t.shape(), t.strides()) {
            return Err(argument(
                kernel,
                format!(
                    "tensor `{name}` is written, and its view (shape {:?}, strides {:?}) reaches some elements more than once: blocks writing them would race; pass a tensor whose elements are distinct",
                    t.shape(),
                    t.strides()
                ),
            ));
        }
    }
    crate::contract::check(kernel, consts, args)
}

/// The most blocks a grid may have along x, y and z.
const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// Checks the grid against the hardware limits.
fn check_grid(kernel: &'static str, grid: Grid) -> Result<()> {
    for (axis, (n, max)) in [grid.x, grid.y, grid.z].into_iter().zip(MAX_GRID).enumerate() {
        if n > max {
            return Err(Error::Grid {
                kernel,
                reason: format!("axis {axis} has {n} blocks; it takes at most {max}"),
            });
        }
    }
    Ok(())
}

/// What a parameter takes, for messages: "a read-only tensor", "a scalar f32".
fn wanted(p: &ParamSpec) -> String {
    match p {
        ParamSpec::Tensor { mutable: false, .. } => "a read-only tensor".to_string(),
        ParamSpec::Tensor { mutable: true, .. } => "a writable tensor".to_string(),
        ParamSpec::Scalar { dtype, .. } => format!("a scalar {dtype}"),
    }
}

fn argument(kernel: &KernelSpec, reason: String) -> Error {
    Error::Argument {
        kernel: kernel.name,
        reason,
    }
}

/// The arguments of a CPU launch as an array of the kernel's parameter
/// count (the generated CPU versions destructure it).
#[doc(hidden)]
pub fn host_args<'a, 'b, const N: usize>(
    kernel: &KernelSpec,
    args: &'a mut [HostArg<'b>],
) -> Result<&'a mut [HostArg<'b>; N]> {
    let found = args.len();
    args.try_into()
        .map_err(|_| argument(kernel, format!("takes {N} arguments, got {found}")))
}

/// Argument `param` of a CPU launch as the read-only `HostTensor<T>` the
/// kernel's CPU version takes.
#[doc(hidden)]
pub fn host_tensor<'a, T: Element>(
    kernel: &KernelSpec,
    param: usize,
    arg: &'a HostArg<'_>,
) -> Result<&'a HostTensor<T>> {
    let t = match arg {
        Arg::Tensor(t) => t.as_any().downcast_ref(),
        _ => None,
    };
    t.ok_or_else(|| mismatch(kernel, param, &format!("a read-only tensor of {}", T::DTYPE)))
}

/// Argument `param` of a CPU launch as the written `HostTensor<T>` the
/// kernel's CPU version takes.
#[doc(hidden)]
pub fn host_tensor_mut<'a, T: Element>(
    kernel: &KernelSpec,
    param: usize,
    arg: &'a mut HostArg<'_>,
) -> Result<&'a mut HostTensor<T>> {
    let t = match arg {
        Arg::TensorMut(t) => t.as_any_mut().downcast_mut(),
        _ => None,
    };
    t.ok_or_else(|| mismatch(kernel, param, &format!("a writable tensor of {}", T::DTYPE)))
}

/// A scalar kernel argument's type: `f32`, `i32` or `u32`.
pub trait Scalar: Copy {
    /// The value, if `arg` is a scalar of this type.
    fn of<O: ?Sized>(arg: &Arg<'_, O>) -> Option<Self>;
}

impl Scalar for f32 {
    fn of<O: ?Sized>(arg: &Arg<'_, O>) -> Option<f32> {
        match arg {
            Arg::F32(x) => Some(*x),
            _ => None,
        }
    }
}

impl Scalar for i32 {
    fn of<O: ?Sized>(arg: &Arg<'_, O>) -> Option<i32> {
        match arg {
            Arg::I32(x) => Some(*x),
            _ => None,
        }
    }
}

impl Scalar for u32 {
    fn of<O: ?Sized>(arg: &Arg<'_, O>) -> Option<u32> {
        match arg {
            Arg::U32(x) => Some(*x),
            _ => None,
        }
    }
}

/// Argument `param` of a CPU launch as the scalar the kernel's CPU version takes.
#[doc(hidden)]
pub fn host_scalar<S: Scalar>(kernel: &KernelSpec, param: usize, arg: &HostArg<'_>) -> Result<S> {
    S::of(arg).ok_or_else(|| mismatch(kernel, param, std::any::type_name::<S>()))
}

/// The error for an argument that is not `what` the specialization takes.
fn mismatch(kernel: &KernelSpec, param: usize, what: &str) -> Error {
    let name = kernel.params.get(param).map_or("?", ParamSpec::name);
    argument(kernel, format!("argument `{name}` is not {what}"))
}
