//! A phased operation's typed stages: each phase consumes the stage before
//! it, so none can be skipped or reordered.

use proc_macro2::TokenStream;
use quote::quote;

use super::inputs::media_check;
use super::wiring::rt;
use crate::generate::naming::{self, Namer};
use crate::generate::types::{TypeSpace, doc_attrs, ident};
use crate::model::Operation;

pub(super) struct Phased {
    pub(super) items: TokenStream,
    /// The first stage's type.
    pub(super) first: proc_macro2::Ident,
    /// The completion token's type.
    pub(super) done: proc_macro2::Ident,
    /// The `Operation` adapter's type.
    pub(super) operation: proc_macro2::Ident,
}

/// The typed step API of a phased operation: one stage type per phase, each
/// consumed by running its phase, and a completion token only the last
/// stage can produce.
pub(super) fn phased(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    method: &str,
    reply: &proc_macro2::Ident,
    input: Option<&proc_macro2::Ident>,
) -> Phased {
    let rt = rt();
    let phases: Vec<String> = op
        .phases
        .as_ref()
        .map(|p| p.value.clone())
        .unwrap_or_default();
    let first = ident(&space.namer.unique(&format!("{camel}Steps")));
    let done = ident(&space.namer.unique(&format!("{camel}Done")));
    let operation = ident(&space.namer.unique(&format!("{camel}Operation")));
    let mut stages = vec![first.clone()];
    for phase in &phases {
        stages.push(ident(
            &space
                .namer
                .unique(&format!("{camel}After{}", naming::camel(phase, "Phase"))),
        ));
    }
    let mut items = Vec::new();
    let bare = method.trim_start_matches("r#");
    for (index, stage) in stages.iter().enumerate() {
        let at = Stage {
            index,
            stage,
            phases: &phases,
            stages: &stages,
        };
        items.push(stage_item(&at, bare, reply, &done));
    }
    let name = op.stable_name();
    let template = &op.path;
    // The live request's content type, before the claim: a resumed one has
    // no headers left to check.
    let validate = media_check(op).map(|(required, accepted)| {
        quote! {
            fn validate(&self, parts: &::idem_runtime::rt::http::request::Parts, body: &[u8]) -> ::std::result::Result<(), ::std::boxed::Box<#rt::Reply>> {
                #rt::media_type(parts, !body.is_empty(), #required, &[#(#accepted),*])
                    .map_err(|rejection| ::std::boxed::Box::new(rejection.into_reply()))
            }
        }
    });
    let (read, pass) = match input {
        Some(input) => (
            quote! {
                let inbound = #rt::Inbound::stored(run.method(), run.path(), run.body(), #template)
                    .map_err(|r| #rt::StepError::Reject(::std::boxed::Box::new(r.into_reply())))?;
                let input = <#input as #rt::Input>::read(&inbound)
                    .await
                    .map_err(|r| #rt::StepError::Reject(::std::boxed::Box::new(r.into_reply())))?;
            },
            quote!(, input),
        ),
        None => (TokenStream::new(), TokenStream::new()),
    };
    let method_ident = ident(method);
    let done_doc =
        format!(" A finished [`{bare}`](Api::{bare}): only its last stage (or `stop`) makes one.");
    let op_doc =
        format!(" Runs [`{bare}`](Api::{bare}) under the key protocol, resumable by name.");
    items.push(quote! {
        #[doc = #done_doc]
        #[derive(Debug)]
        pub struct #done(#reply);

        #[doc = #op_doc]
        struct #operation<A> {
            api: ::std::sync::Arc<A>,
        }

        impl<DB: #rt::Backend, A: Api<DB>> #rt::Operation<DB> for #operation<A> {
            fn name(&self) -> &'static str {
                #name
            }

            #validate

            fn run<'a>(&'a self, run: &'a mut #rt::Run<DB>) -> #rt::BoxFuture<'a, ::std::result::Result<#rt::Reply, #rt::StepError>> {
                ::std::boxed::Box::pin(async move {
                    #read
                    let steps = #first { run };
                    let #done(reply) = self.api.#method_ident(steps #pass).await?;
                    ::std::result::Result::Ok(reply.into_reply())
                })
            }
        }
    });
    Phased {
        items: quote!(#(#items)*),
        first,
        done,
        operation,
    }
}

/// One stage of a phased operation's chain: where it sits, and the names
/// around it.
struct Stage<'s> {
    index: usize,
    stage: &'s proc_macro2::Ident,
    phases: &'s [String],
    stages: &'s [proc_macro2::Ident],
}

/// A stage's type: its phase method (consuming the stage, returning the
/// next) or `finish`, `stop` before the last, `local` and `key`.
fn stage_item(
    at: &Stage<'_>,
    bare: &str,
    reply: &proc_macro2::Ident,
    done: &proc_macro2::Ident,
) -> TokenStream {
    let rt = rt();
    let Stage {
        index,
        stage,
        phases,
        stages,
    } = *at;
    let total = phases.len();
    let doc = if index == 0 {
        format!(
            " The phases of [`{bare}`](Api::{bare}), run in order: {}. Each phase method \
             consumes this value and returns the next stage, so none can be skipped.",
            phases
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!(
            " [`{bare}`](Api::{bare}) after its phase `{}` is recorded.",
            phases.get(index - 1).map_or("", String::as_str)
        )
    };
    let next = match (phases.get(index), stages.get(index + 1)) {
        (Some(phase), Some(next_stage)) => {
            let mut names = Namer::reserving(&["local", "stop", "finish", "key", "reconciling"]);
            let step_method = ident(&names.unique(&naming::snake(phase, "phase")));
            let doc = format!(
                "Phase {} of {total}: `{phase}`, a foreign call. Its intent is recorded \
                 first; `call` gets the key to hand the foreign system (the same on every \
                 attempt, takeover and completer run) and whether an earlier attempt may \
                 already have reached it. Its output is recorded as the recovery point: once \
                 it is, this phase never runs again for this request.\n\n\
                 When the call does not succeed, `call` says which way: \
                 `PhaseError::Final(reply)` ends the operation with that documented answer \
                 (a refusal: stored and replayed to every retry), \
                 `PhaseError::Transient(reason)` runs the phase again later, on the \
                 backoff schedule, until it succeeds or the schedule runs out.",
                index + 1
            );
            let doc = doc_attrs(&doc);
            quote! {
                #doc
                pub async fn #step_method<T, F, Fut>(self, call: F) -> ::std::result::Result<(T, #next_stage<'a, DB>), #rt::StepError>
                where
                    T: ::idem_runtime::rt::serde::Serialize + ::idem_runtime::rt::serde::de::DeserializeOwned,
                    F: ::std::ops::FnOnce(#rt::ForeignCall) -> Fut,
                    Fut: ::std::future::Future<Output = ::std::result::Result<T, #rt::PhaseError<#reply>>>,
                {
                    let output = self.run.phase(#phase, call, #reply::into_reply).await?;
                    ::std::result::Result::Ok((output, #next_stage { run: self.run }))
                }
            }
        }
        _ => quote! {
            /// Every phase is recorded: the reply, stored and replayed for
            /// every retry with this key.
            pub fn finish(self, reply: #reply) -> #done {
                #done(reply)
            }
        },
    };
    let stop = (index < total).then(|| {
        quote! {
            /// Answers now, without the remaining phases (a declined card):
            /// stored and replayed like any answer.
            pub fn stop(self, reply: #reply) -> #done {
                #done(reply)
            }
        }
    });
    quote! {
        #[doc = #doc]
        pub struct #stage<'a, DB: #rt::Backend> {
            run: &'a mut #rt::Run<DB>,
        }

        impl<DB: #rt::Backend> ::std::fmt::Debug for #stage<'_, DB> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Debug::fmt(&*self.run, f)
            }
        }

        impl<'a, DB: #rt::Backend> #stage<'a, DB> {
            #next

            #stop

            /// A local step: `f`'s writes commit together with the step's
            /// recorded output; a resumed request gets the output back
            /// without running `f` again.
            pub async fn local<T, F>(&mut self, step: &str, f: F) -> ::std::result::Result<T, #rt::StepError>
            where
                T: ::idem_runtime::rt::serde::Serialize + ::idem_runtime::rt::serde::de::DeserializeOwned,
                F: for<'t> ::std::ops::FnOnce(&'t mut DB::Connection) -> #rt::BoxFuture<'t, ::std::result::Result<T, #rt::StepError>>,
            {
                self.run.local(step, f).await
            }

            /// The caller's idempotency key.
            pub fn key(&self) -> &str {
                self.run.key()
            }
        }
    }
}
