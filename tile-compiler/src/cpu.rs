//! CPU backend: the same IR as Rust code, one block after another, one tile
//! at a time. It calls the reference tile library in `tile::__private::cpu`,
//! whose element semantics follow the GPU's (wrapping integers, f32 math for
//! half types), so tests can check GPU results against it anywhere.

use crate::dtype::DType;
use crate::ir::*;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::collections::{HashMap, HashSet};

/// The Rust type of an element.
pub fn rust_type(d: DType) -> TokenStream {
    match d {
        DType::F32 => quote!(f32),
        DType::F16 => quote!(::tile::f16),
        DType::BF16 => quote!(::tile::bf16),
        DType::I32 => quote!(i32),
        DType::U32 => quote!(u32),
        DType::Bool => quote!(bool),
    }
}

fn v(id: ValueId) -> proc_macro2::Ident {
    format_ident!("v{}", id)
}

fn usizes(xs: &[usize]) -> TokenStream {
    quote!(&[#(#xs),*])
}

/// The body of a CPU function for one specialization, which returns
/// `tile::Result<()>` (a `wait` that can't be met is an error). Parameter
/// names are bound by the caller: tensors as `&HostTensor<T>` /
/// `&mut HostTensor<T>`, scalars by value, `block` and `nblocks` as
/// `[i32; 3]`, and `cluster` as the `&mut Cluster` the blocks of a
/// cluster hand their gathered tiles over in.
pub fn body(func: &Func) -> TokenStream {
    let cx = Cx {
        func,
        lazy: lazy_broadcasts(func),
    };
    let ops = cx.ops(&func.body);
    quote!(#ops ::core::result::Result::Ok(()))
}

struct Cx<'a> {
    func: &'a Func,
    /// Broadcasts read only by element-wise ops, which broadcast on the fly:
    /// each maps to the value it broadcasts.
    lazy: HashMap<ValueId, ValueId>,
}

/// Broadcasts whose every use is an operand of a binary op or `select`.
fn lazy_broadcasts(func: &Func) -> HashMap<ValueId, ValueId> {
    fn visit(ops: &[Op], defs: &mut HashMap<ValueId, ValueId>, other_uses: &mut HashSet<ValueId>) {
        for op in ops {
            match &op.kind {
                OpKind::Broadcast(a) => {
                    defs.insert(op.results[0], *a);
                    other_uses.insert(*a);
                }
                OpKind::Binary(..) | OpKind::Select(..) => {}
                k => other_uses.extend(k.operands()),
            }
            for b in op.kind.bodies() {
                visit(b, defs, other_uses);
            }
        }
    }
    let mut defs = HashMap::new();
    let mut other_uses = HashSet::new();
    visit(&func.body, &mut defs, &mut other_uses);
    defs.retain(|v, _| !other_uses.contains(v));
    defs
}

impl Cx<'_> {
    fn ops(&self, ops_: &[Op]) -> TokenStream {
        let stmts = ops_.iter().map(|o| self.op(o));
        quote!(#(#stmts)*)
    }

    /// The value to hand an element-wise op: a lazy broadcast's source.
    fn operand(&self, mut x: ValueId) -> ValueId {
        while let Some(&src) = self.lazy.get(&x) {
            x = src;
        }
        x
    }
}

fn param_ident(func: &Func, i: usize) -> proc_macro2::Ident {
    format_ident!("{}", func.params[i].name())
}

impl Cx<'_> {
    fn op(&self, op: &Op) -> TokenStream {
        let func = self.func;
        let cpu = quote!(::tile::__private::cpu);
        let r = op.results.first().copied();
        let is_tile = |x: ValueId| !func.values[x].is_scalar();
        let rhs = match &op.kind {
            OpKind::ScalarParam(i) => {
                let p = param_ident(func, *i);
                quote!(#p)
            }
            OpKind::BlockId(a) => quote!(block[#a]),
            OpKind::NumBlocks(a) => quote!(nblocks[#a]),
            OpKind::TensorDim { tensor, axis } => {
                let t = param_ident(func, *tensor);
                quote!(#t.shape()[#axis] as i32)
            }
            OpKind::Const(c) => {
                let d = func.values[r.expect("result")].dtype;
                constant(*c, d)
            }
            OpKind::Get { tensor, index } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                quote!(#cpu::get(#t, &[#(#ix),*]))
            }
            OpKind::FetchAdd { tensor, index, value } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                quote!(#cpu::fetch_add(#t, &[#(#ix),*], #val))
            }
            OpKind::Splat(s) => {
                let shape = usizes(func.values[r.expect("result")].shape.as_ref().expect("tile"));
                let s = v(*s);
                quote!(#cpu::splat(#shape, #s))
            }
            OpKind::Arange => {
                let n = func.values[r.expect("result")].shape.as_ref().expect("tile")[0];
                quote!(#cpu::arange(#n))
            }
            OpKind::Load { tensor, index, pad } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let shape = usizes(func.values[r.expect("result")].shape.as_ref().expect("tile"));
                let pad = v(*pad);
                quote!(#cpu::load(#t, &[#(#ix),*], #shape, #pad))
            }
            OpKind::LoadFlagged { tensor, index, flag } => {
                let t = param_ident(func, *tensor);
                let name = t.to_string();
                let ix = index.iter().map(|i| v(*i));
                let shape = usizes(func.values[r.expect("result")].shape.as_ref().expect("tile"));
                let flag = v(*flag);
                quote!(#cpu::load_flagged((KERNEL.name, #name), #t, &[#(#ix),*], #shape, #flag)?)
            }
            OpKind::Gather { tensor, index, pad } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let pad = v(*pad);
                quote!(#cpu::gather(#t, &[#(&#ix),*], #pad))
            }
            OpKind::Scatter { tensor, index, value } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                return quote!(#cpu::scatter(#t, &[#(&#ix),*], &#val););
            }
            // Blocks run one after another: every ordering holds.
            OpKind::Atomic {
                tensor,
                index,
                value,
                compare,
                op,
                ..
            } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                match (op, compare) {
                    (AtomicOp::Cas, Some(c)) => {
                        let c = v(*c);
                        quote!(#cpu::atomic_cas(#t, &[#(&#ix),*], &#c, &#val))
                    }
                    _ => {
                        let f = match op {
                            AtomicOp::Add => quote!(#cpu::ops::add),
                            AtomicOp::Max => quote!(#cpu::ops::max),
                            AtomicOp::Min => quote!(#cpu::ops::min),
                            AtomicOp::Exch | AtomicOp::Cas => quote!(#cpu::ops::replace),
                        };
                        quote!(#cpu::atomic(#t, &[#(&#ix),*], &#val, #f))
                    }
                }
            }
            // A hint for the GPU's L2: nothing to do on the CPU.
            OpKind::Prefetch { .. } => return quote!(),
            OpKind::Signal { tensor, index, value } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                return quote!(#cpu::signal(#t, &[#(#ix),*], #val););
            }
            OpKind::Wait { tensor, index, value } => {
                let t = param_ident(func, *tensor);
                let name = t.to_string();
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                return quote!(#cpu::wait((KERNEL.name, #name), #t, &[#(#ix),*], #val)?;);
            }
            OpKind::StoreFlagged {
                tensor,
                index,
                value,
                flag,
            } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let (val, flag) = (v(*value), v(*flag));
                return quote!(#cpu::store_flagged(#t, &[#(#ix),*], &#val, #flag););
            }
            OpKind::Store { tensor, index, value } => {
                let t = param_ident(func, *tensor);
                let ix = index.iter().map(|i| v(*i));
                let val = v(*value);
                return quote!(#cpu::store(#t, &[#(#ix),*], &#val););
            }
            OpKind::Unary(u, a) => {
                let f = match u {
                    UnaryOp::Neg => quote!(neg),
                    UnaryOp::Not => quote!(not),
                    UnaryOp::Exp => quote!(exp),
                    UnaryOp::Exp2 => quote!(exp2),
                    UnaryOp::Log => quote!(log),
                    UnaryOp::Log2 => quote!(log2),
                    UnaryOp::Sqrt => quote!(sqrt),
                    UnaryOp::Rsqrt => quote!(rsqrt),
                    UnaryOp::Tanh => quote!(tanh),
                    UnaryOp::Erf => quote!(erf),
                    UnaryOp::Gelu => quote!(gelu),
                    UnaryOp::Abs => quote!(abs),
                    UnaryOp::Bitcast => {
                        let to = rust_type(func.values[r.expect("result")].dtype);
                        quote!(bitcast::<_, #to>)
                    }
                };
                let a_ = v(*a);
                if is_tile(*a) {
                    quote!(#cpu::map(&#a_, #cpu::ops::#f))
                } else {
                    quote!(#cpu::ops::#f(#a_))
                }
            }
            OpKind::Binary(b, x, y) => {
                let f = match b {
                    BinaryOp::Add => quote!(add),
                    BinaryOp::Sub => quote!(sub),
                    BinaryOp::Mul => quote!(mul),
                    BinaryOp::Div => quote!(div),
                    BinaryOp::Rem => quote!(rem),
                    BinaryOp::Max => quote!(max),
                    BinaryOp::Min => quote!(min),
                    BinaryOp::And => quote!(and),
                    BinaryOp::Or => quote!(or),
                    BinaryOp::Xor => quote!(xor),
                    BinaryOp::Shl => quote!(shl),
                    BinaryOp::Shr => quote!(shr),
                    BinaryOp::Eq => quote!(eq),
                    BinaryOp::Ne => quote!(ne),
                    BinaryOp::Lt => quote!(lt),
                    BinaryOp::Le => quote!(le),
                    BinaryOp::Gt => quote!(gt),
                    BinaryOp::Ge => quote!(ge),
                };
                let (x_, y_) = (v(self.operand(*x)), v(self.operand(*y)));
                if is_tile(*x) {
                    let shape = usizes(func.values[*x].shape.as_ref().expect("tile"));
                    quote!(#cpu::zip(&#x_, &#y_, #shape, #cpu::ops::#f))
                } else {
                    quote!(#cpu::ops::#f(#x_, #y_))
                }
            }
            OpKind::Select(c, a, b) => {
                let (c_, a_, b_) = (v(self.operand(*c)), v(self.operand(*a)), v(self.operand(*b)));
                if is_tile(*a) {
                    let shape = usizes(func.values[*a].shape.as_ref().expect("tile"));
                    quote!(#cpu::zip3(&#c_, &#a_, &#b_, #shape, #cpu::ops::select))
                } else {
                    quote!(#cpu::ops::select(#c_, #a_, #b_))
                }
            }
            OpKind::Cast(a) => {
                let to = rust_type(func.values[r.expect("result")].dtype);
                let a_ = v(*a);
                if is_tile(*a) {
                    quote!(#cpu::map(&#a_, |x| #cpu::ops::cast::<_, #to>(x)))
                } else {
                    quote!(#cpu::ops::cast::<_, #to>(#a_))
                }
            }
            OpKind::Reduce { op: rop, arg, axis } => {
                let a_ = v(*arg);
                match rop {
                    ReduceOp::Sum => quote!(#cpu::reduce(&#a_, #axis, #cpu::Reduction::Sum)),
                    ReduceOp::Max => quote!(#cpu::reduce(&#a_, #axis, #cpu::Reduction::Max)),
                    ReduceOp::Min => quote!(#cpu::reduce(&#a_, #axis, #cpu::Reduction::Min)),
                    ReduceOp::ArgMax => quote!(#cpu::arg_reduce(&#a_, #axis, true)),
                    ReduceOp::ArgMin => quote!(#cpu::arg_reduce(&#a_, #axis, false)),
                }
            }
            OpKind::Scan {
                op: sop,
                arg,
                axis,
                reverse,
            } => {
                let a_ = v(*arg);
                let sop = match sop {
                    ScanOp::Sum => quote!(Sum),
                    ScanOp::Prod => quote!(Prod),
                    ScanOp::Max => quote!(Max),
                    ScanOp::Min => quote!(Min),
                };
                quote!(#cpu::scan(&#a_, #axis, #cpu::Scan::#sop, #reverse))
            }
            OpKind::ClusterGather { arg, blocks } => {
                let a_ = v(*arg);
                let gather = r.expect("result");
                quote!(#cpu::cluster_gather(cluster, #gather, &#a_, #blocks, block[0]))
            }
            OpKind::Sort {
                arg,
                axis,
                descending,
                indices,
                keep,
            } => {
                let a_ = v(*arg);
                if *indices {
                    quote!(#cpu::head(&#cpu::argsort(&#a_, #axis, #descending), #axis, #keep))
                } else {
                    quote!(#cpu::head(&#cpu::sort(&#a_, #axis, #descending), #axis, #keep))
                }
            }
            OpKind::Reshape(a) => {
                let shape = usizes(func.values[r.expect("result")].shape.as_ref().expect("tile"));
                let a_ = v(*a);
                quote!(#cpu::reshape(&#a_, #shape))
            }
            OpKind::Broadcast(_) if self.lazy.contains_key(&op.results[0]) => return quote!(),
            OpKind::Broadcast(a) => {
                let shape = usizes(func.values[r.expect("result")].shape.as_ref().expect("tile"));
                let a_ = v(*a);
                quote!(#cpu::broadcast(&#a_, #shape))
            }
            OpKind::Permute { arg, perm } => {
                let a_ = v(*arg);
                let p = usizes(perm);
                quote!(#cpu::permute(&#a_, #p))
            }
            OpKind::Mma { a, b, acc } => {
                let (a_, b_, c_) = (v(*a), v(*b), v(*acc));
                quote!(#cpu::mma(&#a_, &#b_, &#c_))
            }
            OpKind::Convert(a) => {
                let a_ = v(*a);
                quote!(#a_.clone())
            }
            OpKind::For {
                lo,
                hi,
                var,
                inits,
                args,
                body,
                yields,
            } => {
                let carried: Vec<_> = (0..args.len())
                    .map(|i| format_ident!("carried{}_{}", op.results[i], i))
                    .collect();
                let (lo, hi, var) = (v(*lo), v(*hi), v(*var));
                let inits = inits.iter().map(|x| v(*x));
                let args = args.iter().map(|x| v(*x));
                let yields = yields.iter().map(|x| v(*x));
                let results = op.results.iter().map(|x| v(*x));
                let body = self.ops(body);
                let c1 = carried.clone();
                let c2 = carried.clone();
                let c3 = carried.clone();
                return quote! {
                    #(let mut #c1 = #inits.clone();)*
                    for #var in #lo..#hi {
                        #(let #args = #c2.clone();)*
                        #body
                        #(#c3 = #yields.clone();)*
                    }
                    #(let #results = #carried;)*
                };
            }
            OpKind::If {
                cond,
                then_body,
                then_yields,
                else_body,
                else_yields,
            } => {
                let c = v(*cond);
                let tb = self.ops(then_body);
                let eb = self.ops(else_body);
                let ty = then_yields.iter().map(|x| v(*x));
                let ey = else_yields.iter().map(|x| v(*x));
                let results = op.results.iter().map(|x| v(*x));
                return quote! {
                    let (#(#results,)*) = if #c {
                        #tb
                        (#(#ty.clone(),)*)
                    } else {
                        #eb
                        (#(#ey.clone(),)*)
                    };
                };
            }
        };
        match r {
            Some(r) => {
                let name = v(r);
                quote!(let #name = #rhs;)
            }
            None => quote!(#rhs;),
        }
    }
}

fn constant(c: ConstVal, d: DType) -> TokenStream {
    match (c, d) {
        (ConstVal::Bool(b), _) => quote!(#b),
        (ConstVal::Int(i), DType::I32) => {
            let i = i as i32;
            quote!(#i)
        }
        (ConstVal::Int(i), DType::U32) => {
            let i = i as u32;
            quote!(#i)
        }
        (ConstVal::Int(i), d) => constant(ConstVal::Float(i as f64), d),
        (ConstVal::Float(x), d) => {
            let bits = (x as f32).to_bits();
            let f = quote!(f32::from_bits(#bits));
            match d {
                DType::F32 => f,
                other => {
                    let t = rust_type(other);
                    quote!(<#t>::from_f32(#f))
                }
            }
        }
    }
}
