//! Element operations with the GPU's semantics: wrapping integer
//! arithmetic, half types computed in f32 and rounded, casts and bit casts.

use half::{bf16, f16};

/// A number the reference library computes with.
pub trait Scalar: Copy + PartialOrd + std::fmt::Debug {
    /// The value as an f64, exactly (booleans as 0 or 1).
    fn to_f64(self) -> f64;
    /// Rounds floats; wraps integers.
    fn from_f64(x: f64) -> Self;
}

/// Arithmetic with GPU semantics.
pub trait Arith: Scalar {
    /// `self + o`.
    fn add(self, o: Self) -> Self;
    /// `self - o`.
    fn sub(self, o: Self) -> Self;
    /// `self * o`.
    fn mul(self, o: Self) -> Self;
    /// `self / o`; an integer division by zero gives all ones.
    fn div(self, o: Self) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// The absolute value.
    fn abs(self) -> Self;
}

macro_rules! float_arith {
    ($t:ty, $to:expr, $from:expr) => {
        impl Scalar for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f32 = $to;
                f(self) as f64
            }
            #[inline]
            fn from_f64(x: f64) -> Self {
                let f: fn(f32) -> $t = $from;
                f(x as f32)
            }
        }
        impl Arith for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(to(self) + to(o))
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(to(self) - to(o))
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(to(self) * to(o))
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(to(self) / to(o))
            }
            #[inline]
            fn neg(self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(-to(self))
            }
            #[inline]
            fn abs(self) -> Self {
                let (to, from): (fn($t) -> f32, fn(f32) -> $t) = ($to, $from);
                from(to(self).abs())
            }
        }
    };
}
float_arith!(f32, |x| x, |x| x);
float_arith!(f16, |x| x.to_f32(), f16::from_f32);
float_arith!(bf16, |x| x.to_f32(), bf16::from_f32);

macro_rules! int_arith {
    ($t:ty) => {
        impl Scalar for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as i64 as $t
            }
        }
        impl Arith for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            /// Division by zero gives all ones, as the GPU's does.
            #[inline]
            fn div(self, o: Self) -> Self {
                if o == 0 { !0 } else { self.wrapping_div(o) }
            }
            #[inline]
            fn neg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[allow(unused_comparisons)]
            #[inline]
            fn abs(self) -> Self {
                if self < 0 {
                    (0 as $t).wrapping_sub(self)
                } else {
                    self
                }
            }
        }
    };
}
int_arith!(i32);
int_arith!(u32);

impl Scalar for bool {
    #[inline]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
}

/// `a + b`, wrapping for integers; half types round the f32 sum.
#[inline]
pub fn add<T: Arith>(a: T, b: T) -> T {
    a.add(b)
}
/// `a - b`, wrapping for integers; half types round the f32 difference.
#[inline]
pub fn sub<T: Arith>(a: T, b: T) -> T {
    a.sub(b)
}
/// `a * b`, wrapping for integers; half types round the f32 product.
#[inline]
pub fn mul<T: Arith>(a: T, b: T) -> T {
    a.mul(b)
}
/// `a / b`; an integer division by zero gives all ones, as the GPU's does.
#[inline]
pub fn div<T: Arith>(a: T, b: T) -> T {
    a.div(b)
}
/// `-a`, wrapping for integers.
#[inline]
pub fn neg<T: Arith>(a: T) -> T {
    a.neg()
}
/// `|a|`, wrapping for `i32::MIN`.
#[inline]
pub fn abs<T: Arith>(a: T) -> T {
    a.abs()
}

/// The larger value; a NaN operand loses, as with the GPU's `max`.
#[inline]
pub fn max<T: Scalar>(a: T, b: T) -> T {
    if b > a || a.partial_cmp(&a).is_none() { b } else { a }
}
/// The smaller value; a NaN operand loses, as with the GPU's `min`.
#[inline]
pub fn min<T: Scalar>(a: T, b: T) -> T {
    if b < a || a.partial_cmp(&a).is_none() { b } else { a }
}

/// `a == b`.
#[inline]
pub fn eq<T: PartialEq>(a: T, b: T) -> bool {
    a == b
}
/// `a != b`.
#[inline]
pub fn ne<T: PartialEq>(a: T, b: T) -> bool {
    a != b
}
/// `a < b`.
#[inline]
pub fn lt<T: PartialOrd>(a: T, b: T) -> bool {
    a < b
}
/// `a <= b`.
#[inline]
pub fn le<T: PartialOrd>(a: T, b: T) -> bool {
    a <= b
}
/// `a > b`.
#[inline]
pub fn gt<T: PartialOrd>(a: T, b: T) -> bool {
    a > b
}
/// `a >= b`.
#[inline]
pub fn ge<T: PartialOrd>(a: T, b: T) -> bool {
    a >= b
}

/// Integer-only operations.
pub trait Int: Copy {
    /// `self % o`; the remainder by zero is `self`.
    fn rem(self, o: Self) -> Self;
    /// `self << o`; shifts of 32 or more give 0.
    fn shl(self, o: Self) -> Self;
    /// `self >> o`; shifts of 32 or more give 0 for `u32` and the sign (0 or
    /// -1) for `i32`.
    fn shr(self, o: Self) -> Self;
}
impl Int for i32 {
    #[inline]
    fn rem(self, o: Self) -> Self {
        if o == 0 { self } else { self.wrapping_rem(o) }
    }
    /// Shift amounts of 32 or more give 0 (the sign for `>>`), as PTX clamps them.
    #[inline]
    fn shl(self, o: Self) -> Self {
        if (o as u32) >= 32 { 0 } else { self << o }
    }
    #[inline]
    fn shr(self, o: Self) -> Self {
        self >> (o as u32).min(31)
    }
}
impl Int for u32 {
    #[inline]
    fn rem(self, o: Self) -> Self {
        if o == 0 { self } else { self % o }
    }
    #[inline]
    fn shl(self, o: Self) -> Self {
        if o >= 32 { 0 } else { self << o }
    }
    #[inline]
    fn shr(self, o: Self) -> Self {
        if o >= 32 { 0 } else { self >> o }
    }
}
/// `a % b`, see [`Int::rem`].
#[inline]
pub fn rem<T: Int>(a: T, b: T) -> T {
    a.rem(b)
}
/// `a << b`, see [`Int::shl`].
#[inline]
pub fn shl<T: Int>(a: T, b: T) -> T {
    a.shl(b)
}
/// `a >> b`, see [`Int::shr`].
#[inline]
pub fn shr<T: Int>(a: T, b: T) -> T {
    a.shr(b)
}

/// `b`: what `atomic_exch` leaves in the element.
#[inline]
pub fn replace<T>(_old: T, b: T) -> T {
    b
}

/// Equality of the bits, as a compare-and-swap compares: `-0.0` is not
/// `0.0`, and a NaN equals a NaN of the same bits.
pub trait SameBits: Copy {
    /// Whether `self` and `o` have the same bits.
    fn same_bits(self, o: Self) -> bool;
}
impl SameBits for f32 {
    #[inline]
    fn same_bits(self, o: Self) -> bool {
        self.to_bits() == o.to_bits()
    }
}
impl SameBits for i32 {
    #[inline]
    fn same_bits(self, o: Self) -> bool {
        self == o
    }
}
impl SameBits for u32 {
    #[inline]
    fn same_bits(self, o: Self) -> bool {
        self == o
    }
}

/// Bitwise (integers) and logical (bool) operations.
pub trait Bits: Copy {
    /// `self & o`.
    fn and(self, o: Self) -> Self;
    /// `self | o`.
    fn or(self, o: Self) -> Self;
    /// `self ^ o`.
    fn xor(self, o: Self) -> Self;
    /// `!self`.
    fn not(self) -> Self;
}
macro_rules! bits {
    ($t:ty) => {
        impl Bits for $t {
            #[inline]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline]
            fn or(self, o: Self) -> Self {
                self | o
            }
            #[inline]
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline]
            fn not(self) -> Self {
                !self
            }
        }
    };
}
bits!(i32);
bits!(u32);
bits!(bool);
/// `a & b`: bitwise for integers, logical for `bool`.
#[inline]
pub fn and<T: Bits>(a: T, b: T) -> T {
    a.and(b)
}
/// `a | b`: bitwise for integers, logical for `bool`.
#[inline]
pub fn or<T: Bits>(a: T, b: T) -> T {
    a.or(b)
}
/// `a ^ b`: bitwise for integers, logical for `bool`.
#[inline]
pub fn xor<T: Bits>(a: T, b: T) -> T {
    a.xor(b)
}
/// `!a`: bitwise for integers, logical for `bool`.
#[inline]
pub fn not<T: Bits>(a: T) -> T {
    a.not()
}

/// `a` where `c` holds, else `b` (`select`).
#[inline]
pub fn select<T>(c: bool, a: T, b: T) -> T {
    if c { a } else { b }
}

/// Transcendentals, computed exactly in f32 (half types round the result).
pub trait Float: Scalar {
    /// `f` applied to the value as an f32, the result rounded back to `Self`.
    fn via(self, f: fn(f32) -> f32) -> Self;
}
impl Float for f32 {
    #[inline]
    fn via(self, f: fn(f32) -> f32) -> Self {
        f(self)
    }
}
impl Float for f16 {
    #[inline]
    fn via(self, f: fn(f32) -> f32) -> Self {
        f16::from_f32(f(self.to_f32()))
    }
}
impl Float for bf16 {
    #[inline]
    fn via(self, f: fn(f32) -> f32) -> Self {
        bf16::from_f32(f(self.to_f32()))
    }
}
/// `e^a`.
#[inline]
pub fn exp<T: Float>(a: T) -> T {
    a.via(f32::exp)
}
/// `2^a`.
#[inline]
pub fn exp2<T: Float>(a: T) -> T {
    a.via(f32::exp2)
}
/// The natural logarithm.
#[inline]
pub fn log<T: Float>(a: T) -> T {
    a.via(f32::ln)
}
/// The base-2 logarithm.
#[inline]
pub fn log2<T: Float>(a: T) -> T {
    a.via(f32::log2)
}
/// The square root.
#[inline]
pub fn sqrt<T: Float>(a: T) -> T {
    a.via(f32::sqrt)
}
/// `1 / sqrt(a)`.
#[inline]
pub fn rsqrt<T: Float>(a: T) -> T {
    a.via(|x| 1.0 / x.sqrt())
}
/// The hyperbolic tangent.
#[inline]
pub fn tanh<T: Float>(a: T) -> T {
    a.via(f32::tanh)
}
/// The error function.
#[inline]
pub fn erf<T: Float>(a: T) -> T {
    a.via(libm::erff)
}
/// GELU in the tanh form (GPT-2's `gelu_new`), in f32.
#[inline]
pub fn gelu<T: Float>(a: T) -> T {
    a.via(|x| {
        let inner = std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2 * (x + 0.044715 * x * x * x);
        0.5 * x * (1.0 + inner.tanh())
    })
}

/// Element types a flagged tensor holds (`store_flagged`): each 4-byte
/// word of data is `PER_WORD` elements, and its u32 flag takes as many,
/// low half first.
pub trait Flagged: crate::Element {
    /// Elements in 4 bytes.
    const PER_WORD: usize;
    /// Part `k` of a word's bits, as an element.
    fn from_word_part(word: u32, k: usize) -> Self;
    /// This element's bits, zero-extended.
    fn word_part(self) -> u32;
}
impl Flagged for f32 {
    const PER_WORD: usize = 1;
    fn from_word_part(word: u32, _: usize) -> Self {
        f32::from_bits(word)
    }
    fn word_part(self) -> u32 {
        self.to_bits()
    }
}
impl Flagged for i32 {
    const PER_WORD: usize = 1;
    fn from_word_part(word: u32, _: usize) -> Self {
        word as i32
    }
    fn word_part(self) -> u32 {
        self as u32
    }
}
impl Flagged for u32 {
    const PER_WORD: usize = 1;
    fn from_word_part(word: u32, _: usize) -> Self {
        word
    }
    fn word_part(self) -> u32 {
        self
    }
}
macro_rules! flagged_halves {
    ($($t:ty),*) => {
        $(impl Flagged for $t {
            const PER_WORD: usize = 2;
            fn from_word_part(word: u32, k: usize) -> Self {
                <$t>::from_bits((word >> (16 * k)) as u16)
            }
            fn word_part(self) -> u32 {
                self.to_bits() as u32
            }
        })*
    };
}
flagged_halves!(half::f16, half::bf16);

/// Reading 32 bits as another type (`.bitcast::<U>()`).
pub trait BitcastTo<U> {
    /// The same bits as `U`.
    fn bitcast(self) -> U;
}
/// `a`'s bits as `U` (`.bitcast::<U>()`), see [`BitcastTo`].
#[inline]
pub fn bitcast<T: BitcastTo<U>, U>(a: T) -> U {
    a.bitcast()
}
macro_rules! bitcasts {
    ($($from:ty => $to:ty : |$x:ident| $e:expr;)*) => {
        $(impl BitcastTo<$to> for $from {
            #[inline]
            fn bitcast(self) -> $to {
                let $x = self;
                $e
            }
        })*
    };
}
bitcasts! {
    f32 => u32: |x| x.to_bits();
    f32 => i32: |x| x.to_bits() as i32;
    u32 => f32: |x| f32::from_bits(x);
    i32 => f32: |x| f32::from_bits(x as u32);
    u32 => i32: |x| x as i32;
    i32 => u32: |x| x as u32;
}

/// Conversion between element types with Rust `as` semantics (saturating
/// float-to-int, bit-preserving i32/u32, round-to-nearest to half types).
pub trait CastTo<U> {
    /// The value converted to `U`.
    fn cast(self) -> U;
}
/// `a` converted to `U` (`.cast::<U>()`), see [`CastTo`].
#[inline]
pub fn cast<T: CastTo<U>, U>(a: T) -> U {
    a.cast()
}
macro_rules! casts {
    ($($from:ty => $to:ty : |$x:ident| $e:expr;)*) => {
        $(impl CastTo<$to> for $from {
            #[inline]
            fn cast(self) -> $to {
                let $x = self;
                $e
            }
        })*
    };
}
casts! {
    f32 => f32: |x| x;
    f32 => f16: |x| f16::from_f32(x);
    f32 => bf16: |x| bf16::from_f32(x);
    f32 => i32: |x| x as i32;
    f32 => u32: |x| x as u32;
    f32 => bool: |x| x != 0.0;
    f16 => f32: |x| x.to_f32();
    f16 => f16: |x| x;
    f16 => bf16: |x| bf16::from_f32(x.to_f32());
    f16 => i32: |x| x.to_f32() as i32;
    f16 => u32: |x| x.to_f32() as u32;
    f16 => bool: |x| x.to_f32() != 0.0;
    bf16 => f32: |x| x.to_f32();
    bf16 => f16: |x| f16::from_f32(x.to_f32());
    bf16 => bf16: |x| x;
    bf16 => i32: |x| x.to_f32() as i32;
    bf16 => u32: |x| x.to_f32() as u32;
    bf16 => bool: |x| x.to_f32() != 0.0;
    i32 => f32: |x| x as f32;
    i32 => f16: |x| f16::from_f32(x as f32);
    i32 => bf16: |x| bf16::from_f32(x as f32);
    i32 => i32: |x| x;
    i32 => u32: |x| x as u32;
    i32 => bool: |x| x != 0;
    u32 => f32: |x| x as f32;
    u32 => f16: |x| f16::from_f32(x as f32);
    u32 => bf16: |x| bf16::from_f32(x as f32);
    u32 => i32: |x| x as i32;
    u32 => u32: |x| x;
    u32 => bool: |x| x != 0;
    bool => f32: |x| x as u8 as f32;
    bool => f16: |x| f16::from_f32(x as u8 as f32);
    bool => bf16: |x| bf16::from_f32(x as u8 as f32);
    bool => i32: |x| x as i32;
    bool => u32: |x| x as u32;
    bool => bool: |x| x;
}
