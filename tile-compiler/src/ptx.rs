//! PTX text: register classes, and assembling a kernel entry from the
//! instructions `lower` produced (module headers per target: [`crate::Target`]).

use crate::dtype::DType;
use std::fmt::Write;

/// Register classes, one PTX register prefix each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    Pred,
    B16,
    B32,
    F32,
    B64,
}

impl RegClass {
    pub const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::F32,
        RegClass::B64,
    ];

    pub fn of(dtype: DType) -> RegClass {
        match dtype {
            DType::F32 => RegClass::F32,
            DType::F16 | DType::BF16 => RegClass::B16,
            DType::I32 | DType::U32 => RegClass::B32,
            DType::Bool => RegClass::Pred,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%h",
            RegClass::B32 => "%r",
            RegClass::F32 => "%f",
            RegClass::B64 => "%rd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::F32 => ".f32",
            RegClass::B64 => ".b64",
        }
    }
}

/// Hands out virtual registers; ptxas allocates the physical ones.
#[derive(Default)]
pub struct Regs {
    counts: [usize; 5],
}

impl Regs {
    pub fn new_reg(&mut self, class: RegClass) -> String {
        let i = RegClass::ALL.iter().position(|c| *c == class).expect("class");
        self.counts[i] += 1;
        format!("{}{}", class.prefix(), self.counts[i])
    }

    fn declarations(&self) -> String {
        let mut s = String::new();
        for (i, c) in RegClass::ALL.iter().enumerate() {
            if self.counts[i] > 0 {
                writeln!(s, "\t.reg {} {}<{}>;", c.decl(), c.prefix(), self.counts[i] + 1).expect("write");
            }
        }
        s
    }
}

/// The PTX type suffix for arithmetic on a dtype.
pub fn arith_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I32 => "s32",
        DType::U32 => "u32",
        DType::Bool => "pred",
    }
}

/// An f32 immediate, exact to the bit.
pub fn f32_imm(x: f64) -> String {
    format!("0f{:08X}", (x as f32).to_bits())
}

/// The `ty` of a tensor-map parameter (see [`EntryParam`]).
pub const TENSOR_MAP: &str = "tensormap";

/// One kernel parameter as declared in the entry: `ty` is a PTX scalar
/// type, or [`TENSOR_MAP`].
#[derive(Clone)]
pub struct EntryParam {
    pub name: String,
    pub ty: &'static str,
}

/// Shared memory an entry declares: a static scratch array, and whether it
/// uses dynamic shared memory (sized at launch).
pub struct SharedMemory {
    pub static_bytes: usize,
    pub dynamic: bool,
    /// The bytes of each `cluster_gather`'s buffer (`cluster_buffer0`, ..).
    pub cluster_buffers: Vec<usize>,
}

/// How an entry is launched: threads per block; each thread's registers
/// at entry, which ptxas must know when the kernel moves registers between
/// warps (`setmaxnreg`); the blocks each SM should hold at once, which
/// bounds the registers ptxas gives each thread; and the blocks of a
/// cluster, when launched in clusters.
pub struct LaunchShape {
    pub threads: u32,
    pub max_registers: Option<u32>,
    pub min_blocks: Option<u32>,
    pub cluster: Option<u32>,
}

/// Assembles an `.entry` (without the module header).
pub fn entry(
    name: &str,
    params: &[EntryParam],
    launch: LaunchShape,
    regs: &Regs,
    shared: SharedMemory,
    body: (&[String], &[String]),
) -> String {
    let (shared_bytes, dynamic_shared) = (shared.static_bytes, shared.dynamic);
    let (prologue, code) = body;
    let mut s = String::new();
    if dynamic_shared {
        // Dynamic shared memory: sized at launch, declared at module scope.
        writeln!(s, ".extern .shared .align 1024 .b8 {name}_dyn_smem[];\n").expect("write");
    }
    writeln!(s, ".visible .entry {name}(").expect("write");
    let ps: Vec<String> = params
        .iter()
        .map(|p| match p.ty {
            // A CUtensorMap, passed by value: 128 bytes, 64-byte aligned.
            TENSOR_MAP => format!("\t.param .align 64 .b8 {}[128]", p.name),
            ty => format!("\t.param .{ty} {}", p.name),
        })
        .collect();
    writeln!(s, "{}\n)", ps.join(",\n")).expect("write");
    writeln!(s, ".maxntid {}, 1, 1", launch.threads).expect("write");
    if let Some(n) = launch.max_registers {
        writeln!(s, ".maxnreg {n}").expect("write");
    }
    if let Some(n) = launch.min_blocks {
        writeln!(s, ".minnctapersm {n}").expect("write");
    }
    if let Some(n) = launch.cluster {
        writeln!(s, ".reqnctapercluster {n}, 1, 1").expect("write");
    }
    s.push_str("{\n");
    s.push_str(&regs.declarations());
    if shared_bytes > 0 {
        writeln!(
            s,
            "\t.shared .align {} .b8 smem[{shared_bytes}];",
            crate::plan::memory::SCRATCH_ALIGN
        )
        .expect("write");
    }
    for (i, bytes) in shared.cluster_buffers.iter().enumerate() {
        writeln!(s, "\t.shared .align 16 .b8 cluster_buffer{i}[{bytes}];").expect("write");
    }

    s.push('\n');
    for line in prologue.iter().chain(code) {
        if line.ends_with(':') {
            writeln!(s, "{line}").expect("write");
        } else {
            writeln!(s, "\t{line}").expect("write");
        }
    }
    s.push_str("\tret;\n}\n");
    s
}
