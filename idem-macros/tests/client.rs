//! `client!` generates a typed client where it is invoked, and the client
//! works: a keyed call over loopback carries a minted key.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed setup step should abort the test"
)]

mod payments {
    idem_macros::client!("../fixtures/payments-clean.yaml");
}

#[tokio::test]
async fn the_macro_client_sends_a_keyed_call() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = socket.read(&mut buf).await.unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        socket
            .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        head
    });
    let client = payments::Client::new(&format!("http://{addr}")).unwrap();
    let body = payments::CreateTransferRequest {
        vendor_id: Some("v_1".into()),
        amount: Some(100),
    };
    client.transfers().create(&body).send().await.unwrap();
    let head = server.await.unwrap();
    assert!(head.starts_with("post /v1/transfers"), "{head}");
    assert!(head.contains("idempotency-key: "), "{head}");
}
