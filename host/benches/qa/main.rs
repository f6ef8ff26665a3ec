//! Question-answering eval of the embedded offline model (bench/qa/eval.toml):
//! every case asked through the real host (App::ask, the kb-retrieval plugin,
//! the index), once with the answerer the product ships and once with the old
//! passage-pasting one (old.rs), printed side by side.
//!
//! Run: cargo bench -p capstan --bench qa
//! (QA_VERBOSE=1 also prints every case the new answerer gets wrong.)
//!
//! The `python-faq` set is the FAQ of Debian's python3.11-doc; when it is not in
//! the cache ($CAPSTAN_BENCH_CORPUS, default /work/.cache/capstan-bench) this
//! runs bench/kb/fetch-corpus.sh to fetch it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A bench prints its own figures for the developer who runs it.
#![allow(clippy::disallowed_macros)]

mod old;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use capstan::plugins::services::approval::ApproveMode;
use capstan::run::app::{App, AskRequest, Frontend};
use capstan_protocol::{Citation, Envelope, Event};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize)]
struct Eval {
    case: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    set: String,
    ask: String,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    fact: Vec<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    absent: bool,
}

/// How an answer says the workspace holds no answer (new answerer first).
const SAYS_ABSENT: &[&str] = &[
    "The workspace does not say",
    "I found nothing in the workspace",
    "I could not complete this",
];

#[derive(Default)]
struct Score {
    answerable: u32,
    fact: u32,
    file: u32,
    fact_and_file: u32,
    only_right_file: u32,
    follow_ups: u32,
    follow_ups_right: u32,
    absent: u32,
    honest: u32,
    invented: u32,
    wrong: u32,
    lengths: Vec<usize>,
    misses: Vec<String>,
}

impl Score {
    fn add(&mut self, case: &Case, text: &str, citations: &[Citation]) {
        self.lengths.push(text.chars().count());
        let says_absent = SAYS_ABSENT.iter().any(|s| text.contains(s));
        if case.absent {
            self.absent += 1;
            if says_absent {
                self.honest += 1;
            } else {
                self.invented += 1;
                self.misses
                    .push(format!("INVENTED {}: {}", case.ask, one_line(text)));
            }
            return;
        }
        self.answerable += 1;
        let lower = text.to_lowercase();
        let fact = case.fact.iter().any(|f| lower.contains(&f.to_lowercase()));
        let file = case.file.as_deref();
        let cited = citations.iter().any(|c| Some(c.path.as_str()) == file);
        self.fact += fact as u32;
        self.file += cited as u32;
        self.fact_and_file += (fact && cited) as u32;
        self.only_right_file +=
            (cited && citations.iter().all(|c| Some(c.path.as_str()) == file)) as u32;
        if case.before.is_some() {
            self.follow_ups += 1;
            self.follow_ups_right += (fact && cited) as u32;
        }
        if !says_absent && !fact {
            self.wrong += 1;
        }
        if !(fact && cited) {
            let cites: Vec<&str> = citations.iter().map(|c| c.path.as_str()).collect();
            self.misses.push(format!(
                "MISS {}{}: {} {:?}",
                case.before
                    .as_deref()
                    .map(|b| format!("[after {b}] "))
                    .unwrap_or_default(),
                case.ask,
                one_line(text),
                cites
            ));
        }
    }

    fn median(&self) -> usize {
        let mut l = self.lengths.clone();
        l.sort();
        l.get(l.len() / 2).copied().unwrap_or(0)
    }
}

fn one_line(s: &str) -> String {
    let s = s.replace('\n', " ⏎ ");
    s.chars().take(220).collect()
}

fn pct(a: u32, b: u32) -> String {
    if b == 0 {
        return "-".into();
    }
    format!("{a}/{b} ({:.0}%)", 100.0 * a as f64 / b as f64)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a workspace directory");
    for e in std::fs::read_dir(from).expect("read a corpus directory") {
        let e = e.expect("a directory entry");
        if e.file_type().expect("a file type").is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy a corpus file");
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspaces of the eval's sets, copied under `root`.
fn workspaces(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let handbook = root.join("handbook");
    copy_dir(&repo().join("examples/handbook"), &handbook);
    out.insert("handbook".to_string(), handbook);

    let cache = std::env::var_os("CAPSTAN_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/.cache/capstan-bench"));
    let faq = cache.join("python3.11-doc/usr/share/doc/python3.11/html/_sources/faq");
    if !faq.is_dir() {
        println!("fetching the Python documentation (bench/kb/fetch-corpus.sh)...");
        let ok = std::process::Command::new("bash")
            .arg(repo().join("bench/kb/fetch-corpus.sh"))
            .status()
            .is_ok_and(|s| s.success());
        if !ok || !faq.is_dir() {
            eprintln!(
                "qa bench: {} is missing and bench/kb/fetch-corpus.sh could not fetch it \
                 (it needs apt-get and dpkg-deb)",
                faq.display()
            );
            std::process::exit(1);
        }
    }
    let python = root.join("python-faq");
    copy_dir(&faq, &python.join("faq"));
    println!("python-faq set: {}", faq.display());
    out.insert("python-faq".to_string(), python);
    out
}

async fn ask(
    app: &App,
    message: &str,
    workspace: &Path,
    session: Option<String>,
) -> (String, String, Vec<Citation>) {
    let seen = Arc::new(Mutex::new(None));
    let sink = seen.clone();
    let frontend: Frontend = Arc::new(move |e: &Arc<Envelope>| {
        if let Event::ResponseCompleted { text, citations } = &e.event {
            *sink.lock().expect("the answer slot") = Some((text.clone(), citations.clone()));
        }
    });
    let out = app
        .ask(
            AskRequest {
                message: message.into(),
                session_id: session,
                workspace: Some(workspace.to_path_buf()),
                quota: None,
            },
            frontend,
            CancellationToken::new(),
        )
        .await
        .expect("a run");
    let (text, citations) = seen
        .lock()
        .expect("the answer slot")
        .take()
        .unwrap_or_default();
    (out.session_id, text, citations)
}

async fn run(app: &App, eval: &Eval, spaces: &BTreeMap<String, PathBuf>) -> Score {
    let mut score = Score::default();
    for case in &eval.case {
        let ws = &spaces[&case.set];
        let session = match &case.before {
            Some(before) => Some(ask(app, before, ws, None).await.0),
            None => None,
        };
        let (_, text, citations) = ask(app, &case.ask, ws, session).await;
        score.add(case, &text, &citations);
    }
    score
}

fn main() {
    capstan_sandbox::set_launcher(env!("CARGO_BIN_EXE_capstan"));
    let file = repo().join("bench/qa/eval.toml");
    let eval: Eval =
        toml::from_str(&std::fs::read_to_string(&file).expect("bench/qa/eval.toml is readable"))
            .expect("bench/qa/eval.toml parses");
    let root = tempfile::tempdir().expect("a temporary directory");
    let spaces = workspaces(root.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (old_score, new_score) = rt.block_on(async {
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("config")).expect("a config directory");
        std::fs::write(home.join("config/capstan.toml"), "").expect("an empty capstan.toml");
        let mut app = App::open(capstan::dirs::Dirs::under(&home), ApproveMode::None)
            .await
            .expect("the app opens");
        let new_model = app.model.clone();
        app.model = Arc::new(old::OldOfflineModel);
        let old_score = run(&app, &eval, &spaces).await;
        app.model = new_model;
        let new_score = run(&app, &eval, &spaces).await;
        (old_score, new_score)
    });
    let sets: BTreeMap<&str, usize> = eval.case.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.set.as_str()).or_default() += 1;
        m
    });
    println!(
        "\n## Offline answerer eval: {} cases ({})\n",
        eval.case.len(),
        sets.iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("| | old (pasted passages) | new (extracted answer) |\n|---|---|---|");
    type Row = (&'static str, fn(&Score) -> String);
    let rows: [Row; 10] = [
        ("fact found", |s| pct(s.fact, s.answerable)),
        ("right file cited", |s| pct(s.file, s.answerable)),
        ("fact + right file (goal ≥ 90%)", |s| {
            pct(s.fact_and_file, s.answerable)
        }),
        ("only the right file cited", |s| {
            pct(s.only_right_file, s.answerable)
        }),
        ("median answer length, chars (goal < 250)", |s| {
            s.median().to_string()
        }),
        ("follow-ups right (goal ≥ 80%)", |s| {
            pct(s.follow_ups_right, s.follow_ups)
        }),
        ("honest \"not in the workspace\"", |s| {
            pct(s.honest, s.absent)
        }),
        ("invented answers (goal 0)", |s| s.invented.to_string()),
        ("answered without the fact", |s| s.wrong.to_string()),
        ("answerable cases", |s| s.answerable.to_string()),
    ];
    for (name, f) in rows {
        println!("| {name} | {} | {} |", f(&old_score), f(&new_score));
    }
    if std::env::var_os("QA_VERBOSE").is_some() {
        println!("\nNew answerer's misses:");
        for m in &new_score.misses {
            println!("- {m}");
        }
    }
}
