// The chapters are the markdown files of docs/, rendered with the crate's
// documentation; their Rust code blocks are the crate's doc tests. Each
// module's docs start with `guide_links!()` (src/lib.rs), which makes the
// chapters' cross-references intra-doc links.

#![doc = guide_links!()]
#![doc = include_str!("../docs/README.md")]

#[doc = guide_links!()]
#[doc = include_str!("../docs/01-mental-model.md")]
pub mod ch01_mental_model {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/02-vector-add.md")]
pub mod ch02_vector_add {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/03-softmax.md")]
pub mod ch03_softmax {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/04-layernorm.md")]
pub mod ch04_layernorm {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/05-matmul.md")]
pub mod ch05_matmul {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/06-flash-attention.md")]
pub mod ch06_flash_attention {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/07-gpt-block.md")]
pub mod ch07_gpt_block {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/08-reference.md")]
pub mod ch08_reference {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/09-host-api.md")]
pub mod ch09_host_api {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/10-debugging.md")]
pub mod ch10_debugging {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/11-performance.md")]
pub mod ch11_performance {}
