//! How a body in one media type travels: the encodings the client sends and
//! reads, and the server too.

/// How a body in one media type is sent or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Form,
    Multipart,
    Text,
    Bytes,
}

pub fn encoding_of(media: &str) -> Encoding {
    let media = media.to_ascii_lowercase();
    let essence = media.split(';').next().unwrap_or("").trim();
    if essence == "application/json"
        || essence.ends_with("+json")
        || essence == "*/*"
        || essence.ends_with("/json")
    {
        Encoding::Json
    } else if essence == "application/x-www-form-urlencoded" {
        Encoding::Form
    } else if essence == "multipart/form-data" || essence.starts_with("multipart/") {
        Encoding::Multipart
    } else if essence.starts_with("text/") || essence.ends_with("+xml") || essence.ends_with("/xml")
    {
        Encoding::Text
    } else {
        Encoding::Bytes
    }
}

pub fn encoding_name(enc: Encoding) -> &'static str {
    match enc {
        Encoding::Json => "Json",
        Encoding::Form => "Form",
        Encoding::Multipart => "Multipart",
        Encoding::Text => "Text",
        Encoding::Bytes => "Bytes",
    }
}
