//! Compile errors: a span and a message that teaches the broken rule.

use proc_macro2::Span;

/// One DSL mistake, pointing at the offending tokens.
#[derive(Clone, Debug)]
pub struct Error {
    pub span: Span,
    pub message: String,
}

impl Error {
    pub fn new(span: Span, message: impl Into<String>) -> Error {
        Error {
            span,
            message: message.into(),
        }
    }

    /// The error as a `compile_error!` invocation at its span.
    pub fn to_compile_error(&self) -> proc_macro2::TokenStream {
        syn::Error::new(self.span, &self.message).to_compile_error()
    }
}

impl From<syn::Error> for Error {
    fn from(e: syn::Error) -> Error {
        Error::new(e.span(), e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for `Err(Error::new(span, format!(..)))`.
macro_rules! bail {
    ($span:expr, $($fmt:tt)*) => {
        return Err($crate::error::Error::new($span, format!($($fmt)*)))
    };
}
pub(crate) use bail;
