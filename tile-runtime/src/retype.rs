//! Turning a generic `&HostTensor<T>` into the concrete type a CPU
//! specialization was compiled for, once the dispatch has matched `T`.

use std::any::Any;

/// `x` as a `U`; panics if `T` is not `U` (the generated dispatch matched them).
pub fn retype<T: Any, U: Any>(x: &T) -> &U {
    (x as &dyn Any)
        .downcast_ref::<U>()
        .expect("the specialization's element types match the generic arguments")
}

/// `x` as a `&mut U`; panics if `T` is not `U`.
pub fn retype_mut<T: Any, U: Any>(x: &mut T) -> &mut U {
    (x as &mut dyn Any)
        .downcast_mut::<U>()
        .expect("the specialization's element types match the generic arguments")
}
