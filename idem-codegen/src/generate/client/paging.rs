//! A paged list's `PageSpec`, as the client's `.paginate()` reads it; which
//! lists page is the model's ([`crate::model::shape::paging`]).

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::shape::paging::{Next, Paging};

/// The runtime's `PageSpec` for `paging`.
pub(super) fn page_spec(paging: &Paging) -> TokenStream {
    let items = &paging.items;
    let next = match &paging.next {
        Next::AfterLast { more, id, param } => {
            quote!(::idem_runtime::rt::client::NextPage::AfterLastItem { more: #more, id: #id, param: #param })
        }
        Next::Cursor { pointer, param } => {
            quote!(::idem_runtime::rt::client::NextPage::Cursor { pointer: #pointer, param: #param })
        }
        Next::Link => quote!(::idem_runtime::rt::client::NextPage::Link),
        Next::Offset { param, limit } => {
            let limit = match limit {
                Some(l) => quote!(::std::option::Option::Some(#l)),
                None => quote!(::std::option::Option::None),
            };
            quote!(::idem_runtime::rt::client::NextPage::Offset { param: #param, limit: #limit })
        }
        Next::Page { param, first, last } => {
            let last = match last {
                Some(l) => quote!(::std::option::Option::Some(#l)),
                None => quote!(::std::option::Option::None),
            };
            quote!(::idem_runtime::rt::client::NextPage::PageNumber { param: #param, first: #first, last: #last })
        }
    };
    quote!(::idem_runtime::rt::client::PageSpec { items: #items, next: #next })
}
