//! Both providers over real HTTP against the scripted server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use capstan_models::scripted::{Reply, ScriptedServer, Wire};
use capstan_models::{
    Anthropic, ChatRequest, HttpOptions, Message, ModelError, ModelProvider, OpenAiCompatible,
    ProviderConfig, ProviderKind, ProviderSettings, RetryPolicy, StreamEvent, Usage,
};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Generous bound for "promptly": only catches hangs, not slowness.
const PROMPT: Duration = Duration::from_secs(5);

fn fast_http() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(5),
        },
    }
}

fn openai_with(server: &ScriptedServer, http: HttpOptions) -> OpenAiCompatible {
    OpenAiCompatible::new(
        ProviderSettings::new(server.openai_base_url())
            .api_key("sk-test")
            .key_env("TEST_OPENAI_KEY")
            .http(http),
    )
    .unwrap()
}

fn openai(server: &ScriptedServer) -> OpenAiCompatible {
    openai_with(server, fast_http())
}

fn anthropic(server: &ScriptedServer) -> Anthropic {
    Anthropic::new(
        ProviderSettings::new(server.base_url())
            .api_key("ak-test")
            .key_env("TEST_ANTHROPIC_KEY")
            .http(fast_http()),
    )
    .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest::new(
        "test-model",
        vec![
            Message::system("You are terse."),
            Message::user("first question"),
            Message::assistant("first answer"),
            Message::user("second question"),
        ],
    )
}

/// All items of a stream, stopping at the first error.
async fn collect(
    p: &dyn ModelProvider,
    req: ChatRequest,
) -> Result<(Vec<StreamEvent>, Option<ModelError>), ModelError> {
    let mut stream = p.stream(req, CancellationToken::new()).await?;
    let mut events = Vec::new();
    let result = tokio::time::timeout(PROMPT, async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(ev) => events.push(ev),
                Err(e) => return Some(e),
            }
        }
        None
    })
    .await
    .expect("stream ended within the bound");
    Ok((events, result))
}

fn deltas(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Delta(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn openai_streams_deltas_in_order_and_reports_usage() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["Hel", "lo", " world"]).with_usage(12, 3));
    let (events, err) = collect(&openai(&server), request()).await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events,
        vec![
            StreamEvent::Delta("Hel".into()),
            StreamEvent::Delta("lo".into()),
            StreamEvent::Delta(" world".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 3,
                estimated: false,
                cost_usd: None,
            }),
            StreamEvent::Done {
                stop_reason: Some("stop".into())
            },
        ]
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.wire, Wire::OpenAi);
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.body["stream"], true);
    assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(r.model(), "test-model");
    assert_eq!(
        r.body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
        ])
    );
    assert!(r.body.get("response_format").is_none());
}

#[tokio::test]
async fn anthropic_streams_deltas_in_order_and_reports_usage() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["Bon", "jour"]).with_usage(40, 7));
    let (events, err) = collect(&anthropic(&server), request()).await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events,
        vec![
            StreamEvent::Delta("Bon".into()),
            StreamEvent::Delta("jour".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 40,
                output_tokens: 7,
                estimated: false,
                cost_usd: None,
            }),
            StreamEvent::Done {
                stop_reason: Some("end_turn".into())
            },
        ]
    );

    let r = &server.requests()[0];
    assert_eq!(r.wire, Wire::Anthropic);
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("ak-test"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.header("authorization").is_none());
    assert_eq!(r.body["stream"], true);
    assert_eq!(r.body["system"], "You are terse.");
    assert_eq!(r.body["max_tokens"], 4096);
    assert_eq!(r.messages().len(), 4); // system + 3 turns
    assert_eq!(r.last_user_text().as_deref(), Some("second question"));
    assert!(r.prompt_text().contains("first answer"), "history was sent");
}

#[tokio::test]
async fn openai_path_without_v1_works_too() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["ok"]).with_usage(1, 1));
    let p =
        OpenAiCompatible::new(ProviderSettings::new(server.base_url()).http(fast_http())).unwrap();
    let c = p
        .complete(request(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "ok");
    let r = &server.requests()[0];
    assert_eq!(r.path, "/chat/completions");
    assert!(
        r.header("authorization").is_none(),
        "no key configured, none sent"
    );
}

#[tokio::test]
async fn usage_is_estimated_when_the_server_reports_none() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["abcde", "fgh"])); // 8 chars out, no usage
    server.push(Reply::text(["abcde", "fgh"]));
    let req = ChatRequest::new("m", vec![Message::user("0123456789")]); // 10 chars in
    let want = Usage {
        input_tokens: 3,
        output_tokens: 2,
        estimated: true,
        cost_usd: None,
    };

    let c = openai(&server)
        .complete(req.clone(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "abcdefgh");
    assert_eq!(c.usage, want);

    let c = anthropic(&server)
        .complete(req, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "abcdefgh");
    assert_eq!(c.usage, want);
}

#[tokio::test]
async fn retries_a_500_then_succeeds() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::status(500));
    server.push(Reply::text(["fine"]).with_usage(5, 1));
    let c = openai(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "fine");
    assert_eq!(server.request_count(), 2);

    server.push(Reply::status(529).error_message("Overloaded"));
    server.push(Reply::text(["also fine"]).with_usage(5, 2));
    let c = anthropic(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "also fine");
    assert_eq!(server.request_count(), 4);
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = ScriptedServer::start().await.unwrap();
    for _ in 0..5 {
        server.push(Reply::status(503).error_message("try later"));
    }
    let err = openai(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Http { status: 503, body_excerpt } if body_excerpt == "try later"),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 3, "1 attempt + max_retries 2");
    assert!(err.to_string().contains("503"), "{err}");
}

#[tokio::test]
async fn honours_retry_after_and_gives_up_on_a_long_one() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::status(429).header("retry-after", "0.2"));
    server.push(Reply::text(["ok"]).with_usage(1, 1));
    let t = Instant::now();
    let c = openai(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "ok");
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "waited for retry-after"
    );
    assert_eq!(server.request_count(), 2);

    // Longer than max_retry_after (5 s): returned at once rather than waited for.
    server.push(Reply::status(429).header("retry-after", "3600"));
    server.push(Reply::text(["never"]));
    let err = openai(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Http { status: 429, .. }),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn retries_a_stream_cut_before_the_first_token() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["lost"]).truncate_after(0));
    server.push(Reply::text(["kept"]).with_usage(3, 1));
    let (events, err) = collect(&anthropic(&server), request()).await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(deltas(&events), vec!["kept"]);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn retries_an_overloaded_error_event_before_the_first_token() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::raw_sse(
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    ));
    server.push(Reply::text(["ok"]).with_usage(3, 1));
    let c = anthropic(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.text, "ok");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn no_retry_after_the_first_token() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let server = ScriptedServer::start().await.unwrap();
        server.push(Reply::text(["one", "two", "three"]).truncate_after(1));
        server.push(Reply::text(["would duplicate"]));
        let p: Box<dyn ModelProvider> = match wire {
            Wire::OpenAi => Box::new(openai(&server)),
            Wire::Anthropic => Box::new(anthropic(&server)),
        };
        let (events, err) = collect(p.as_ref(), request()).await.unwrap();
        assert_eq!(deltas(&events), vec!["one"], "{wire:?}");
        assert!(
            matches!(err, Some(ModelError::Unavailable(_))),
            "{wire:?}: {err:?}"
        );
        assert_eq!(server.request_count(), 1, "{wire:?}: not retried");
        assert_eq!(server.pending_replies(), 1);
    }
}

#[tokio::test]
async fn unauthorized_is_an_auth_error_that_names_the_env_var() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::status(401).error_message("Incorrect API key provided"));
    let err = openai(&server)
        .stream(request(), CancellationToken::new())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, ModelError::Auth { status: 401, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("check the API key in the TEST_OPENAI_KEY env var"),
        "{msg}"
    );
    assert!(msg.contains("Incorrect API key provided"), "{msg}");
    assert_eq!(server.request_count(), 1, "auth errors are not retried");

    server.push(Reply::status(403).error_message("no access"));
    let err = anthropic(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Auth { status: 403, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("TEST_ANTHROPIC_KEY"), "{err}");
}

#[tokio::test]
async fn cancel_mid_stream_stops_promptly_and_closes_the_connection() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let server = ScriptedServer::start().await.unwrap();
        server.push(Reply::text(["first", "never"]).hang_after(1));
        let p: Box<dyn ModelProvider> = match wire {
            Wire::OpenAi => Box::new(openai(&server)),
            Wire::Anthropic => Box::new(anthropic(&server)),
        };
        let cancel = CancellationToken::new();
        let mut stream = p.stream(request(), cancel.clone()).await.unwrap();
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            StreamEvent::Delta("first".into())
        );

        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            canceller.cancel();
        });
        let next = tokio::time::timeout(PROMPT, stream.next())
            .await
            .expect("cancel ends the stream");
        assert!(
            matches!(next, Some(Err(ModelError::Cancelled))),
            "{wire:?}: {next:?}"
        );
        assert!(stream.next().await.is_none(), "nothing after an error");
        drop(stream);
        assert!(
            server.wait_for_aborted(1, PROMPT).await,
            "{wire:?}: server saw the disconnect"
        );
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["first", "never"]).hang_after(1));
    let p = openai(&server);
    let mut stream = p.stream(request(), CancellationToken::new()).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamEvent::Delta("first".into())
    );
    drop(stream);
    assert!(server.wait_for_aborted(1, PROMPT).await);
    assert_eq!(server.completed_streams(), 0);
}

#[tokio::test]
async fn cancel_during_retry_backoff_is_prompt() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::status(500));
    let mut http = fast_http();
    http.retry.base_delay = Duration::from_secs(60);
    http.retry.max_delay = Duration::from_secs(60);
    let p = openai_with(&server, http);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let res = tokio::time::timeout(PROMPT, p.stream(request(), cancel))
        .await
        .expect("prompt");
    assert!(matches!(res, Err(ModelError::Cancelled)), "{:?}", res.err());
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn idle_timeout_between_chunks() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["a", "b"]).hang_after(1));
    let mut http = fast_http();
    http.idle_timeout = Duration::from_millis(200);
    let (events, err) = collect(&openai_with(&server, http), request())
        .await
        .unwrap();
    assert_eq!(deltas(&events), vec!["a"]);
    let err = err.expect("an error");
    assert!(
        matches!(&err, ModelError::Unavailable(m) if m.contains("idle timeout")),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 1, "not retried after a token");
}

#[tokio::test]
async fn malformed_sse_is_a_protocol_error() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::raw_sse("data: {\"choices\": [\n\n"));
    let (events, err) = collect(&openai(&server), request()).await.unwrap();
    assert!(events.is_empty());
    assert!(matches!(err, Some(ModelError::Protocol(_))), "{err:?}");
    assert_eq!(server.request_count(), 1, "protocol errors are not retried");

    server.push(Reply::raw_sse(
        "event: content_block_delta\ndata: <html>\n\n",
    ));
    let err = anthropic(&server)
        .complete(request(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Protocol(_)), "{err:?}");

    server.push(Reply::raw("text/html", "<html>hello</html>"));
    let err = openai(&server)
        .stream(request(), CancellationToken::new())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ModelError::Protocol(m) if m.contains("text/html")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_is_understood() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::raw(
        "application/json",
        json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
        })
        .to_string(),
    ));
    let (events, err) = collect(&openai(&server), request()).await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        events,
        vec![
            StreamEvent::Delta("whole".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 4,
                output_tokens: 1,
                estimated: false,
                cost_usd: None,
            }),
            StreamEvent::Done {
                stop_reason: Some("stop".into())
            },
        ]
    );
}

#[tokio::test]
async fn json_schema_is_response_format_for_openai_and_an_instruction_for_anthropic() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["{}"]).with_usage(1, 1));
    server.push(Reply::text(["{}"]).with_usage(1, 1));
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
    let mut req = request();
    req.json_schema = Some(schema.clone());
    req.max_tokens = Some(64);
    req.temperature = Some(0.5);
    openai(&server)
        .complete(req.clone(), CancellationToken::new())
        .await
        .unwrap();
    anthropic(&server)
        .complete(req, CancellationToken::new())
        .await
        .unwrap();

    let reqs = server.requests();
    assert_eq!(
        reqs[0].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
    );
    assert_eq!(reqs[0].body["max_tokens"], 64);
    assert_eq!(reqs[0].body["temperature"], 0.5);
    let system = reqs[1].body["system"].as_str().unwrap();
    assert!(
        system.contains("JSON Schema") && system.contains("\"answer\""),
        "{system}"
    );
    assert!(reqs[1].body.get("response_format").is_none());
    assert_eq!(reqs[1].body["max_tokens"], 64);
}

#[tokio::test]
async fn connection_refused_is_unavailable_after_retries() {
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = OpenAiCompatible::new(
        ProviderSettings::new(format!("http://127.0.0.1:{port}/v1")).http(fast_http()),
    )
    .unwrap();
    let err = tokio::time::timeout(PROMPT, p.complete(request(), CancellationToken::new()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Unavailable(m) if m.contains("cannot connect")),
        "{err:?}"
    );
    assert!(err.to_string().contains("is the server running"), "{err}");
}

#[tokio::test]
async fn build_from_config_uses_the_default_model_and_key_env() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["a"]).with_usage(1, 1));
    server.push(Reply::text(["b"]).with_usage(1, 1));

    let mut cfg = ProviderConfig::new(ProviderKind::OpenAi, "qwen2.5:7b");
    cfg.base_url = Some(server.openai_base_url());
    cfg.api_key_env = Some("MY_KEY".into());
    let env = |v: &str| (v == "MY_KEY").then(|| "secret-1".to_string());
    let p = capstan_models::build_with_env(&cfg, &env).unwrap();
    let req = ChatRequest::new("", vec![Message::user("hi")]);
    assert_eq!(
        p.complete(req.clone(), CancellationToken::new())
            .await
            .unwrap()
            .text,
        "a"
    );

    let mut cfg = ProviderConfig::new(ProviderKind::Anthropic, "claude-haiku-4-5");
    cfg.base_url = Some(server.base_url());
    let env = |v: &str| (v == "ANTHROPIC_API_KEY").then(|| "secret-2".to_string());
    let p = capstan_models::build_with_env(&cfg, &env).unwrap();
    assert_eq!(p.id(), "anthropic");
    assert_eq!(
        p.complete(req, CancellationToken::new())
            .await
            .unwrap()
            .text,
        "b"
    );

    let reqs = server.requests();
    assert_eq!(reqs[0].model(), "qwen2.5:7b");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer secret-1"));
    assert_eq!(reqs[1].model(), "claude-haiku-4-5");
    assert_eq!(reqs[1].header("x-api-key"), Some("secret-2"));
}

/// A TCP server that accepts connections and never answers; reports each connection's
/// end (the client closing it) on the channel.
async fn silent_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                // Read the request and ignore it; a 0-byte read or an error is the close.
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                let _ = tx.send(());
            });
        }
    });
    (url, rx)
}

#[tokio::test]
async fn cancel_while_waiting_for_headers_closes_the_connection() {
    let (url, mut closed) = silent_server().await;
    let p = OpenAiCompatible::new(ProviderSettings::new(url).http(fast_http())).unwrap();
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let res = tokio::time::timeout(PROMPT, p.stream(request(), cancel))
        .await
        .expect("prompt");
    assert!(matches!(res, Err(ModelError::Cancelled)), "{:?}", res.err());
    tokio::time::timeout(PROMPT, closed.recv())
        .await
        .expect("the connection was closed")
        .unwrap();
}

#[tokio::test]
async fn header_timeout_is_unavailable_and_retried() {
    let (url, mut closed) = silent_server().await;
    let mut http = fast_http();
    http.timeout = Duration::from_millis(150);
    http.retry.max_retries = 1;
    let p = OpenAiCompatible::new(ProviderSettings::new(url).http(http)).unwrap();
    let err = tokio::time::timeout(PROMPT, p.complete(request(), CancellationToken::new()))
        .await
        .expect("bounded")
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Unavailable(m) if m.contains("no response")),
        "{err:?}"
    );
    for _ in 0..2 {
        // Two attempts, each connection closed by the client when it gave up.
        tokio::time::timeout(PROMPT, closed.recv())
            .await
            .expect("closed")
            .unwrap();
    }
}
