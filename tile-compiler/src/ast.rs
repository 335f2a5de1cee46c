//! The kernel as the front end read it: a small, spanned syntax tree for the
//! DSL subset of Rust. Nothing here is typed or shaped yet; `check` does that.

use crate::dtype::DType;
use proc_macro2::{Ident, Span};

/// A whole `#[tile::kernel]` function.
pub struct Kernel {
    pub name: Ident,
    pub vis: syn::Visibility,
    /// Doc comments and other outer attributes, carried onto the generated module.
    pub attrs: Vec<syn::Attribute>,
    /// Element-type parameters (`T = [f32, bf16]`), in declaration order.
    pub types: Vec<TypeParam>,
    pub consts: Vec<ConstParam>,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    /// `num_warps = N` from the attribute.
    pub num_warps: Option<u32>,
    /// `num_stages = N` from the attribute: the depth of `mma` pipelines.
    pub num_stages: Option<u32>,
    /// The const parameters' configurations (`configs = [(BM = 64, BN = 128), ..]`),
    /// in the attribute's order; empty when each const parameter lists its values.
    pub configs: Vec<Config>,
    /// The tuning the attribute declares (`grid = ..`, `key = [..]`): the
    /// generated `run` picks a configuration by timing them.
    pub tuning: Option<Tuning>,
}

/// One configuration of the const parameters: a specialization for each
/// combination of element types it allows.
pub struct Config {
    /// Per type parameter, the element types this configuration is built
    /// for; every listed one when empty.
    pub types: Vec<Vec<DType>>,
    /// The value of each const parameter, in declaration order.
    pub consts: Vec<i64>,
}

impl Config {
    /// Whether this configuration is built for the element types `types`.
    pub fn allows(&self, types: &[DType]) -> bool {
        self.types
            .iter()
            .zip(types)
            .all(|(allowed, d)| allowed.is_empty() || allowed.contains(d))
    }
}

/// The tuning the attribute declares: what the generated `run` computes
/// on the host before a launch (see [`tile_spec::Tuning`]), and where each
/// `t.shape(d)` it reads is written (the compiler checks the axis against
/// the tensor's rank).
pub struct Tuning {
    pub sizes: tile_spec::Tuning,
    /// (tensor parameter, axis, where it is written) of every `t.shape(d)`.
    pub dims: Vec<(usize, usize, Span)>,
}

/// A type parameter standing for an element type, and the types to build it for.
pub struct TypeParam {
    pub name: Ident,
    pub dtypes: Vec<DType>,
}

/// An element type as written: fixed, or a type parameter of the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elem {
    Fixed(DType),
    Param(String),
}

/// A `const NAME: usize` generic parameter and the values to build it for.
pub struct ConstParam {
    pub name: Ident,
    pub values: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `&Tensor<T>` (read only) or `&mut Tensor<T>`, with its declared
    /// shape if the type gives one (`&Tensor<T, { [M, N] }>`).
    Tensor {
        elem: Elem,
        mutable: bool,
        shape: Option<Vec<Dim>>,
    },
    /// A scalar passed by value.
    Scalar(DType),
}

/// One dimension of a tensor parameter's declared shape, the shape
/// contract a launch checks (`&Tensor<T, { [M, 64, _] }>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// `_`: any size.
    Any,
    /// A literal size.
    Fixed(usize),
    /// A const parameter's value, or a symbol: every dimension declared
    /// with one symbol has one size, and the body may read it as an `i32`.
    Name(Ident),
    /// A multiple of a name, `3 * C`: the name also appears alone in some
    /// tensor's shape, which gives its size.
    Multiple(usize, Ident),
}

pub struct Param {
    pub name: Ident,
    pub kind: ParamKind,
}

/// Where a shape symbol's size comes from: the first tensor parameter
/// declared with it, and the dimension.
pub fn shape_symbol(params: &[Param], name: &Ident) -> Option<(usize, usize)> {
    params.iter().enumerate().find_map(|(t, p)| match &p.kind {
        ParamKind::Tensor { shape: Some(dims), .. } => dims
            .iter()
            .position(|d| matches!(d, Dim::Name(n) if n == name))
            .map(|axis| (t, axis)),
        _ => None,
    })
}

pub enum Stmt {
    /// `let [a, b] = helper(..);` for DSL helpers that return several scalars.
    LetArray {
        names: Vec<Ident>,
        init: Expr,
    },
    Let {
        name: Ident,
        mutable: bool,
        ann: Option<syn::Type>,
        init: Expr,
    },
    Assign {
        name: Ident,
        value: Expr,
        span: Span,
    },
    Expr(Expr),
    For {
        var: Option<Ident>,
        lo: Expr,
        hi: Expr,
        body: Vec<Stmt>,
        span: Span,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
        span: Span,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

pub enum Expr {
    Int(i64, Option<DType>, Span),
    Float(f64, Option<DType>, Span),
    Bool(bool, Span),
    Var(Ident),
    /// `f32::INFINITY` and friends.
    Path(Vec<Ident>, Span),
    Binary(BinOp, Box<Expr>, Box<Expr>, Span),
    Unary(UnOp, Box<Expr>, Span),
    Call {
        func: Ident,
        generics: Vec<syn::GenericArgument>,
        args: Vec<Expr>,
        span: Span,
    },
    Method {
        recv: Box<Expr>,
        method: Ident,
        generics: Vec<syn::GenericArgument>,
        args: Vec<Expr>,
        span: Span,
    },
    Array(Vec<Expr>, Span),
    Cast(Box<Expr>, syn::Type, Span),
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Int(_, _, s)
            | Expr::Float(_, _, s)
            | Expr::Bool(_, s)
            | Expr::Path(_, s)
            | Expr::Binary(_, _, _, s)
            | Expr::Unary(_, _, s)
            | Expr::Array(_, s)
            | Expr::Cast(_, _, s) => *s,
            Expr::Var(id) => id.span(),
            Expr::Call { span, .. } | Expr::Method { span, .. } => *span,
        }
    }
}
