//! Clients generated from the fixtures by `build.rs`, compiled with every
//! warning denied.
#![deny(warnings)]

/// `fixtures/shop.yaml`: every body encoding, typed errors, headers, auth.
pub mod shop {
    idem_runtime::include_api!("shop");
}

/// `fixtures/payments-clean.yaml`.
pub mod payments {
    idem_runtime::include_api!("payments");
}

/// `fixtures/constraints.yaml`: every validation keyword, typed formats,
/// and content negotiation.
pub mod constraints {
    idem_runtime::include_api!("constraints");
}

/// `fixtures/bearer.yaml`: keys scoped by the caller's credential.
pub mod bearer {
    idem_runtime::include_api!("bearer");
}

/// `fixtures/cratebase.yaml`.
pub mod cratebase {
    idem_runtime::include_api!("cratebase");
}

/// `fixtures/hostile-names.yaml`: keywords, digits, unicode, collisions.
pub mod hostile {
    idem_runtime::include_api!("hostile");
}

/// `fixtures/streams.yaml`: lists that page (Stripe, cursor, `Link`,
/// dropshot, `x-pagination`), a streamed completion, a download.
pub mod streams {
    idem_runtime::include_api!("streams");
}

/// `fixtures/docs-hostile.yaml`: hostile text, and `in-flight: accepted`.
pub mod docs_hostile {
    idem_runtime::include_api!("docs_hostile");
}

/// `fixtures/tagged.yaml`, its `orders` tag only: the operations and the
/// schemas they reach, nothing else.
pub mod tagged_orders {
    idem_runtime::include_api!("tagged_orders");
}

/// `fixtures/uploads.yaml`: raw-byte uploads, keyed and not, read by the
/// handler as they arrive.
pub mod uploads {
    idem_runtime::include_api!("uploads");
}

/// `fixtures/described-keys.yaml`: AWS's `ClientToken` body field and
/// Google's `requestId` query parameter, keys by what they say.
pub mod described_keys {
    idem_runtime::include_api!("described_keys");
}

/// `fixtures/staybright.yaml`: a base path, and a path segment nobody declared.
pub mod staybright {
    idem_runtime::include_api!("staybright");
}

/// `fixtures/hotel.yaml`: an API described in prose only.
pub mod hotel {
    idem_runtime::include_api!("hotel");
}

/// `fixtures/directory/`: one module per minimal case of what real specs
/// from APIs.guru's directory broke.
pub mod directory {
    include!(concat!(env!("OUT_DIR"), "/directory.rs"));
}
